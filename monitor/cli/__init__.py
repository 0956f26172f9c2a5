"""The `rag-monitor` command: the one registry of its subcommands.

Every subcommand lives in a module that exposes ``register(subparsers)`` (see
:mod:`monitor.command`): the daemon-side commands here in ``monitor/cli/``, the golden-set and
review commands beside their packages. :func:`main` builds one parser from them, in the order
``--help`` lists them, and returns the exit code (:class:`monitor.command.ExitCode`) of the
handler the parsed command set.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from monitor import __version__
from monitor.cli import agents, daemon, demo, describe, score, topics
from monitor.command import ExitCode, Subparsers, handler_of
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag-monitor", description="Watch the quality of a production RAG service."
    )
    parser.add_argument("--version", action="version", version=f"rag-monitor {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> ExitCode:
    args = build_parser().parse_args(argv)
    return handler_of(args)(args)
