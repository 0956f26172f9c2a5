"""Throughput from Kafka, in one run: the bare consumer, ingest, and scored end to end for native
and OpenTelemetry input, each as traces/s and as a ratio to the bare consumer; tier 0's CPU per
trace; the OTLP assembler's memory.

    python bench/ingest.py                      # starts the test broker (scripts/setup-kafka.sh)
    python bench/ingest.py --rounds 3 --traces 5000 --scored 30000 [--progress]
    python bench/ingest.py --bootstrap HOST:PORT
    python bench/ingest.py --tree DIR           # another source tree's `monitor` (before/after)

Every figure is the median of ``--rounds`` rounds (with the range); the rows of a round run one
after the other on one broker, so compare the ratios, not the absolute figures:

- **bare aiokafka consumer**: messages/s of a consumer that decodes nothing, on the
  ``--traces`` native traces (1-2 KB, 6 partitions).
- **ingest**: the daemon's consume, route, decode and dispatch path on the same messages, with
  a processor that only counts (no scoring).
- **scored end to end**: the default scoring stage (tier 0 on every trace, results stored in a
  SQLite file, conversations tracked, results published to a results topic as in production;
  no judge), timed two ways (``bench/scored_rate.py``): **burst**, traces/s from the first
  message read to the last trace processed, which includes the run's start and the last
  trace's latency (an OTLP trace leaves the assembler 1 s after its last span); and
  **sustained**, traces/s between 10% and 90% of the traces processed, the steady-state rate
  of a continuous stream, where that latency overlaps later traces' work. Beside each, the
  bench process's CPU per trace over the same span (the daemon runs in it, so other work on
  the machine does not inflate it), and the window's CPU per trace as a share of the run's: a
  window below 0.9 counted traces read and assembled before it (an OTLP daemon reads about
  15,000 turns ahead) and is flagged not steady; ``--progress`` prints when each run reached
  10%...100% and how much of its input it had read by then. On ``--scored`` RAG turns, three a
  conversation: as native JSON, and as OpenTelemetry spans (the real SDK and OTLP encoder, four
  spans a turn, 20 turns an export message, as a Collector batches them) through both OTLP
  topologies: the internal topics (split and re-keyed to the spans topic, assembled, produced
  to the traces topic, read back by the scoring stage) and the single replica
  (``kafka.single_replica``: assembled and scored in process). The native traces are the OTLP
  turns as the monitor maps them, so both score the same content.
- **tier 0 CPU per trace**: ``bench/tier0_cpu.py``'s ``stream`` measurement (thread time per
  labelled dev trace, English and Japanese), one process per round.
- **assembly buffer**: peak memory the OTLP assembler holds with 10,000 traces pending.

A tree without ``kafka.single_replica`` (before issue 26) skips its rows; a tree from before the
pipeline-stages layout (the issue's start, dbcdfd7) cannot be imported here:
``bench/ingest_trees.py`` times its scored native path against another tree's in one session.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_tree = os.environ.get("RAGMON_BENCH_TREE")
sys.path[:0] = [str(Path(_tree).resolve())] if _tree else []
sys.path.insert(1 if _tree else 0, str(REPO))

from aiokafka import AIOKafkaConsumer  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from bench.scored_rate import ScoredRun, scored, until  # noqa: E402
from bench.tier0_cpu import percentile  # noqa: E402
from bench.tier0_cpu import run_worker as tier0_worker  # noqa: E402
from monitor.config import KafkaConfig, Settings  # noqa: E402
from monitor.daemon import Daemon, SourceSpec  # noqa: E402
from monitor.formats.otlp import decode_otlp  # noqa: E402
from monitor.formats.otlp_split import split_by_trace  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402
from monitor.messages import RawMessage  # noqa: E402
from monitor.metrics import Metrics  # noqa: E402
from monitor.models import Trace  # noqa: E402
from monitor.offline_otlp import assemble_lines  # noqa: E402
from monitor.sources.offsets import OffsetTracker  # noqa: E402
from monitor.stages.assemble import AssembleStage, OtlpMetrics  # noqa: E402
from monitor.stages.parts import PartToken  # noqa: E402
from monitor.stages.reject import Rejecter  # noqa: E402
from tests.support.kafka_io import create_topics, produce  # noqa: E402
from tests.support.otlp_spans import App, encode  # noqa: E402
from tests.support.otlp_turns import MS, Turn, langchain_turn  # noqa: E402
from tests.support.recorder import LetterRecorder  # noqa: E402
from tests.support.traces import daemon_settings, native_trace  # noqa: E402

PARTITIONS = 6
TRACES_PER_EXPORT = 20
PENDING_TRACES = 10_000
SINGLE_REPLICA = "single_replica" in KafkaConfig.model_fields


def _payload(n: int) -> bytes:
    filler = " ".join(f"fact-{n}-{i} about the branch opening hours" for i in range(24))
    trace = native_trace(
        n,
        contexts=[
            {"id": f"doc-{n}-{j}", "text": filler[: 300 + 40 * j], "score": 0.9 - j / 10}
            for j in range(3)
        ],
    )
    return json.dumps(trace).encode()


# ------------------------------------------------------------------------------- the inputs


def _turns(count: int) -> list[Turn]:
    app = App()
    start = time.time_ns()
    return [
        langchain_turn(app, n, session=f"conv-{n // 3}", start_ns=start + n * MS)
        for n in range(count)
    ]


def otlp_exports(turns: list[Turn], fmt: str = "otlp_proto") -> list[bytes]:
    """The turns as OTLP export messages of 20 turns each."""
    return [
        encode([span for turn in turns[i : i + TRACES_PER_EXPORT] for span in turn.spans], fmt)  # type: ignore[arg-type]
        for i in range(0, len(turns), TRACES_PER_EXPORT)
    ]


async def as_native(turns: list[Turn]) -> list[tuple[bytes, bytes]]:
    """The turns as the monitor maps them, as native JSON messages keyed by conversation."""
    lines = [
        (RawMessage("file", 0, n, None, value), "otlp_spans")
        for n, value in enumerate(otlp_exports(turns, "otlp_json"))
    ]
    settings = daemon_settings("localhost:1", ["t"], "g", "dlq")
    errors = io.StringIO()
    metrics = Metrics(CollectorRegistry())
    traces, rejected = await assemble_lines(lines, settings, metrics, errors)  # type: ignore[arg-type]
    assert not rejected and len(traces) == len(turns), errors.getvalue()
    traces.sort(key=lambda t: t.timestamp)
    return [
        (
            t.partition_key.encode(),
            t.model_dump_json(exclude_none=True, exclude={"assembly"}).encode(),
        )
        for t in traces
    ]


# ---------------------------------------------------------------------------------- the runs


class Clock:
    """Processor that only records when the first and the last trace arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.done = asyncio.Event()

    async def process(self, trace: Trace) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.count += 1
        if self.count >= self.expected:
            self.last = now
            self.done.set()


