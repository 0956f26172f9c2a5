"""Test tiers: every test carries the markers of the services it uses, derived from its fixtures,
and scripts/test.sh knows how to set up every service a marker names."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import SERVICE_FIXTURES, SERVICES_FILE_ENV

REPO = Path(__file__).resolve().parents[1]


def _services_of(tmp_path: Path, *selection: str) -> set[str]:
    """The services scripts/test.sh would set up for `pytest <selection>`."""
    listing = tmp_path / f"services-{len(list(tmp_path.iterdir()))}.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *selection],
        cwd=REPO, env={**os.environ, SERVICES_FILE_ENV: str(listing)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return set(listing.read_text().split())


@pytest.mark.slow
def test_the_services_of_a_selection_come_from_the_fixtures_its_tests_use(
    tmp_path: Path,
) -> None:
    # postgres_url directly; through a fixture of the module that uses it; none at all.
    assert _services_of(
        tmp_path, "tests/test_store.py::test_postgresql_store_migrates_a_version_1_database"
    ) == {"postgres"}
    assert _services_of(
        tmp_path,
        "tests/test_security_kafka.py::test_secrets_never_appear_in_logs_metrics_errors_or_check_config",
    ) == {"kafka", "postgres"}
    assert _services_of(tmp_path, "tests/test_text.py") == set()
    # The fast tier needs no broker, Collector, model server, browser or test-app venv.
    assert _services_of(tmp_path, "-m", "not kafka and not slow") <= {
        "postgres", "prometheus", "ragas",
    }  # fmt: skip


def test_every_service_marker_is_registered_and_set_up_by_the_test_script() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    registered = {m.split(":")[0] for m in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    script = (REPO / "scripts" / "test.sh").read_text()
    set_up = set(re.findall(r"^if wants (\w+); then$", script, flags=re.M))
    assert set(SERVICE_FIXTURES) <= registered
    assert set_up == set(SERVICE_FIXTURES), "scripts/test.sh sets up each service, no other"


def test_a_service_fixture_is_defined_for_every_name_the_registry_lists() -> None:
    conftest = ast.parse((REPO / "tests" / "conftest.py").read_text())
    defined = {
        node.name
        for node in conftest.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    }
    for service, fixtures in SERVICE_FIXTURES.items():
        assert fixtures <= defined, f"{service}: {fixtures - defined} are not fixtures"
