"""`rag-monitor` answers at once: parsing loads nothing heavy, every help page describes its
command and shows its defaults, and a usage error names the subcommand it was given to."""

from __future__ import annotations

import argparse
import re
import sys

import pytest

from monitor.cli import build_parser
from tests.support.cli import rag_monitor as _cli
from tests.support.cli_imports import probe


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.update(_commands(child, (*path, name)))
    return found


def test_parsing_every_command_line_imports_no_heavy_module() -> None:
    result = probe(sys.executable)
    assert result["loaded"] == [], f"imported before a handler ran: {result['loaded']}"
    assert result["parsed"] == len(_commands(build_parser())) + 5  # every help page was parsed


def test_the_probe_sees_a_heavy_module_when_one_is_imported() -> None:
    assert probe(sys.executable, first="import scipy.stats")["loaded"] == ["numpy", "scipy"]


def _option_help(page: str, option: str) -> str:
    """The help text of one option on a help page, on one line."""
    entries = re.split(r"\n  (?=-)", page.split("\noptions:\n", 1)[1])
    entry = next(e for e in entries if re.match(rf"\s*(-\w, )?{option}\b", e))
    return " ".join(entry.split())


def test_every_help_page_describes_its_command_and_shows_defaults() -> None:
    for path, parser in _commands(build_parser()).items():
        name = " ".join(("rag-monitor", *path))
        assert parser.description, f"{name} --help has no description"
        page = parser.format_help()
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{name} {action.dest}: no help"
            default = action.default
            shown = default not in (None, argparse.SUPPRESS) and not isinstance(default, bool)
            if action.option_strings and shown and action.help != argparse.SUPPRESS:
                line = _option_help(page, action.option_strings[-1])
                assert "default" in line.lower(), f"{name}: {line}"


def test_a_help_page_shows_the_default_of_an_option() -> None:
    page = _commands(build_parser())[("demo",)].format_help()
    assert _option_help(page, "--port").endswith("the daemon's HTTP port (0: any) (default: 9820)")
    assert page.startswith("usage: rag-monitor demo")


def test_an_unknown_option_is_reported_by_its_subcommand_with_its_usage() -> None:
    result = _cli("run", "--port", "9000")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("usage: rag-monitor run ")
    assert lines[-1] == "rag-monitor run: error: unrecognized arguments: --port 9000"
    nested = _cli("golden", "validate", "f.yaml", "--nope")
    assert nested.stderr.splitlines()[-1] == (
        "rag-monitor golden validate: error: unrecognized arguments: --nope"
    )


def test_version_is_printed_on_stdout() -> None:
    from importlib.metadata import version

    result = _cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"rag-monitor {version('rag-monitor')}\n",
        "",
    )


@pytest.mark.parametrize("argv", [["--help"], ["review", "--help"], ["golden", "run", "--help"]])
def test_help_pages_print_on_stdout_and_exit_0(argv: list[str]) -> None:
    result = _cli(*argv)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: rag-monitor")
