"""`rag-monitor run`: the daemon, reading Kafka or replaying a file, until a signal stops it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.command import ExitCode, Subparsers, fail, program_name, set_handler, settings_or_exit

if TYPE_CHECKING:  # the daemon's wiring is imported when `run` runs, not for every command
    from monitor.daemon import Daemon


def register(subparsers: Subparsers) -> None:
    run = subparsers.add_parser("run", help="run the daemon")
    run.add_argument("--config", type=Path, help="YAML configuration file")
    run.add_argument(
        "--source",
        default="kafka",
        help="'kafka' (default: the configured topics) or 'file:PATH.jsonl' ('file:-' for stdin,"
        " read line by line as it arrives); a file replay prints a summary at its end",
    )
    set_handler(run, handle)


def handle(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from aiokafka.errors import KafkaError

    from monitor.daemon import Daemon, SourceSpec
    from monitor.http import HttpBindError
    from monitor.logs import configure_logging
    from monitor.sinks.topics import MissingTopicError
    from monitor.sources.file import SourceReadError, input_problem
    from monitor.sources.kafka_errors import bootstrap_failures, error_text

    config: Path | None = args.config
    settings = settings_or_exit(config)
    try:
        source = SourceSpec.parse(args.source)
    except ValueError as exc:
        return fail(str(exc), ExitCode.USAGE)
    if source.kind == "file":
        assert source.path is not None
        problem = input_problem(source.path)
        if problem is not None:
            return fail(f"--source file:{problem}", ExitCode.USAGE)
    configure_logging(settings.log.format, settings.log.level)
    daemon = Daemon(settings, source, config_dir=config.parent if config is not None else None)
    # Each failure below is reported once, in the command's last line (not also as a log).
    try:
        with bootstrap_failures() as failures:
            code = asyncio.run(_serve(daemon))
    except HttpBindError as exc:
        return fail(
            f"{exc}; set http.port (RAGMON_HTTP__PORT) or http.host (RAGMON_HTTP__HOST)",
            ExitCode.UNAVAILABLE,
        )
    except SourceReadError as exc:
        return fail(f"{exc} (--source)", ExitCode.USAGE)
    except MissingTopicError as exc:
        return fail(str(exc), ExitCode.UNAVAILABLE)
    except (KafkaError, OSError) as exc:
        if source.kind == "file":
            return fail(f"cannot start: {error_text(exc)}", ExitCode.UNAVAILABLE)
        # Unreachable brokers, rejected credentials, an untrusted certificate. aiokafka's
        # messages name the broker and the failure, never the password.
        where = failures.describe(exc, settings.kafka.bootstrap_servers)
        return fail(
            f"cannot connect to Kafka at {where}; check kafka.bootstrap_servers"
            " (RAGMON_KAFKA__BOOTSTRAP_SERVERS) and the kafka.security settings",
            ExitCode.UNAVAILABLE,
        )
    if daemon.failure is not None:
        return fail(str(daemon.failure), ExitCode.UNAVAILABLE)
    if source.kind == "file":
        print(replay_summary(daemon, source.path or "-"))
    return code


def replay_summary(daemon: Daemon, path: str) -> str:
    """The one-paragraph account of a file replay (the same shape as `score` prints)."""
    from monitor.offline import RunSummary, samples_by_name

    registry = daemon.metrics.registry
    summary = RunSummary.from_registry(registry, judge_active=daemon.settings.judge.active)
    lines = int(sum(v for _, v in samples_by_name(registry)["ragmon_messages_consumed_total"]))
    dead = sum(summary.dead_letters.values())
    skipped = sum(summary.skipped.values())
    label = "stdin" if path == "-" else path
    head = f"replayed {lines} lines of {label}: {summary.processed} traces scored"
    if summary.processing_errors:
        head += f", {summary.processing_errors} failed"
    head += f", {dead} dead-lettered"
    if dead:
        head += " (" + ", ".join(f"{r} {n}" for (r,), n in sorted(summary.dead_letters.items()))
        head += ")"
    if skipped:
        head += f", {skipped} skipped"
    text = summary.render(head)
    if daemon.settings.store.enabled and summary.processed:
        text += (
            f"\n  the worst of them: {program_name()} review --since 15m"
            " (--since counts from when traces were scored)"
        )
    return text


async def _serve(daemon: Daemon) -> ExitCode:
    import asyncio

    import structlog

    log = structlog.get_logger("monitor.cli")
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal(signum: int, frame: object) -> None:
        # A plain signal handler (not the loop's): it runs even while the loop is busy, so the
        # deadline counts from the signal and the guard below starts at once.
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            _exit_now(f"second signal ({signal.Signals(signum).name}); exiting at once")
        daemon.shutdown.start()  # the deadline counts from the signal
        _guard_deadline(daemon.shutdown.guard_seconds, daemon.shutdown.deadline_seconds)
        loop.call_soon_threadsafe(daemon.request_stop)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    code = await daemon.run()
    log.info("stopped", exit_code=int(code))
    return code


def _guard_deadline(after_seconds: float, deadline_seconds: float) -> None:
    """End the process when the shutdown deadline is about to pass, whatever still runs (a
    close that hangs, a thread that does not return): the daemon's own deadlines should have
    ended it before. Unfinished work is read again by the partitions' next owner."""
    timer = threading.Timer(
        after_seconds,
        _exit_now,
        [f"shutdown deadline ({deadline_seconds:g}s) reached; exiting with work unfinished"],
    )
    timer.daemon = True
    timer.start()


def _exit_now(why: str) -> None:
    # Written straight to the file descriptor: a logger's lock may be held by the code this
    # interrupts (a signal handler runs in the main thread).
    os.write(sys.stderr.fileno(), f"{program_name()}: {why}\n".encode())
    os._exit(ExitCode.FORCED)
