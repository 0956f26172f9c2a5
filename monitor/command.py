"""What every `rag-monitor` subcommand shares: its exit codes and how it registers.

A command module exposes ``register(subparsers)``, which adds its parser(s) to the main
parser's ``add_subparsers()`` object and sets the handler with :func:`set_handler`; the one
registry, :mod:`monitor.cli`, calls every ``register`` and runs the handler of the parsed
command. This module imports only the standard library (the configuration is loaded when a
handler asks for it), so a command module anywhere in the tree can use it without an import
cycle, and the command line is parsed before anything heavy is imported: a command module
imports its domain inside its handler.

Every parser is a :class:`CommandParser`: a subcommand's help page shows its description (its
one-line help when it gives none) and the defaults of its options, and an unknown option is
reported by the subcommand it was given to, with that subcommand's usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.config import Settings


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
    """A second SIGTERM or Ctrl-C during shutdown, or `run` still busy at the end of
    `shutdown.deadline_seconds` (what was unfinished is read again by the next owner)."""
    BROKEN_PIPE = 141
    """Standard output was closed early (piped into `head`); 128 + SIGPIPE, as a shell reports
    any program that signal ends."""


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
    from monitor.config import ConfigError, load_settings

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


class HelpFormatter(argparse.HelpFormatter):
    """Help with each option's default, unless its help already names one or there is none to
    show (no value, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or not action.option_strings
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or isinstance(action, argparse._HelpAction | argparse._VersionAction)
        ):
            return text
        shown = ",".join(str(v) for v in default) if isinstance(default, list | tuple) else default
        return f"{text} (default: {shown})".lstrip()


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` for pages whose description and epilog keep their line breaks."""


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose help page opens with their one-line help when they have no
    description of their own."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        summary = kwargs.get("help")
        if summary and not kwargs.get("description"):
            kwargs["description"] = summary[0].upper() + summary[1:] + "."
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        parser.is_subcommand = True  # type: ignore[attr-defined]
        return parser


class CommandParser(argparse.ArgumentParser):
    """The parser of `rag-monitor` and of each of its subcommands (see the module's doc)."""

    is_subcommand = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.is_subcommand:
            # argparse hands them to the top-level parser, whose usage says nothing about the
            # subcommand they were given to.
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def program_name() -> str:
    """How the user ran rag-monitor (e.g. `.venv/bin/rag-monitor`), for commands we suggest."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "rag-monitor"
    if argv0.endswith(".py") or argv0 in ("-m", "-c") or "/" not in argv0:
        return "rag-monitor"
    relative = os.path.relpath(argv0)
    return relative if not relative.startswith("..") else argv0
