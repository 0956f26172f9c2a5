"""Which of tier 0's modules the build compiles, and how the daemon reports it.

The compiled build itself (a wheel built as the image builds it, scoring the dev data exactly as
the sources do, its daemon exporting ``compiled="true"``) is tested through the image's install
steps in tests/test_dockerfile.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from monitor.compiled import MODULES, compiled_modules, tier0_compiled
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


def test_a_source_checkout_runs_tier0_from_its_sources_and_says_so() -> None:
    # A compiled wheel built from a checkout leaves its extension modules in the checkout
    # (mypyc builds in place), and Python would import them instead of the edited sources.
    assert compiled_modules() == (), (
        "compiled modules left in the checkout by a compiled build; remove them: "
        "rm monitor/evaluators/*.so rag_monitor__mypyc.*.so"
    )
    assert not tier0_compiled()
    registry = CollectorRegistry()
    Metrics(registry)
    exposition = generate_latest(registry).decode()
    assert 'ragmon_build_info{compiled="false",' in exposition