async def bare_consumer(bootstrap: str, topic: str, expected: int) -> float:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"bare-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen, first = 0, None
    try:
        while seen < expected:
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            for records in batches.values():
                if records and first is None:
                    first = time.perf_counter()
                seen += len(records)
    finally:
        await consumer.stop()
    assert first is not None
    return expected / (time.perf_counter() - first)


async def ingest(settings: Settings, expected: int) -> float:
    """Traces/s through the daemon's path up to a processor that only counts."""
    clock = Clock(expected)
    daemon = Daemon(settings, SourceSpec("kafka"), processor=clock, registry=CollectorRegistry())
    task = asyncio.create_task(daemon.run())
    await until(clock.done.wait, task)
    daemon.request_stop()
    await task
    assert clock.first is not None and clock.last is not None
    return expected / (clock.last - clock.first)


class Topics:
    """The bench's topics on one broker and the settings of a daemon reading them."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        base = f"bench-{uuid.uuid4().hex[:8]}"
        self.native, self.scored_native, self.otlp = base, f"{base}-scored", f"{base}-otlp"
        self.dlq, self.results = f"{base}.dlq", f"{base}.results"

    async def create(self) -> None:
        inputs = [self.native, self.scored_native, self.otlp, self.results]
        await create_topics(self.bootstrap, inputs, partitions=PARTITIONS)
        await create_topics(self.bootstrap, [self.dlq])

    async def produce_native(self, turns: list[Turn]) -> list[tuple[bytes, bytes]]:
        """`turns` as native traces on the scored native topic, keyed by conversation."""
        natives = await as_native(turns)
        await produce(
            self.bootstrap,
            self.scored_native,
            [v for _, v in natives],
            keys=[k for k, _ in natives],
        )
        return natives

    async def produce_scored(self, turns: list[Turn], otlp: bool) -> Settings:
        """`turns` where a scored run reads them (native traces, or with `otlp` OTLP protobuf
        exports for a single replica), and that run's settings."""
        if otlp:
            await produce(self.bootstrap, self.otlp, otlp_exports(turns))
            return self.settings([], otlp=True, single=True)
        await self.produce_native(turns)
        return self.settings([self.scored_native])

    def settings(self, topics: list[str], otlp: bool = False, single: bool = False) -> Settings:
        kafka: dict[str, Any] = {"format": "auto"}
        if otlp:
            kafka.update(otlp_topics=[self.otlp], internal_partitions=PARTITIONS)
            if single:
                kafka["single_replica"] = True
        group = f"g-{uuid.uuid4().hex[:6]}"
        return daemon_settings(self.bootstrap, topics, group, self.dlq, **kafka)


