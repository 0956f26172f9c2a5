"""Throughput from Kafka, in one run: the bare consumer, ingest, and scored end to end for native
and OpenTelemetry input, each as traces/s and as a ratio to the bare consumer; tier 0's CPU per
trace; the OTLP assembler's memory.

    python bench/ingest.py                      # starts the test broker (scripts/setup-kafka.sh)
    python bench/ingest.py --rounds 3 --traces 30000 --scored 3000
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
  no judge), traces/s from the first message read to the last trace processed (and the
  bench process's CPU per trace over the same span: the daemon runs in it, so other work on
  the machine does not inflate it), on ``--scored`` RAG turns, three a
  conversation: as native JSON, and as OpenTelemetry spans (the real SDK and OTLP encoder, four
  spans a turn, 20 turns an export message, as a Collector batches them) through both OTLP
  topologies: the internal topics (split and re-keyed to the spans topic, assembled, produced
  to the traces topic, read back by the scoring stage) and the single replica
  (``kafka.single_replica``: assembled and scored in process). The native traces are the OTLP
  turns as the monitor maps them, so both score the same content.
- **tier 0 CPU per trace**: ``bench/tier0_cpu.py``'s ``stream`` measurement (thread time per
  labelled dev trace, English and Japanese), one process per round.
- **assembly buffer**: peak memory the OTLP assembler holds with 10,000 traces pending.

A tree without ``kafka.single_replica`` (before issue 26) skips its rows.
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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_tree = os.environ.get("RAGMON_BENCH_TREE")
sys.path[:0] = [str(Path(_tree).resolve())] if _tree else []
sys.path.insert(1 if _tree else 0, str(REPO))

from aiokafka import AIOKafkaConsumer  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.metrics import MetricWrapperBase  # noqa: E402
from pydantic import SecretStr  # noqa: E402

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


async def _until(
    done: Callable[[], Coroutine[Any, Any, object]], daemon_task: asyncio.Task[int]
) -> None:
    """Wait for `done`; a daemon that stops early raises here instead of hanging."""
    waiting = asyncio.create_task(done())
    await asyncio.wait([waiting, daemon_task], return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        daemon_task.result()
        raise RuntimeError("the daemon stopped before the last trace")


async def ingest(settings: Settings, expected: int) -> float:
    """Traces/s through the daemon's path up to a processor that only counts."""
    clock = Clock(expected)
    daemon = Daemon(settings, SourceSpec("kafka"), processor=clock, registry=CollectorRegistry())
    task = asyncio.create_task(daemon.run())
    await _until(clock.done.wait, task)
    daemon.request_stop()
    await task
    assert clock.first is not None and clock.last is not None
    return expected / (clock.last - clock.first)


async def _poll(condition: Callable[[], bool]) -> None:
    # A Prometheus counter has no event to wait on; 5 ms polling is far below the run's length.
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def scored(
    settings: Settings,
    expected: int,
    results_topic: str,
    on_first_read: Callable[[], object] | None = None,
) -> float:
    """Traces/s through the default scoring stage, from the first processed to the last;
    `on_first_read` is called when the measured span starts (a profiler attaching)."""
    with tempfile.TemporaryDirectory() as workdir:
        settings = settings.model_copy(deep=True)
        settings.store.url = SecretStr(f"sqlite+aiosqlite:///{Path(workdir) / 'results.db'}")
        settings.results.topic = results_topic
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        task = asyncio.create_task(daemon.run())

        def total(counter: MetricWrapperBase, **labels: str) -> float:  # every agent, topic
            # One counter's samples, not the whole registry's: collecting every metric each
            # poll cost about 0.1 ms of this process's CPU per trace scored.
            return sum(
                sample.value
                for metric in counter.collect()
                for sample in metric.samples
                if sample.name.endswith("_total")
                and all(sample.labels.get(k) == v for k, v in labels.items())
            )

        # From the first message read, not the first trace scored: a single replica splits and
        # assembles a whole fetch (up to 500 exports) before its first trace is scored.
        consumed, processed = daemon.metrics.messages_consumed, daemon.metrics.traces_processed
        await _until(lambda: _poll(lambda: total(consumed) > 0), task)
        if on_first_read is not None:
            on_first_read()
        first, cpu = time.perf_counter(), time.process_time()
        done = lambda: total(processed, outcome="ok") >= expected  # noqa: E731
        await _until(lambda: _poll(done), task)
        elapsed = time.perf_counter() - first
        CPU_MS[settings.kafka.group_id] = (time.process_time() - cpu) * 1000 / expected
        daemon.request_stop()
        await task
    return expected / elapsed


