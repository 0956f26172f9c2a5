"""The `rag-monitor` command: parses arguments, loads configuration, delegates."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog
import yaml

from monitor import __version__
from monitor.config import ConfigError, Settings, load_settings, masked_dump
from monitor.logs import configure_logging
from monitor.models import Trace

EXIT_CONFIG = 2
EXIT_FORCED = 130


def trace_json_schema() -> dict[str, object]:
    schema = Trace.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://rag-monitor.dev/schema/trace-v1.json"
    return schema


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag-monitor", description="Watch the quality of a production RAG service."
    )
    parser.add_argument("--version", action="version", version=f"rag-monitor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("--config", type=Path, help="YAML configuration file")
    run.add_argument(
        "--source",
        default="kafka",
        help="'kafka' (default: the configured topics) or 'file:PATH.jsonl' ('file:-' for stdin)",
    )

    check = sub.add_parser("check-config", help="print the effective configuration, secrets masked")
    check.add_argument("--config", type=Path, help="YAML configuration file")

    sub.add_parser("schema", help="print the JSON Schema of native traces (version 1)")
    return parser


def _load(config: Path | None) -> Settings:
    try:
        return load_settings(config)
    except ConfigError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        print(json.dumps(trace_json_schema(), indent=2, ensure_ascii=False))
        return 0
    if args.command == "check-config":
        settings = _load(args.config)
        print(yaml.safe_dump(masked_dump(settings), sort_keys=False, allow_unicode=True), end="")
        return 0
    if args.command == "run":
        return _run(args.config, args.source)
    raise AssertionError(args.command)


def _run(config: Path | None, source_text: str) -> int:
    from monitor.daemon import Daemon, SourceSpec

    settings = _load(config)
    try:
        source = SourceSpec.parse(source_text)
    except ValueError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log.format, settings.log.level)
    daemon = Daemon(settings, source)
    return asyncio.run(_serve(daemon))


async def _serve(daemon: object) -> int:
    from monitor.daemon import Daemon

    assert isinstance(daemon, Daemon)
    log = structlog.get_logger("monitor.cli")
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.warning("second signal; exiting at once", signal=signal.Signals(signum).name)
            os._exit(EXIT_FORCED)
        daemon.request_stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    code = await daemon.run()
    log.info("stopped", exit_code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