def _rows(topics: Topics, traces: int, scored_traces: int) -> list[tuple[str, Any]]:
    """(row name, the coroutine factory measuring it), in the order a round runs them."""
    native, scored_native = [topics.native], [topics.scored_native]
    rows: list[tuple[str, Any]] = [
        ("bare aiokafka consumer", lambda: bare_consumer(topics.bootstrap, topics.native, traces)),
        ("ingest, native", lambda: ingest(topics.settings(native), traces)),
    ]
    rows += [
        (
            "scored, native",
            lambda: scored(topics.settings(scored_native), scored_traces, topics.results),
        ),
        (
            "scored, OTLP via internal topics",
            lambda: scored(topics.settings([], otlp=True), scored_traces, topics.results),
        ),
    ]
    if SINGLE_REPLICA:
        rows.append(
            (
                "scored, OTLP single replica",
                lambda: scored(
                    topics.settings([], otlp=True, single=True), scored_traces, topics.results
                ),
            )
        )
    return rows


# ------------------------------------------------------------------------------ the memory


def assembly_memory(count: int) -> tuple[float, float]:
    """Peak MiB the assembler holds with `count` traces pending (their roots not arrived), and
    the same spans held decoded (as the assembler before issue 12 kept them)."""
    app = App()
    start = time.time_ns()
    messages = []
    for n in range(count):
        turn = langchain_turn(app, n, session=f"conv-{n // 3}", start_ns=start + n * MS)
        # everything but the root span: the trace stays pending
        messages.append(encode([s for s in turn.spans if s.parent is not None], "otlp_proto"))
    del app
    settings = daemon_settings("localhost:1", ["t"], "g", "dlq")
    metrics = Metrics(CollectorRegistry())

    class Nothing:  # nothing is released here
        async def take_assembled(self, items: Any) -> None:
            return None

    gc.collect()
    tracemalloc.start()
    tracker = OffsetTracker()
    assembly = AssembleStage(
        kafka=settings.kafka,
        metrics=metrics,
        otlp_metrics=OtlpMetrics(metrics.registry),
        rejecter=Rejecter(
            LetterRecorder(), metrics, tracker, max_bytes=settings.kafka.max_message_bytes
        ),
        tracker=tracker,
        output=Nothing(),
    )

    async def add_all(assembly: AssembleStage) -> None:
        for offset, message in enumerate(messages):
            value = bytes(bytearray(message))  # what a fetch hands over: a fresh object
            msg = RawMessage("spans", offset % 12, offset, None, value)
            token = PartToken(msg, msg, "otlp_proto")
            for part in split_by_trace(value, "otlp_proto").parts:
                await assembly.add(part, token, 0.0)

    asyncio.run(add_all(assembly))
    assert assembly.assembler.pending == count
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del assembly
    gc.collect()
    tracemalloc.start()
    held = [decode_otlp(bytes(bytearray(message)), "otlp_proto") for message in messages]
    _, decoded_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(held) == count
    return peak / 2**20, decoded_peak / 2**20


