"""A steady trickle of traces is read in fetches of several, not a fetch a trace: the broker
holds a fetch until `kafka.fetch_min_bytes` are ready or `kafka.fetch_max_wait_ms` has passed
(docs/performance.md, "CPU at a steady rate"); a lone trace is still read within that wait.
Against the real broker, through the daemon's own consumer (`KafkaSource`)."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from monitor.metrics import Metrics
from monitor.sources.kafka import KafkaSource
from monitor.sources.offsets import OffsetTracker
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.traces import daemon_settings

TRICKLE = 40  # messages, one every 25 ms: a second of traffic at 40 traces/s
GAP_SECONDS = 0.025


async def _read(bootstrap: str, topic: str, **kafka: object) -> tuple[list[int], float]:
    """The sizes of the fetches that read a one-second trickle, and how long a lone message
    produced afterwards took to be read."""
    settings = daemon_settings(bootstrap, [topic], f"g-{uuid.uuid4().hex[:8]}", "dlq", **kafka)
    source = KafkaSource(settings.kafka, OffsetTracker(), Metrics(CollectorRegistry()))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    await source.start()
    try:
        deadline = time.monotonic() + 30
        while not source.assignment:
            assert time.monotonic() < deadline, "no partition assigned"
            await source.fetch(wait_at_most=0.1)

        async def trickle() -> None:
            for n in range(TRICKLE):
                await producer.send_and_wait(topic, f'{{"n": {n}}}'.encode())
                await asyncio.sleep(GAP_SECONDS)

        sending = asyncio.create_task(trickle())
        sizes: list[int] = []
        while sum(sizes) < TRICKLE:
            assert time.monotonic() < deadline, f"read {sum(sizes)} of {TRICKLE}"
            got = await source.fetch()
            if got:
                sizes.append(len(got))
        await sending
        await asyncio.sleep(1.0)  # nothing pending: the next message comes alone
        sent = time.monotonic()
        await producer.send_and_wait(topic, b'{"n": "lone"}')
        while not await source.fetch():
            assert time.monotonic() < deadline, "the lone message was never read"
        return sizes, time.monotonic() - sent
    finally:
        await source.stop()
        await producer.stop()


async def test_a_trickle_is_read_in_fetches_of_several_and_a_lone_trace_within_the_wait(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    """Defaults (64 KiB, 500 ms): the second of traffic comes in a few fetches, about half a
    second's worth each; with `fetch_min_bytes` 1 (aiokafka's default) the broker answers each
    message alone, which is what made a steady rate cost 1.5-2.8 times the CPU a trace (10-300
    traces/s, `bench/steady_cpu.py`). Either way a lone message is read within the wait, plus the
    round trips."""
    batched, plain = f"{topic_prefix}.batched", f"{topic_prefix}.plain"
    await create_topics(kafka_broker.bootstrap, [batched, plain], partitions=1)
    sizes, lone_latency = await _read(kafka_broker.bootstrap, batched)
    one_by_one, plain_latency = await _read(kafka_broker.bootstrap, plain, fetch_min_bytes=1)
    assert len(sizes) <= 6, f"fetches of {sizes}: the broker did not hold them"
    assert max(sizes) >= 8, f"fetches of {sizes}"
    assert len(one_by_one) >= 15, f"fetch_min_bytes=1 still batched: {one_by_one}"
    assert lone_latency < 0.5 + 1.0, f"a lone message waited {lone_latency:.2f} s"
    assert plain_latency < 1.0, f"a lone message waited {plain_latency:.2f} s"
