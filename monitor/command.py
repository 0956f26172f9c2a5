"""What every `rag-monitor` subcommand shares: its exit codes and how it registers.

A command module exposes ``register(subparsers)``, which adds its parser(s) to the main
parser's ``add_subparsers()`` object and sets the handler with :func:`set_handler`; the one
registry, :mod:`monitor.cli`, calls every ``register`` and runs the handler of the parsed
command. This module imports only the standard library and :mod:`monitor.config`, so a command
module anywhere in the tree can use it without an import cycle.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from typing import Any

from monitor.config import ConfigError, Settings, load_settings


class ExitCode(IntEnum):
    """The exit codes of every command (docs/cli.md "Exit codes and errors"; they never change)."""

    OK = 0
    """Done; `run` or `demo` stopped by SIGTERM or Ctrl-C; a replay reached its end."""
    TARGET_MISSED = 1
    """`golden run`: a target of a gated mode was missed (or unmeasured)."""
    USAGE = 2
    """Bad configuration, arguments or input file."""
    UNAVAILABLE = 3
    """Could not start or complete: Kafka, a busy port, a missing topic, the store, the
    service a golden suite runs against; `score` with a judge: traces left unjudged."""
    COMPONENT_DIED = 4
    """`demo`: a part died while it ran."""
    FORCED = 130
    """A second SIGTERM or Ctrl-C during shutdown."""


Handler = Callable[[argparse.Namespace], ExitCode]
"""Runs one parsed command and returns its exit code."""

HANDLER_KEY = "handler"


def set_handler(parser: argparse.ArgumentParser, handler: Handler) -> None:
    """Make ``handler`` run when the command of ``parser`` is parsed."""
    parser.set_defaults(**{HANDLER_KEY: handler})


def handler_of(args: argparse.Namespace) -> Handler:
    """The handler a parsed command set (every registered command sets one)."""
    handler: Handler = getattr(args, HANDLER_KEY)
    return handler


def settings_or_exit(config: Path | None, prog: str = "rag-monitor") -> Settings:
    """The effective settings; on a bad configuration, one line per bad field on stderr
    (``<prog>: invalid configuration ...``) and exit code 2."""
    try:
        return load_settings(config)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.USAGE) from None


def fail(message: str, code: ExitCode, prog: str = "rag-monitor") -> ExitCode:
    """Print ``<prog>: <message>`` on stderr and return ``code``."""
    print(f"{prog}: {message}", file=sys.stderr)
    return code


Subparsers = Any
"""The object ``ArgumentParser.add_subparsers()`` returns (argparse does not export its type)."""


def program_name() -> str:
    """How the user ran rag-monitor (e.g. `.venv/bin/rag-monitor`), for commands we suggest."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "rag-monitor"
    if argv0.endswith(".py") or argv0 in ("-m", "-c") or "/" not in argv0:
        return "rag-monitor"
    relative = os.path.relpath(argv0)
    return relative if not relative.startswith("..") else argv0