# ---------------------------------------------------------------------------------- the run


def _median(values: list[float], digits: int = 0) -> str:
    return (
        f"{statistics.median(values):>9,.{digits}f} "
        f"[{min(values):,.{digits}f}-{max(values):,.{digits}f}]"
    )


PROGRESS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def progress_line(run: ScoredRun) -> str:
    """Seconds from the first message read to the first trace processed and to each fraction
    of the traces, with the share of the input read by then: whether the sustained window is
    past the run's start-up (an input read ahead of its scoring is assembled before it)."""
    first = run.marks[0].seconds - run.start.seconds
    return f"first trace {first:.2f} s; " + ", ".join(
        f"{fraction:.0%} {run.seconds_to(fraction):.2f} s (read {run.read_by(fraction):.0%})"
        for fraction in PROGRESS
    )


def _ratios(name: str, native: list[float], other: list[float]) -> str:
    per_round = [o / n for o, n in zip(other, native, strict=True)]
    return (
        f"{name} {statistics.median(other) / statistics.median(native):.2f} "
        f"(per round {', '.join(f'{r:.2f}' for r in per_round)})"
    )


async def measure(
    bootstrap: str, traces: int, scored_traces: int, rounds: int, progress: bool = False
) -> None:
    topics = Topics(bootstrap)
    await topics.create()
    payloads = [_payload(n) for n in range(traces)]
    for start in range(0, traces, 5000):
        chunk = payloads[start : start + 5000]
        await produce(
            bootstrap, topics.native, chunk, keys=[str(i).encode() for i in range(len(chunk))]
        )
    turns = _turns(scored_traces)
    exports = otlp_exports(turns)
    natives = await topics.produce_native(turns)
    await produce(bootstrap, topics.otlp, exports)
    sizes = sorted(len(p) for p in payloads)
    print(
        f"ingest: {traces:,} native traces of {sizes[0]:,}-{sizes[-1]:,} bytes; scored: "
        f"{scored_traces:,} RAG turns, 3 a conversation, as native JSON "
        f"({sum(len(v) for _, v in natives) // len(natives):,} bytes each) and as "
        f"{len(exports):,} OTLP exports of {TRACES_PER_EXPORT} turns "
        f"({sum(map(len, exports)) // len(exports):,} bytes each); {PARTITIONS} partitions"
    )
    rows = _rows(topics, traces, scored_traces)
    figures: dict[str, list[float]] = {name: [] for name, _ in rows}
    runs: dict[str, list[ScoredRun]] = {}
    for round_no in range(1, rounds + 1):
        line, lines = [], []
        for name, run in rows:
            result = await run()
            if isinstance(result, ScoredRun):
                runs.setdefault(name, []).append(result)
                figures[name].append(result.burst)
                steady = "" if result.steady else ", not steady"
                line.append(
                    f"{name} {result.burst:,.0f} (sustained {result.sustained:,.0f}{steady})"
                )
                lines.append(f"  {name:<34} {progress_line(result)}")
            else:
                figures[name].append(result)
                line.append(f"{name} {result:,.0f}")
        print(f"round {round_no}: " + " | ".join(line), flush=True)
        if progress:
            print("\n".join(lines), flush=True)
    bare = statistics.median(figures["bare aiokafka consumer"])
    print(f"\nmedian of {rounds} rounds [range], traces/s, and the ratio to the bare consumer:")
    for name, values in figures.items():
        print(f"  {name:<34} {_median(values)}  {statistics.median(values) / bare:.4f}")
    burst = {name: [r.burst for r in scored_runs] for name, scored_runs in runs.items()}
    sustained = {name: [r.sustained for r in scored_runs] for name, scored_runs in runs.items()}
    cpu = {name: [r.cpu_ms for r in scored_runs] for name, scored_runs in runs.items()}
    window_cpu = {
        name: [r.sustained_cpu_ms for r in scored_runs] for name, scored_runs in runs.items()
    }
    print(
        "scored, traces/s, median [range]: burst (first message read to last trace processed; "
        "the last trace's latency included) | sustained (10% to 90% of the traces processed)"
    )
    for name, scored_runs in runs.items():
        shares = [r.window_share for r in scored_runs]
        unsteady = sum(not r.steady for r in scored_runs)
        note = f"; not steady in {unsteady} of {len(scored_runs)}" if unsteady else ""
        print(
            f"  {name:<34} {_median(burst[name])} | {_median(sustained[name])}  (window's CPU "
            f"per trace / the run's {min(shares):.2f}-{max(shares):.2f}{note})"
        )
    print(
        "CPU of this process per scored trace (the daemon's; ms), median [range]: first message "
        "read to last trace | 10% to 90%"
    )
    for name in runs:
        print(f"  {name:<34} {_median(cpu[name], 2)} | {_median(window_cpu[name], 2)}")
    native = "scored, native"
    for name in ("scored, OTLP via internal topics", "scored, OTLP single replica"):
        if name in runs:
            cpu_ratio = statistics.median(cpu[native]) / statistics.median(cpu[name])
            window_ratio = statistics.median(window_cpu[native]) / statistics.median(
                window_cpu[name]
            )
            print(
                f"  {name[len('scored, ') :]} / native, scored: "
                f"{_ratios('burst', burst[native], burst[name])}; "
                f"{_ratios('sustained', sustained[native], sustained[name])}; "
                f"by CPU per trace {cpu_ratio:.2f} (10% to 90%: {window_ratio:.2f})"
            )