# The process's CPU per scored trace (ms) of each scored run, by its group: the daemon runs in
# this process (the broker in its own), so this is what a trace costs whoever else uses the
# cores, which the traces/s of a shared machine are not.
CPU_MS: dict[str, float] = {}


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


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):>9,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


async def measure(bootstrap: str, traces: int, scored_traces: int, rounds: int) -> None:
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
    natives = await as_native(turns)
    await produce(
        bootstrap, topics.scored_native, [v for _, v in natives], keys=[k for k, _ in natives]
    )
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
    cpu: dict[str, list[float]] = {}
    for round_no in range(1, rounds + 1):
        line = []
        for name, run in rows:
            before = set(CPU_MS)
            figures[name].append(await run())
            line.append(f"{name} {figures[name][-1]:,.0f}")
            for group in set(CPU_MS) - before:
                cpu.setdefault(name, []).append(CPU_MS[group])
        print(f"round {round_no}: " + " | ".join(line), flush=True)
    bare = statistics.median(figures["bare aiokafka consumer"])
    print(f"\nmedian of {rounds} rounds [range], traces/s, and the ratio to the bare consumer:")
    for name, values in figures.items():
        print(f"  {name:<34} {_median(values)}  {statistics.median(values) / bare:.4f}")
    print("CPU of this process per scored trace (the daemon's; ms), median [range]:")
    for name, values in cpu.items():
        print(
            f"  {name:<34} {statistics.median(values):9.2f} [{min(values):.2f}-{max(values):.2f}]"
        )
    native_scored = statistics.median(figures["scored, native"])
    for name in ("scored, OTLP via internal topics", "scored, OTLP single replica"):
        if name in figures:
            per_round = [
                o / n for o, n in zip(figures[name], figures["scored, native"], strict=True)
            ]
            cpu_ratio = statistics.median(cpu["scored, native"]) / statistics.median(cpu[name])
            print(
                f"  {name[len('scored, ') :]} / native, scored: "
                f"{statistics.median(figures[name]) / native_scored:.2f} "
                f"(per round {', '.join(f'{r:.2f}' for r in per_round)}); "
                f"by CPU per trace {cpu_ratio:.2f}"
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
    parser.add_argument("--scored", type=int, default=3_000, help="RAG turns scored")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="a source tree whose `monitor` to measure")
    args = parser.parse_args()
    if args.tree is not None and not _tree:  # re-run with that tree first on the path
        env = {**os.environ, "RAGMON_BENCH_TREE": str(args.tree.resolve())}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    configure_logging("console", "warning")  # as `rag-monitor run` would: no per-trace lines
    import monitor

    print(f"monitor from {Path(monitor.__file__).parent}")
    if args.bootstrap:
        asyncio.run(measure(args.bootstrap, args.traces, args.scored, args.rounds))
    else:
        from tests.support.kafka_broker import KafkaBroker

        with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
            asyncio.run(measure(broker.bootstrap, args.traces, args.scored, args.rounds))
    tier0(args.rounds)
    peak, decoded = assembly_memory(PENDING_TRACES)
    print(
        f"  assembly buffer at {PENDING_TRACES:,} pending traces: peak {peak:.1f} MiB "
        f"({peak * 2**20 / PENDING_TRACES:,.0f} bytes a trace); the same spans held "
        f"decoded: {decoded:.1f} MiB ({decoded * 2**20 / PENDING_TRACES:,.0f} bytes a trace)"
    )


if __name__ == "__main__":
    main()
