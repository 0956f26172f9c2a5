"""Soak: steady load on a real daemon process; do memory, tasks, queues and lag stay flat?

Starts the test broker (as bench/ingest.py does, from scripts/setup-kafka.sh's jars) unless
--bootstrap is given, a scripted OpenAI-compatible judge on loopback, and `rag-monitor run` as a
subprocess, then produces native traces at a steady rate (conversations of five turns, so
conversations keep starting and ending) and samples the daemon every --interval seconds:

- resident memory (VmRSS from /proc/PID/status), threads and open file descriptors;
- the daemon's CPU per trace processed over the interval (every thread, /proc/PID/stat): what a
  steady rate costs, where `bench/ingest.py` times a backlog;
- asyncio tasks (a gauge the soak adds to the child's /metrics: `ragmon_soak_asyncio_tasks`);
- from /metrics: ragmon_in_flight_traces, ragmon_judge_queue_depth,
  ragmon_conversations_active, ragmon_kafka_consumer_lag_messages (summed), traces processed.

It prints a table and, per series, whether it stayed flat after warm-up (second half of the run
against the first: no growth beyond a small tolerance). Exit status 0 when everything is flat.

    python bench/soak.py                      # 60 s
    python bench/soak.py --seconds 600        # the 10-minute run of docs/reliability.md
    python bench/soak.py --bootstrap HOST:PORT --rate 200 --judge-rate 0.2
    python bench/soak.py --seconds 600 --env RAGMON_JUDGE__CACHE_MAX_ENTRIES=500 \
        --env RAGMON_SCORING__ROLLING_WINDOW_SECONDS=60   # bounded state full within warm-up

Bounded state that fills slowly makes memory climb at first: the judge cache
(judge.cache_max_entries, 10,000 by default: about 1,000 s at 10 judged traces per second) and
the per-replica rolling means (scoring.rolling_window_seconds, 300 s). With the defaults a run
shorter than those shows that fill, not a leak; shrink them (as above) to see the steady state.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# RAGMON_BENCH_TREE=DIR: the daemon's `monitor` from another checkout (what
# `bench/steady_cpu.py --setting NAME=RAGMON_BENCH_TREE=DIR` compares)
_tree = os.environ.get("RAGMON_BENCH_TREE")
sys.path[:0] = [str(Path(_tree).resolve())] if _tree else []
sys.path.insert(1 if _tree else 0, str(REPO))


def _child() -> int:
    """The daemon, with one extra gauge: the number of asyncio tasks (read at scrape time)."""
    from prometheus_client import Gauge

    from monitor import cli
    from monitor import metrics as metrics_module

    original = metrics_module.Metrics.__init__

    def init(self: metrics_module.Metrics, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        Gauge(
            "ragmon_soak_asyncio_tasks",
            "asyncio tasks of the daemon's loop (soak instrumentation)",
            registry=self.registry,
        ).set_function(lambda: len(asyncio.all_tasks()))

    metrics_module.Metrics.__init__ = init  # type: ignore[method-assign]
    return cli.main(["run"])


@dataclass
class Row:
    seconds: float
    rss_mib: float
    threads: int
    fds: int
    tasks: float
    in_flight: float
    judge_queue: float
    conversations: float
    lag: float
    processed: float
    rate: float
    cpu_ms: float


COLUMNS = [
    ("seconds", "t (s)", "{:>6.0f}"),
    ("rss_mib", "RSS MiB", "{:>8.1f}"),
    ("threads", "threads", "{:>7d}"),
    ("fds", "fds", "{:>5d}"),
    ("tasks", "tasks", "{:>6.0f}"),
    ("in_flight", "in-flight", "{:>9.0f}"),
    ("judge_queue", "judge q", "{:>7.0f}"),
    ("conversations", "convs", "{:>6.0f}"),
    ("lag", "lag", "{:>6.0f}"),
    ("processed", "processed", "{:>9.0f}"),
    ("rate", "traces/s", "{:>8.1f}"),
    ("cpu_ms", "CPU ms/trace", "{:>12.2f}"),
]

# Series judged for flatness: (attribute, absolute tolerance, relative tolerance, statistic).
# "mean" compares the means of the two halves; "max" their maxima (for counts that only grow).
FLATNESS = [
    ("rss_mib", 8.0, 0.05, "mean"),
    ("threads", 3, 0.0, "mean"),  # executor threads come and go with bursts
    ("fds", 5, 0.0, "max"),
    ("tasks", 25, 0.20, "mean"),
    ("in_flight", 50, 0.50, "mean"),
    ("judge_queue", 10, 0.50, "mean"),
    ("conversations", 20, 0.10, "mean"),
    ("lag", 100, 0.50, "mean"),
]


def _proc_status(pid: int) -> tuple[float, int]:
    rss_kib, threads = 0, 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss_kib / 1024, threads


def _cpu_seconds(pid: int) -> float:
    """The process's CPU time so far, every thread, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _flatness(rows: list[Row], warmup: float) -> list[tuple[str, bool, str]]:
    steady = [r for r in rows if r.seconds >= warmup]
    if len(steady) < 4:
        return [("(too few samples after warm-up)", False, f"{len(steady)} samples")]
    half = len(steady) // 2
    first, second = steady[:half], steady[half:]
    verdicts = []
    for attr, absolute, relative, stat in FLATNESS:
        pick = statistics.fmean if stat == "mean" else max
        a = pick(getattr(r, attr) for r in first)
        b = pick(getattr(r, attr) for r in second)
        limit = a + max(absolute, abs(a) * relative)
        flat = b <= limit
        verdicts.append((attr, flat, f"{stat} {a:.1f} -> {b:.1f} (limit {limit:.1f})"))
    return verdicts


