"""The configuration imports no domain code, and no two packages of monitor/ import each other.

Any module (the daemon's parts, the CLIs, tests, tools) may import the section it reads from
`monitor.config` without pulling in the store, the metrics or Kafka; and the dependencies between
the packages of `monitor/` point one way, so each can be read (and imported) on its own.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MONITOR = REPO / "monitor"

# What the configuration may import besides itself and the standard library.
ALLOWED_THIRD_PARTY = {"pydantic", "pydantic_core", "pydantic_settings", "yaml"}
HEAVY = ("sqlalchemy", "aiokafka", "prometheus_client", "structlog", "openai", "numpy")


def _loaded_after(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after running `statement`."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{statement}; import json, sys; print(json.dumps(sorted(sys.modules)))",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_importing_the_configuration_loads_no_domain_code() -> None:
    loaded = _loaded_after("import monitor.config")
    ours = [m for m in loaded if m == "monitor" or m.startswith("monitor.")]
    assert [m for m in ours if m != "monitor" and not m.startswith("monitor.config")] == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_loading_settings_with_golden_suites_loads_no_domain_code(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "golden:\n  suites:\n    - name: s\n      dataset: d.yaml\n"
        "      service: {url: 'http://x/search', response: {doc_ids: 'results[*].id'},"
        " request_template: {q: '{{query}}'}}\n"
        "      targets: {recall_5: 0.8}\n",
        encoding="utf-8",
    )
    loaded = _loaded_after(
        f"from pathlib import Path\nfrom monitor.config import load_settings\n"
        f"load_settings(Path({str(config)!r}))"
    )
    ours = [m for m in loaded if m.startswith("monitor.")]
    assert [m for m in ours if not m.startswith("monitor.config")] == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """Modules a file imports (`from a import b` counts as `a` and `a.b`); TYPE_CHECKING
    blocks are left out, function bodies too when `top_level_only`."""
    found: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if top_level_only and nested:
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.add(child.module)
                found.update(f"{child.module}.{alias.name}" for alias in child.names)
            visit(child, nested)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def test_configuration_modules_import_only_pydantic_yaml_and_the_standard_library() -> None:
    wrong = []
    for path in sorted((MONITOR / "config").rglob("*.py")):
        for name in _imports(path, top_level_only=True):
            top = name.split(".")[0]
            if name == "monitor" or name.startswith("monitor.config"):
                continue
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if top not in ALLOWED_THIRD_PARTY:
                wrong.append(f"{path.relative_to(REPO)}: {name}")
    assert wrong == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    """The package a module belongs to (`monitor.golden.runner` -> `monitor.golden`); a
    top-level module is its own unit."""
    return ".".join(module.split(".")[:2])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle_between_the_packages_of_monitor() -> None:
    """Imports inside functions count too: deferring an import hides a cycle, it does not
    remove it."""
    modules = {_module_name(path): path for path in MONITOR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {
            _unit(imported)
            for imported in _imports(path, top_level_only=False)
            if imported in modules and imported != "monitor"
        }
        graph.setdefault(_unit(name), set()).update(targets - {_unit(name)})
    assert _cycles(graph) == []
