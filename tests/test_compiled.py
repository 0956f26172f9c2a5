"""Which modules the build compiles (tier 0's, the OTLP path's), and how the daemon reports it.

The compiled build itself (a wheel built as the image builds it, scoring the dev data exactly as
the sources do, its daemon exporting ``compiled="true"``) is tested through the image's install
steps in tests/test_dockerfile.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.compiled import MODULES, compiled_modules, fully_compiled
from monitor.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent


def test_the_build_compiles_exactly_the_modules_the_daemon_reports_on() -> None:
    hooks = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    mypyc = hooks["targets"]["wheel"]["hooks"]["mypyc"]
    assert mypyc["enable-by-default"] is False, "a plain `pip install .` must need no compiler"
    compiled = {path.strip("/").removesuffix(".py").replace("/", ".") for path in mypyc["include"]}
    assert compiled == set(MODULES)
    for module in MODULES:
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), module


def test_a_source_checkout_runs_its_sources_and_says_so() -> None:
    # A compiled wheel built from a checkout leaves its extension modules in the checkout
    # (mypyc builds in place), and Python would import them instead of the edited sources.
    assert compiled_modules() == (), (
        "compiled modules left in the checkout by a compiled build; remove them: "
        "rm monitor/evaluators/*.so monitor/formats/*.so rag_monitor__mypyc.*.so"
    )
    assert not fully_compiled()
    registry = CollectorRegistry()
    Metrics(registry)
    exposition = generate_latest(registry).decode()
    assert 'ragmon_build_info{compiled="false",' in exposition


# The compiled modules' own tests that need no service: with the modules compiled, every one must
# pass as it does on the sources (the equivalence tests of tests/test_tier0_rewrites.py try
# thousands of texts against plain-Python references, which is where a compiled operation that
# differs from Python's shows: mypyc's own str.lower() once missed the final-sigma rule; the OTLP
# tests decode, split, salvage and map every instrumentation's recorded shapes, and fuzz the
# decoders).
COMPILED_TESTS = (
    "tests/test_tier0_rewrites.py",
    "tests/test_tier0_fingerprint.py",
    "tests/test_text.py",
    "tests/test_language.py",
    "tests/test_grounding.py",
    "tests/test_context_text.py",
    "tests/test_heuristic.py",
    "tests/test_trace_constraints.py",
    "tests/test_cross_language.py",
    "tests/test_otlp.py",
    "tests/test_otlp_assembly.py",
    "tests/test_otlp_logs.py",
    "tests/test_otlp_mapping.py",
    "tests/test_otlp_openllmetry_documents.py",
    "tests/test_otlp_salvage.py",
    "tests/test_otlp_file_source.py",
    "tests/test_fuzz_decoders.py",
)
# Their tests that need a service (the Kafka broker, PostgreSQL) are left out here.
WITHOUT_SERVICES = "not slow and not kafka and not postgres"
TREE = ("monitor", "tests", "bench", "data", "pyproject.toml", "README.md")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_compiled_modules_tests_pass_against_the_compiled_build(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for name in TREE:
        source = ROOT / name
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
            shutil.copytree(source, tree / name, ignore=ignore)
        else:
            shutil.copy2(source, tree / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHONPATH"))}
    # The compiled build writes its extension modules beside the sources it compiled: this
    # copy becomes a checkout whose compiled modules run compiled.
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
         str(tmp_path / "wheels"), str(tree)],
        env=env | {"HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    asked = subprocess.run(
        [
            sys.executable,
            "-c",
            "from monitor.compiled import compiled_modules as c; print(len(c()))",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert asked.stdout.strip() == str(len(MODULES)), asked.stdout + asked.stderr
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", WITHOUT_SERVICES,
         *COMPILED_TESTS],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    summary = tested.stdout.strip().splitlines()[-1] if tested.stdout.strip() else ""
    assert tested.returncode == 0, tested.stdout[-6000:] + tested.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
