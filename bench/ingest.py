"""Ingest throughput: the daemon's consume/decode/dispatch path versus a bare aiokafka consumer.

Both read the same messages (1-2 KB native traces, 6 partitions) from one broker in one run;
the figure that matters is the ratio (target >= 0.5), since this machine's absolute speed varies.

    python bench/ingest.py                      # starts the test broker (scripts/setup-kafka.sh)
    python bench/ingest.py --bootstrap HOST:PORT --traces 100000
    python bench/ingest.py --scoring --traces 5000
    python bench/ingest.py --otlp --traces 20000

``--scoring`` also runs the whole default stage (tier 0 on every trace, results stored in a
SQLite file, conversations tracked; no judge, no results topic) and prints traces/s from the
first to the last stored result: what one replica scores end to end.

``--otlp`` writes the same number of RAG traces as OpenTelemetry spans (the real SDK and OTLP
encoder; four spans a trace, 20 traces an export message, as a Collector batches them) and
prints traces/s through both OTLP stages (split and re-keyed through the spans topic,
assembled, produced to the traces topic, read by the scoring stage) against the native path in
the same run; then the peak memory the assembler holds with 10,000 traces pending.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.daemon import Daemon, SourceSpec
from monitor.formats.otlp import decode_otlp
from monitor.formats.otlp_split import split_by_trace
from monitor.logs import configure_logging
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sources.offsets import OffsetTracker
from monitor.stages.assemble import AssembleStage, OtlpMetrics
from monitor.stages.parts import PartToken
from monitor.stages.reject import Rejecter
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, langchain_turn
from tests.support.recorder import LetterRecorder
from tests.support.traces import daemon_settings, native_trace

PARTITIONS = 6


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


async def until_done(clock: Clock, daemon_task: asyncio.Task[int]) -> None:
    """Wait for the last trace; a daemon that stops early raises here instead of hanging."""
    waiting = asyncio.create_task(clock.done.wait())
    await asyncio.wait([waiting, daemon_task], return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        daemon_task.result()
        raise RuntimeError(f"the daemon stopped after {clock.count} of {clock.expected} traces")


class Clock:
    """Stage that only records when the first and the last trace arrived."""

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


async def daemon_path(bootstrap: str, topic: str, expected: int) -> float:
    group = f"daemon-{uuid.uuid4().hex[:6]}"
    settings = daemon_settings(bootstrap, [topic], group, f"{topic}.dlq", format="auto")
    clock = Clock(expected)
    daemon = Daemon(settings, SourceSpec("kafka"), processor=clock, registry=CollectorRegistry())
    task = asyncio.create_task(daemon.run())
    await until_done(clock, task)
    daemon.request_stop()
    await task
    assert clock.first is not None and clock.last is not None
    return expected / (clock.last - clock.first)


async def _poll(condition: Callable[[], bool]) -> None:
    # A Prometheus counter has no event to wait on; 5 ms polling is far below the run's length.
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def scoring_path(bootstrap: str, topic: str, expected: int) -> float:
    """Traces/s through the default scoring stage, from the first processed to the last."""
    with tempfile.TemporaryDirectory() as workdir:
        settings = daemon_settings(
            bootstrap, [topic], f"scoring-{uuid.uuid4().hex[:6]}", f"{topic}.dlq", format="auto"
        ).model_copy(deep=True)
        settings.store.url = SecretStr(f"sqlite+aiosqlite:///{Path(workdir) / 'results.db'}")
        settings.results.topic = None
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        task = asyncio.create_task(daemon.run())

        def processed() -> float:
            sample = daemon.metrics.registry.get_sample_value(
                "ragmon_traces_processed_total", {"agent": "default", "outcome": "ok"}
            )
            return sample or 0.0

        await _poll(lambda: processed() > 0)
        first = time.perf_counter()
        await _poll(lambda: processed() >= expected)
        elapsed = time.perf_counter() - first
        daemon.request_stop()
        await task
    return (expected - 1) / elapsed


TRACES_PER_EXPORT = 20
PENDING_TRACES = 10_000


def otlp_exports(count: int) -> list[bytes]:
    """`count` RAG traces as OTLP protobuf export messages of 20 traces each."""
    app = App()
    start = time.time_ns()
    turns = [
        langchain_turn(app, n, session=f"conv-{n // 3}", start_ns=start + n * MS)
        for n in range(count)
    ]
    return [
        encode(
            [span for turn in turns[i : i + TRACES_PER_EXPORT] for span in turn.spans],
            "otlp_proto",
        )
        for i in range(0, count, TRACES_PER_EXPORT)
    ]


async def otlp_path(bootstrap: str, otlp_topic: str, dlq: str, expected: int) -> float:
    """Traces/s from the first trace the scoring stage reads to the last, through both stages."""
    group = f"otlp-{uuid.uuid4().hex[:6]}"
    settings = daemon_settings(
        bootstrap, [], group, dlq, otlp_topics=[otlp_topic], internal_partitions=PARTITIONS
    )
    clock = Clock(expected)
    daemon = Daemon(settings, SourceSpec("kafka"), processor=clock, registry=CollectorRegistry())
    task = asyncio.create_task(daemon.run())
    await until_done(clock, task)
    daemon.request_stop()
    await task
    assert clock.first is not None and clock.last is not None
    return expected / (clock.last - clock.first)


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


async def main_async(
    bootstrap: str, traces: int, rounds: int, scoring: bool = False, otlp: bool = False
) -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, [topic], partitions=PARTITIONS)
    await create_topics(bootstrap, [f"{topic}.dlq"])
    payloads = [_payload(n) for n in range(traces)]
    sizes = sorted(len(p) for p in payloads)
    for start in range(0, traces, 5000):
        chunk = payloads[start : start + 5000]
        await produce(bootstrap, topic, chunk, keys=[str(i).encode() for i in range(len(chunk))])
    print(f"{traces} traces, {sizes[0]}-{sizes[-1]} bytes each, {PARTITIONS} partitions")
    otlp_topic = f"{topic}-otlp"
    if otlp:
        await create_topics(bootstrap, [otlp_topic], partitions=PARTITIONS)
        exports = otlp_exports(traces)
        await produce(bootstrap, otlp_topic, exports)
        print(
            f"the same {traces} traces as OTLP: {len(exports)} export messages of "
            f"{TRACES_PER_EXPORT} traces, {sum(map(len, exports)) // len(exports):,} bytes each"
        )
    for round_no in range(1, rounds + 1):
        bare = await bare_consumer(bootstrap, topic, traces)
        daemon = await daemon_path(bootstrap, topic, traces)
        print(
            f"round {round_no}: bare aiokafka {bare:,.0f} msg/s | daemon {daemon:,.0f} traces/s "
            f"| ratio {daemon / bare:.2f} (target >= 0.5)"
        )
        if otlp:
            through = await otlp_path(bootstrap, otlp_topic, f"{topic}.dlq", traces)
            print(
                f"round {round_no}: OTLP through both stages {through:,.0f} traces/s "
                f"| native path {daemon:,.0f} traces/s | ratio {through / daemon:.2f}"
            )
        if scoring:
            scored = await scoring_path(bootstrap, topic, traces)
            print(
                f"round {round_no}: scored end to end (tier 0, SQLite store) {scored:,.0f} traces/s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    parser.add_argument("--traces", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scoring", action="store_true", help="also the whole scoring stage")
    parser.add_argument("--otlp", action="store_true", help="also OTLP through both stages")
    args = parser.parse_args()
    configure_logging("console", "warning")  # as `rag-monitor run` would: no per-trace lines
    if args.otlp:
        peak, decoded = assembly_memory(PENDING_TRACES)
        print(
            f"assembly buffer at {PENDING_TRACES:,} pending traces: peak {peak:.1f} MiB "
            f"({peak * 2**20 / PENDING_TRACES:,.0f} bytes a trace); the same spans held "
            f"decoded: {decoded:.1f} MiB"
        )
    if args.bootstrap:
        asyncio.run(main_async(args.bootstrap, args.traces, args.rounds, args.scoring, args.otlp))
        return
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        asyncio.run(main_async(broker.bootstrap, args.traces, args.rounds, args.scoring, args.otlp))


if __name__ == "__main__":
    main()
