"""One registry for every `rag-monitor` subcommand, one set of exit codes for all of them."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from monitor.cli import build_parser, main
from monitor.command import HANDLER_KEY, ExitCode, Handler

REPO = Path(__file__).resolve().parents[1]

COMMANDS = [
    "run",
    "check-config",
    "schema",
    "score",
    "golden",
    "review",
    "topics",
    "demo",
    "agents",
]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _leaf_handlers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = (), inherited: Handler | None = None
) -> dict[tuple[str, ...], Handler | None]:
    """Every runnable command path and the handler it runs (a group's handler is inherited)."""
    handler = parser.get_default(HANDLER_KEY) or inherited
    children = _subcommands(parser)
    if not children:
        return {path: handler}
    found: dict[tuple[str, ...], Handler | None] = {}
    for name, child in children.items():
        found.update(_leaf_handlers(child, (*path, name), handler))
    return found


def test_help_lists_every_command_in_order() -> None:
    assert list(_subcommands(build_parser())) == COMMANDS


def test_every_command_runs_a_handler_that_returns_an_exit_code() -> None:
    handlers = _leaf_handlers(build_parser())
    expected_paths = {
        ("run",), ("check-config",), ("schema",), ("score",), ("review",), ("demo",),
        ("agents",), ("topics", "create"), ("golden", "score"), ("golden", "run"),
        ("golden", "agreement"), ("golden", "validate"),
    }  # fmt: skip
    assert set(handlers) == expected_paths
    for path, handler in handlers.items():
        assert handler is not None, f"{' '.join(path)} registers no handler"
        # Only the return annotation: the rest may name types imported for checking alone.
        returns = eval(handler.__annotations__["return"], handler.__globals__)
        assert returns is ExitCode, path


def test_exit_codes_are_the_documented_ones() -> None:
    """The numbers users script against: docs/cli.md's table lists exactly these."""
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("### Exit codes and errors", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, flags=re.M)}
    assert documented == {int(code) for code in ExitCode}
    assert (ExitCode.OK, ExitCode.TARGET_MISSED, ExitCode.USAGE) == (0, 1, 2)
    assert (ExitCode.UNAVAILABLE, ExitCode.COMPONENT_DIED, ExitCode.FORCED) == (3, 4, 130)


def test_no_module_keeps_exit_codes_of_its_own() -> None:
    """Exit codes come from `ExitCode` alone: no module-level EXIT_* constants anywhere."""
    own = []
    for path in sorted((REPO / "monitor").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("EXIT_"):
                    own.append(f"{path.relative_to(REPO)}: {target.id}")
    assert own == []


@pytest.mark.parametrize(
    "argv",
    [
        ["run"],
        ["check-config"],
        ["score", "--input", "-", "--output", "out.jsonl"],
        ["review"],
        ["agents"],
        ["topics", "create"],
        ["golden", "run", "search"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_every_command_with_a_config_exits_2_naming_the_bad_field(
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "bad.yaml"
    config.write_text("kafka:\n  topics: []\n", encoding="utf-8")
    try:
        code = main([*argv, "--config", str(config)])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE, err
    assert "kafka.topics" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()  # nothing was done