async def _topics(bootstrap: str, prefix: str) -> None:
    from tests.support.kafka_io import create_topics

    await create_topics(bootstrap, [f"{prefix}.in", f"{prefix}.results"], partitions=3)
    await create_topics(bootstrap, [f"{prefix}.dlq"])


def soak(args: argparse.Namespace, bootstrap: str, rows: list[Row] | None = None) -> int:
    """One soak run against `bootstrap`; its samples are appended to `rows` when given."""
    from tests.support.faults import (
        DaemonProcess,
        SteadyProducer,
        kafka_env,
        metric_value,
        native_message,
    )
    from tests.support.openai_server import OpenAIServer, Received, Reply
    from tests.support.traces import native_trace

    prefix = f"soak-{uuid.uuid4().hex[:6]}"
    asyncio.run(_topics(bootstrap, prefix))
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-soak-"))
    import random

    latency = random.Random(7)

    def judge_latency(request: Received) -> Reply:
        return Reply(delay=latency.uniform(0.02, 0.06))

    def make(n: int) -> tuple[bytes | None, bytes, str]:
        conversation, turn = divmod(n, 5)
        return native_message(
            native_trace(
                n,
                trace_id=f"{prefix}-{n:08d}",
                conversation_id=f"{prefix}-c{conversation}",
                turn=turn + 1,
                memory_tokens=200 * (turn + 1),
            )
        )

    rows = [] if rows is None else rows
    with OpenAIServer(script=judge_latency) as judge:
        daemon = DaemonProcess(
            {
                **kafka_env(
                    bootstrap,
                    f"{prefix}.in",
                    f"{prefix}.group",
                    f"{prefix}.dlq",
                    commit_interval="1",
                ),
                "RAGMON_RESULTS__TOPIC": f"{prefix}.results",
                "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{workdir / 'soak.db'}",
                "RAGMON_SAMPLING__RATE": str(args.judge_rate),
                "RAGMON_JUDGE__BASE_URL": judge.url,
                "RAGMON_JUDGE__API_KEY": "sk-soak",
                "RAGMON_CONVERSATIONS__IDLE_SECONDS": str(args.idle_seconds),
                "RAGMON_LOG__LEVEL": "warning",
                **dict(item.split("=", 1) for item in args.env),
            },
            workdir,
            name="soak-daemon",
            command=[sys.executable, str(Path(__file__).resolve()), "--child"],
        )
        producer = SteadyProducer(bootstrap, f"{prefix}.in", make, rate=args.rate)
        daemon.start()
        try:
            daemon.wait_ready(120)
            producer.start()
            started = time.monotonic()
            last_processed, last_at, last_cpu = 0.0, started, _cpu_seconds(daemon.pid)
            header = " ".join(f"{title:>{len(fmt.format(0))}}" for _, title, fmt in COLUMNS)
            print(f"rate {args.rate}/s, judge sampling {args.judge_rate}, {args.seconds:.0f} s")
            print(header)
            while True:
                time.sleep(args.interval)
                now = time.monotonic()
                m = daemon.metrics()
                rss, threads = _proc_status(daemon.pid)
                processed = metric_value(m, "ragmon_traces_processed_total")
                cpu = _cpu_seconds(daemon.pid)
                row = Row(
                    seconds=now - started,
                    rss_mib=rss,
                    threads=threads,
                    fds=len(os.listdir(f"/proc/{daemon.pid}/fd")),
                    tasks=metric_value(m, "ragmon_soak_asyncio_tasks"),
                    in_flight=metric_value(m, "ragmon_in_flight_traces"),
                    judge_queue=metric_value(m, "ragmon_judge_queue_depth"),
                    conversations=metric_value(m, "ragmon_conversations_active"),
                    lag=metric_value(m, "ragmon_kafka_consumer_lag_messages"),
                    processed=processed,
                    rate=(processed - last_processed) / (now - last_at),
                    cpu_ms=1000 * (cpu - last_cpu) / max(processed - last_processed, 1),
                )
                last_processed, last_at, last_cpu = processed, now, cpu
                rows.append(row)
                print(" ".join(fmt.format(getattr(row, attr)) for attr, _, fmt in COLUMNS))
                sys.stdout.flush()
                if now - started >= args.seconds:
                    break
            producer.stop()
            final = daemon.metrics()
            daemon.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            code = daemon.proc.wait(60)  # type: ignore[union-attr]
        except (subprocess.TimeoutExpired, AssertionError, KeyboardInterrupt) as exc:
            print(f"soak aborted: {exc}")
            print(daemon.stderr_tail())
            return 2
        finally:
            daemon.ensure_stopped()
            if producer.error is None and producer._thread.is_alive():
                producer.stop(timeout=10)

    warmup = max(args.warmup, 0.0)
    verdicts = _flatness(rows, warmup)
    print(f"\nafter a {warmup:.0f} s warm-up, second half of the run against the first:")
    for attr, flat, detail in verdicts:
        print(f"  {attr:<14} {'flat' if flat else 'GROWING'}  {detail}")
    dead = metric_value(final, "ragmon_dead_letters_total")
    judged = metric_value(final, "ragmon_evaluations_total", evaluator="llm")
    shed = metric_value(final, "ragmon_sampler_shed_total")
    processed = metric_value(final, "ragmon_traces_processed_total")
    print(
        f"produced {producer.acked_count}, processed {processed:.0f}, "
        f"judged {judged:.0f}, shed {shed:.0f}, dead letters {dead:.0f}, daemon exit {code}"
    )
    all_flat = all(flat for _, flat, _ in verdicts)
    print("result: " + ("flat" if all_flat else "NOT flat"))
    return 0 if all_flat and code == 0 else 1


def main() -> None:
    if "--child" in sys.argv[1:]:
        sys.exit(_child())
    # `kill` or `timeout` ends the run as ^C does: the daemon and the broker are stopped
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to load (60)")
    parser.add_argument("--rate", type=float, default=50.0, help="traces per second (50)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples (5)")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds ignored at first (default: 20%% of the run, at least idle-seconds + 20, "
        "since conversations pile up until the first ones expire)",
    )
    parser.add_argument("--judge-rate", type=float, default=0.2, help="sampling.rate (0.2)")
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="conversations.idle_seconds (10)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="RAGMON_KEY=VALUE",
        help="extra daemon setting, e.g. RAGMON_JUDGE__CACHE_MAX_ENTRIES=500 (repeatable)",
    )
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    args = parser.parse_args()
    if args.warmup is None:
        args.warmup = max(args.interval * 2, args.seconds * 0.2, args.idle_seconds + 20)
    if args.bootstrap:
        sys.exit(soak(args, args.bootstrap))
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        code = soak(args, broker.bootstrap)
    sys.exit(code)


if __name__ == "__main__":
    main()
