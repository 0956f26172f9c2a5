"""`rag-monitor demo`: broker, RAG service, traffic, daemon (and Prometheus) on one machine."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from monitor.command import ExitCode, Subparsers, fail, program_name, set_handler, settings_or_exit


def register(subparsers: Subparsers) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run everything locally: broker, RAG service, traffic, daemon (and Prometheus with"
        " the alert rules when installed); Ctrl-C stops it",
    )
    demo.add_argument("--port", type=int, default=9820, help="the daemon's HTTP port (0: any)")
    demo.add_argument("--rate", type=float, default=4.0, help="demo traces per second")
    demo.add_argument(
        "--duration", type=float, help="stop after this many seconds (default: at Ctrl-C)"
    )
    demo.add_argument(
        "--no-prometheus",
        action="store_true",
        help="do not start Prometheus even when it is installed",
    )
    demo.add_argument(
        "--prometheus-port", type=int, help="port of the demo's Prometheus (default 9090 if free)"
    )
    demo.add_argument(
        "--otlp",
        action="store_true",
        help="send the traffic as OpenTelemetry spans (GenAI conventions, OTLP protobuf, as a"
        " Collector's Kafka exporter writes them) through the daemon's OTLP stage, instead of"
        " native JSON traces",
    )
    set_handler(demo, handle)


def handle(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from monitor.demo.processes import kill_all_children
    from monitor.demo.run import STOP_GRACE_SECONDS, BrokerDied, DemoError, run_demo
    from monitor.http import HttpBindError
    from monitor.logs import configure_logging

    duration: float | None = args.duration
    settings = settings_or_exit(None)
    configure_logging("console" if sys.stderr.isatty() else settings.log.format, "warning")
    database = Path("ragmon-demo.db").resolve()
    # However shutdown goes, the demo is gone this long after it began (then children are
    # killed and the process exits): a stuck client can never keep the terminal.
    hard_limit = settings.shutdown.deadline_seconds + 4 * STOP_GRACE_SECONDS + 5

    def exit_now(code: ExitCode) -> None:
        kill_all_children()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def start_watchdog() -> None:
        timer = threading.Timer(hard_limit, exit_now, args=(ExitCode.COMPONENT_DIED,))
        timer.daemon = True
        timer.start()

    async def main() -> ExitCode:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if stop.is_set():
                print("rag-monitor: second signal; exiting at once", file=sys.stderr)
                exit_now(ExitCode.FORCED)
            print("rag-monitor: stopping the demo (Ctrl-C again to exit at once)", file=sys.stderr)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        if duration is not None:
            loop.call_later(duration, stop.set)

        return await run_demo(
            settings,
            stop,
            http_port=args.port,
            rate=args.rate,
            database=database,
            on_ready=_banner,
            on_stopping=start_watchdog,
            prometheus=not args.no_prometheus,
            prometheus_port=args.prometheus_port,
            otlp=args.otlp,
        )

    try:
        return asyncio.run(main())
    except HttpBindError as exc:
        return fail(f"{exc}; choose another port with --port", ExitCode.UNAVAILABLE)
    except BrokerDied as exc:
        return fail(str(exc), ExitCode.COMPONENT_DIED)
    except DemoError as exc:
        return fail(str(exc), ExitCode.UNAVAILABLE)


def _banner(urls: dict[str, str]) -> None:
    width = max(len(k) for k in urls)
    print("rag-monitor demo is running (Ctrl-C stops everything):")
    for name, url in urls.items():
        print(f"  {name:<{width}}  {url}")
    print(f"  try: RAGMON_STORE__URL={urls['store']} {program_name()} review --since 10m")
    if urls.get("prometheus", "").startswith("http"):
        print("  alerts: demo rendering of the chart's rules (1-minute `for`, 2m/5m windows")
        print(
            "          instead of 1h/6h); RagmonHallucinationRateHigh on agent support-bot-canary"
        )
        print("          goes pending, then fires, within about 3 minutes.")
    print("  note: the embedded broker (Tansu) under-reports its high watermark,")
    print("        so consumer lag reads low here; it is exact on Apache Kafka.")
    sys.stdout.flush()