def tier0(rounds: int) -> None:
    """tier0_cpu's `stream` measurement, one process per round, pooled."""
    tree = Path(_tree).resolve() if _tree else REPO
    ms: dict[str, list[float]] = {}
    for _ in range(rounds):
        for language, values in tier0_worker(tree, "stream")["ms"].items():
            ms.setdefault(language, []).extend(values)
    for language, values in ms.items():
        print(
            f"  tier 0 CPU per trace, {language}: p50 {percentile(values, 0.5):.3f} ms, "
            f"p95 {percentile(values, 0.95):.3f} ms ({len(values):,} traces)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    parser.add_argument("--traces", type=int, default=30_000, help="native traces ingested")
    parser.add_argument(
        "--scored",
        type=int,
        default=30_000,
        help="RAG turns scored (an OTLP daemon reads ~15,000 ahead: fewer leave no steady window)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="a source tree whose `monitor` to measure")
    parser.add_argument(
        "--progress", action="store_true", help="also when each scored run reached 10%%...100%%"
    )
    args = parser.parse_args()
    if args.tree is not None and not _tree:  # re-run with that tree first on the path
        env = {**os.environ, "RAGMON_BENCH_TREE": str(args.tree.resolve())}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    configure_logging("console", "warning")  # as `rag-monitor run` would: no per-trace lines
    import monitor

    print(f"monitor from {Path(monitor.__file__).parent}")
    if args.bootstrap:
        asyncio.run(measure(args.bootstrap, args.traces, args.scored, args.rounds, args.progress))
    else:
        from tests.support.kafka_broker import KafkaBroker

        with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
            asyncio.run(
                measure(broker.bootstrap, args.traces, args.scored, args.rounds, args.progress)
            )
    tier0(args.rounds)
    peak, decoded = assembly_memory(PENDING_TRACES)
    print(
        f"  assembly buffer at {PENDING_TRACES:,} pending traces: peak {peak:.1f} MiB "
        f"({peak * 2**20 / PENDING_TRACES:,.0f} bytes a trace); the same spans held "
        f"decoded: {decoded:.1f} MiB ({decoded * 2**20 / PENDING_TRACES:,.0f} bytes a trace)"
    )


if __name__ == "__main__":
    main()
