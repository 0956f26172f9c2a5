"""The `rag-monitor` command: parses arguments, loads configuration, delegates."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import structlog
import yaml
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from monitor import __version__
from monitor.config import ConfigError, Settings, load_settings, masked_dump
from monitor.export.topics import MissingTopicError
from monitor.golden.cli import dispatch as dispatch_golden
from monitor.golden.cli import register as register_golden
from monitor.logs import configure_logging
from monitor.models import Trace
from monitor.review.cli import register as register_review
from monitor.topics_cli import dispatch as dispatch_topics
from monitor.topics_cli import register as register_topics

# Exit codes (README "Exit codes"): 0 done; 1 a golden target missed (golden run); 2 bad
# configuration, arguments or input file; 3 could not start (Kafka, a busy port, a missing
# topic, the store); 4 a part of the demo died while it ran; 130 a second signal.
EXIT_CONFIG = 2
EXIT_USAGE = 2
EXIT_STARTUP = 3
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
        help="'kafka' (default: the configured topics) or 'file:PATH.jsonl' ('file:-' for stdin,"
        " read line by line as it arrives); a file replay prints a summary at its end",
    )

    check = sub.add_parser("check-config", help="print the effective configuration, secrets masked")
    check.add_argument("--config", type=Path, help="YAML configuration file")

    sub.add_parser("schema", help="print the JSON Schema of native traces (version 1)")

    score = sub.add_parser("score", help="score a JSONL file of native traces offline")
    score.add_argument("--input", required=True, help="traces, one JSON object a line; - = stdin")
    score.add_argument("--output", required=True, type=Path, help="results, one JSON a line")
    score.add_argument(
        "--evaluator",
        choices=["heuristic", "llm", "ragas"],
        default="heuristic",
        help="heuristic (default): tier 0 only, no network; llm or ragas: also the LLM judge on"
        " every trace (needs judge.base_url / RAGMON_JUDGE__BASE_URL; ragas needs the ragas"
        " extra). The summary reports the chosen evaluator's traces",
    )
    score.add_argument("--config", type=Path, help="YAML configuration file")

    register_golden(sub)
    register_review(sub)
    register_topics(sub)

    demo = sub.add_parser(
        "demo",
        help="run everything locally: broker, RAG service, traffic, daemon (and Prometheus with"
        " the alert rules when installed); Ctrl-C stops it",
    )
    demo.add_argument("--port", type=int, default=9820, help="the daemon's HTTP port (0: any)")
    demo.add_argument("--rate", type=float, default=4.0, help="demo traces per second")
    demo.add_argument("--duration", type=float, help="stop after this many seconds")
    demo.add_argument(
        "--no-prometheus",
        action="store_true",
        help="do not start Prometheus even when it is installed",
    )
    demo.add_argument(
        "--prometheus-port", type=int, help="port of the demo's Prometheus (default 9090 if free)"
    )

    agents = sub.add_parser("agents", help="compare agents' multi-turn quality (H_u, D_r, memory)")
    agents.add_argument("--since", default="24h", help="24h, 90m, 7d or an ISO time")
    agents.add_argument("--baseline", help="agent the others are tested against")
    agents.add_argument("--json", action="store_true", help="print JSON instead of a table")
    agents.add_argument("--config", type=Path, help="YAML configuration file")
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
    if args.command == "review":
        from monitor.review.cli import run_cli

        settings = _load(args.config)
        configure_logging(settings.log.format, "warning")  # logs on stderr: --json stays clean
        return asyncio.run(run_cli(args, settings))
    if args.command == "golden":
        return dispatch_golden(args, _load)
    if args.command == "topics":
        return dispatch_topics(args, _load)
    if args.command == "demo":
        return _demo(
            args.port, args.rate, args.duration, not args.no_prometheus, args.prometheus_port
        )
    if args.command == "agents":
        return _agents(args.config, args.since, args.baseline, args.json)
    if args.command == "score":
        return _score(args.config, args.input, args.output, args.evaluator)
    raise AssertionError(args.command)


def _run(config: Path | None, source_text: str) -> int:
    from monitor.daemon import Daemon, SourceSpec
    from monitor.export.http import HttpBindError
    from monitor.source.file import SourceReadError, input_problem

    settings = _load(config)
    try:
        source = SourceSpec.parse(source_text)
    except ValueError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if source.kind == "file":
        assert source.path is not None
        problem = input_problem(source.path)
        if problem is not None:
            print(f"rag-monitor: --source file:{problem}", file=sys.stderr)
            return EXIT_USAGE
    configure_logging(settings.log.format, settings.log.level)
    daemon = Daemon(settings, source, config_dir=config.parent if config is not None else None)
    log = structlog.get_logger("monitor.cli")
    try:
        code = asyncio.run(_serve(daemon))
    except HttpBindError as exc:
        log.error("cannot start", error=str(exc))
        print(
            f"rag-monitor: {exc}; set http.port (RAGMON_HTTP__PORT) or http.host"
            " (RAGMON_HTTP__HOST)",
            file=sys.stderr,
        )
        return EXIT_STARTUP
    except SourceReadError as exc:
        log.error("cannot read the source", error=str(exc))
        print(f"rag-monitor: {exc} (--source)", file=sys.stderr)
        return EXIT_USAGE
    except MissingTopicError as exc:
        log.error("cannot start", error=str(exc))
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except (KafkaError, OSError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        log.error("cannot start", error=detail)
        if source.kind == "file":
            print(f"rag-monitor: cannot start: {detail}", file=sys.stderr)
        else:
            # Unreachable brokers, rejected credentials, an untrusted certificate. aiokafka's
            # messages name the broker and the failure, never the password.
            print(
                f"rag-monitor: cannot connect to Kafka ({settings.kafka.bootstrap_servers}):"
                f" {detail}; check kafka.bootstrap_servers (RAGMON_KAFKA__BOOTSTRAP_SERVERS)"
                " and the kafka.security settings",
                file=sys.stderr,
            )
        return EXIT_STARTUP
    if source.kind == "file":
        print(_replay_summary(daemon, source.path or "-"))
    return code


def _replay_summary(daemon: object, path: str) -> str:
    """The one-paragraph account of a file replay (the same shape as `score` prints)."""
    from monitor.daemon import Daemon
    from monitor.offline import RunSummary, samples_by_name

    assert isinstance(daemon, Daemon)
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
            f"\n  the worst of them: {_program()} review --since 15m"
            " (--since counts from when traces were scored)"
        )
    return text


def _score(config: Path | None, input_path: str, output: Path, evaluator: str) -> int:
    from monitor.offline import InputError, RunSummary, check_paths, read_traces

    settings = _load(config)
    try:
        check_paths(input_path, output)
    except InputError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if evaluator in ("llm", "ragas") and not settings.judge.active:
        print(
            f"rag-monitor: --evaluator {evaluator} needs a judge endpoint: set judge.base_url"
            " (RAGMON_JUDGE__BASE_URL)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    configure_logging(settings.log.format, "warning")
    try:
        traces, rejected = read_traces(input_path, sys.stderr)
    except OSError as exc:
        print(f"rag-monitor: --input {input_path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    registry = asyncio.run(_score_traces(settings, traces, output, evaluator))
    summary = RunSummary.from_registry(registry, judge_active=evaluator != "heuristic")
    head = f"scored {summary.evaluated(evaluator)} traces ({rejected} rejected lines)"
    print(summary.render(head))
    return 0


async def _score_traces(
    settings: Settings, traces: list[Trace], output: Path, evaluator: str
) -> CollectorRegistry:
    """Score every trace into `output` (the results of every evaluator that ran); returns the
    run's metrics registry (for the summary)."""
    from contextlib import AsyncExitStack

    from monitor.daemon import build_scoring_stage
    from monitor.export.metrics import Metrics
    from monitor.models import EvaluationResult

    if evaluator in ("llm", "ragas"):
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"backend": evaluator})}
        )
    if evaluator == "heuristic":
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"enabled": False, "base_url": None})}
        )
    metrics = Metrics()
    async with AsyncExitStack() as stack:
        stage = await build_scoring_stage(
            settings, metrics, stack, None, judge_everything=evaluator != "heuristic"
        )
        processor = stage.processor
        stack.push_async_callback(stage.tracker.flush)
        with output.open("w", encoding="utf-8") as out:

            async def write(trace: Trace, result: EvaluationResult) -> None:
                out.write(result.model_dump_json() + "\n")

            processor.observers.append(write)
            for trace in sorted(traces, key=lambda t: (t.conversation_id or "", t.turn or 0)):
                await processor.process(trace)
    return metrics.registry


def _agents(config: Path | None, since_text: str, baseline: str | None, as_json: bool) -> int:
    from monitor.agents_report import compare, parse_since, records_from_rows, render_table
    from monitor.multiturn import summarize_agents
    from monitor.store import Store, turns_since

    settings = _load(config)
    try:
        since = parse_since(since_text)
    except ValueError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    async def load() -> list[dict[str, object]]:
        store = await Store.open(settings.store.url.get_secret_value())
        try:
            return await turns_since(store, since)
        finally:
            await store.close()

    configure_logging(settings.log.format, "warning")
    summaries = summarize_agents(records_from_rows(asyncio.run(load())))
    if baseline is not None and baseline not in summaries:
        print(
            f"rag-monitor: no turns of baseline agent {baseline!r} since {since}", file=sys.stderr
        )
        return EXIT_CONFIG
    report = compare(summaries, baseline)
    print(json.dumps(report, indent=2, ensure_ascii=False) if as_json else render_table(report))
    return 0


def _demo(
    port: int, rate: float, duration: float | None, prometheus: bool, prometheus_port: int | None
) -> int:
    from monitor.demo.processes import kill_all_children
    from monitor.demo.run import (
        EXIT_COMPONENT_DIED,
        STOP_GRACE_SECONDS,
        BrokerDied,
        DemoError,
        run_demo,
    )
    from monitor.export.http import HttpBindError

    settings = _load(None)
    configure_logging("console" if sys.stderr.isatty() else settings.log.format, "warning")
    database = Path("ragmon-demo.db").resolve()
    # However shutdown goes, the demo is gone this long after it began (then children are
    # killed and the process exits): a stuck client can never keep the terminal.
    hard_limit = settings.shutdown.deadline_seconds + 4 * STOP_GRACE_SECONDS + 5

    def exit_now(code: int) -> None:
        kill_all_children()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def start_watchdog() -> None:
        timer = threading.Timer(hard_limit, exit_now, args=(EXIT_COMPONENT_DIED,))
        timer.daemon = True
        timer.start()

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if stop.is_set():
                print("rag-monitor: second signal; exiting at once", file=sys.stderr)
                exit_now(EXIT_FORCED)
            print("rag-monitor: stopping the demo (Ctrl-C again to exit at once)", file=sys.stderr)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        if duration is not None:
            loop.call_later(duration, stop.set)

        def banner(urls: dict[str, str]) -> None:
            width = max(len(k) for k in urls)
            print("rag-monitor demo is running (Ctrl-C stops everything):")
            for name, url in urls.items():
                print(f"  {name:<{width}}  {url}")
            print(f"  try: RAGMON_STORE__URL={urls['store']} {_program()} review --since 10m")
            if urls.get("prometheus", "").startswith("http"):
                print(
                    "  alerts: demo rendering of the chart's rules (1-minute `for`, 2m/5m windows"
                )
                print(
                    "          instead of 1h/6h); RagmonHallucinationRateHigh on agent"
                    " support-bot-canary"
                )
                print("          goes pending, then fires, within about 3 minutes.")
            print("  note: the embedded broker (Tansu) under-reports its high watermark,")
            print("        so consumer lag reads low here; it is exact on Apache Kafka.")
            sys.stdout.flush()

        return await run_demo(
            settings,
            stop,
            http_port=port,
            rate=rate,
            database=database,
            on_ready=banner,
            on_stopping=start_watchdog,
            prometheus=prometheus,
            prometheus_port=prometheus_port,
        )

    try:
        return asyncio.run(main())
    except HttpBindError as exc:
        print(f"rag-monitor: {exc}; choose another port with --port", file=sys.stderr)
        return EXIT_STARTUP
    except BrokerDied as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_COMPONENT_DIED
    except DemoError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_STARTUP


def _program() -> str:
    """How the user ran rag-monitor (e.g. `.venv/bin/rag-monitor`), for commands we suggest."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "rag-monitor"
    if argv0.endswith(".py") or argv0 in ("-m", "-c") or "/" not in argv0:
        return "rag-monitor"
    relative = os.path.relpath(argv0)
    return relative if not relative.startswith("..") else argv0


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
