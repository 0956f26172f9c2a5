"""The floors of the house follow the data: docs/architecture.md is what the code does, and the
imports of `monitor/` keep its rules (`scripts/architecture.py` holds both)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "architecture", ROOT / "scripts" / "architecture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


arch = _generator()


def _edges(*, import_time_only: bool) -> list[tuple[str, str, int]]:
    return [
        (module, imported, line)
        for module, path in arch.modules()
        for imported, line, at_import in arch.imports(path, module)
        if at_import or not import_time_only
    ]


def test_the_architecture_page_is_generated_from_the_code() -> None:
    page = arch.PAGE.read_text(encoding="utf-8")
    assert arch.rendered(page) == page, "stale: run python scripts/architecture.py"
    assert "score stage" in page and "assemble stage" in page


def test_the_generator_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "architecture.py"
    ok = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_every_unit_of_monitor_is_on_a_floor() -> None:
    units = {arch.unit_of(module) for module, _ in arch.modules()}
    placed = {unit for _, members, _ in arch.LAYERS for unit in members}
    assert units - placed == set(), "add new modules to LAYERS in scripts/architecture.py"
    assert placed - units == set(), "LAYERS names a unit that no longer exists"


def test_no_import_reaches_up_to_a_higher_floor() -> None:
    upward = [
        f"{module}:{line} imports {imported}"
        for module, imported, line in _edges(import_time_only=False)
        if arch.layer_of(arch.unit_of(imported)) > arch.layer_of(arch.unit_of(module))
    ]
    assert upward == []


def test_no_import_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    for module, imported, _ in _edges(import_time_only=True):
        if imported != module:
            graph.setdefault(module, set()).add(imported)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            # `from monitor.x import y` also runs monitor/__init__ and monitor/x/__init__:
            # package inits that re-export are part of the graph like any module.
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_only_the_sinks_touch_the_database() -> None:
    """Repositories in `monitor/sinks/` are the only code that imports SQLAlchemy or uses the
    store's engine."""
    offenders = []
    for module, path in arch.modules():
        if module.startswith("monitor.sinks."):
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"^\s*(from|import) sqlalchemy", text, re.MULTILINE) or "_engine" in text:
            offenders.append(module)
    assert offenders == []


def test_sources_only_yield_raw_messages() -> None:
    """A source knows no format and no stage: what a message holds is the router's to say."""
    reached = {
        (module, imported)
        for module, imported, _ in _edges(import_time_only=False)
        if module.startswith("monitor.sources")
        and arch.unit_of(imported) in {"formats", "stages", "sinks", "evaluators"}
    }
    assert reached == set()


@pytest.mark.parametrize("pattern", [r"DESIGN\.md", r"\.\./shared", r"export/metrics\.py"])
def test_no_file_points_at_a_document_outside_the_repository(pattern: str) -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    here = Path(__file__).relative_to(ROOT).as_posix()
    found = [
        name
        for name in tracked
        if name != here
        and name.endswith((".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".tpl", ".json"))
        and (ROOT / name).is_file()
        and re.search(pattern, (ROOT / name).read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []
