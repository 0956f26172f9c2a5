"""The `rag-monitor` command: the one registry of its subcommands.

Every subcommand lives in a module that exposes ``register(subparsers)`` (see
:mod:`monitor.command`): the daemon-side commands here in ``monitor/cli/``, the golden-set and
review commands beside their packages. :func:`main` builds one parser from them, in the order
``--help`` lists them, and returns the exit code (:class:`monitor.command.ExitCode`) of the
handler the parsed command set.

Importing this package and parsing arguments loads only the standard library: a command
module imports its domain inside its handler (``tests/test_cli_imports.py`` holds the line).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from monitor.cli import agents, daemon, demo, describe, score, topics
from monitor.command import CommandParser, ExitCode, Subparsers, handler_of
from monitor.golden import cli as golden
from monitor.review import cli as review

Register = Callable[[Subparsers], None]

COMMANDS: tuple[Register, ...] = (
    daemon.register,  # run
    describe.register,  # check-config, schema
    score.register,
    golden.register,
    review.register,
    topics.register,
    demo.register,
    agents.register,
)
"""Every subcommand's registration, in the order ``rag-monitor --help`` lists them."""


class _Version(argparse.Action):
    """`--version`, reading the installed version only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from monitor import __version__

        print(f"rag-monitor {__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="rag-monitor", description="Watch the quality of a production RAG service."
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> ExitCode:
    args = build_parser().parse_args(argv)
    try:
        code = handler_of(args)(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
        return code
    except BrokenPipeError:
        # The reader went away (`rag-monitor review | head`): no traceback, and nothing more
        # written at exit to the closed pipe (Python's documented way out).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
