"""At-least-once delivery through the real Apache Kafka broker: commits, crashes, rebalances."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from monitor.models import Trace
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import committed_offsets, create_topics, produce, read_all
from tests.support.recorder import SlowRecorder
from tests.support.traces import (
    RunningDaemon,
    daemon_settings,
    encode,
    native_trace,
    produce_traces,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _daemon(broker: KafkaBroker, prefix: str, stage: SlowRecorder, **kafka: object) -> Daemon:
    settings = daemon_settings(
        broker.bootstrap, [f"{prefix}.in"], f"{prefix}.group", f"{prefix}.dlq", **kafka
    )
    return Daemon(settings, SourceSpec("kafka"), processor=stage, registry=CollectorRegistry())


async def test_every_trace_is_processed_and_offsets_reach_the_end(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in"], partitions=3)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    traces = [native_trace(i) for i in range(300)]
    await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", traces)
    stage = SlowRecorder()
    running = RunningDaemon(_daemon(kafka_broker, topic_prefix, stage))
    await running.started()
    await wait_for(lambda: len(stage.finished) >= 300, 60, "all traces processed")

    async def committed_to_end() -> bool:
        offsets = await committed_offsets(kafka_broker.bootstrap, f"{topic_prefix}.group")
        return sum(offsets.values()) == 300

    await wait_for(committed_to_end, 30, "offsets committed to the end of every partition")
    assert await running.stop() == 0
    assert sorted(stage.finished) == sorted(t["trace_id"] for t in traces)


async def test_a_crash_mid_batch_loses_nothing_and_commits_never_pass_unfinished_work(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic, group = f"{topic_prefix}.in", f"{topic_prefix}.group"
    await create_topics(kafka_broker.bootstrap, [topic], partitions=2)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    traces = [native_trace(i) for i in range(400)]
    await produce_traces(kafka_broker.bootstrap, topic, traces)
    offset_of: dict[tuple[int, int], str] = {}
    for record in await read_all(kafka_broker.bootstrap, topic, expected=400):
        offset_of[(record.partition, record.offset)] = Trace.model_validate_json(
            record.value
        ).trace_id

    first = SlowRecorder(delay=(0.01, 0.05))
    violations: list[str] = []

    async def audit_commits() -> None:
        """While the daemon runs, every committed offset must sit above finished work only."""
        while True:
            committed_now = await committed_offsets(kafka_broker.bootstrap, group)
            finished = set(first.finished)  # read after the commits: it only grows
            for (_, partition), committed in committed_now.items():
                for offset in range(committed):
                    if offset_of[(partition, offset)] not in finished:
                        violations.append(
                            f"partition {partition} committed {committed} "
                            f"but offset {offset} was unfinished"
                        )
            await asyncio.sleep(0.05)

    auditor = asyncio.create_task(audit_commits())
    running = RunningDaemon(
        _daemon(kafka_broker, topic_prefix, first, max_in_flight=50, fetch_max_records=20)
    )
    await running.started()
    await wait_for(lambda: len(first.finished) >= 120, 60, "part of the traces processed")
    await running.crash()
    auditor.cancel()
    assert not violations, violations[:5]
    assert len(set(first.finished)) < 400, "the crash came too late to test anything"

    second = SlowRecorder()
    running = RunningDaemon(_daemon(kafka_broker, topic_prefix, second))
    await running.started()
    everything = {t["trace_id"] for t in traces}
    await wait_for(
        lambda: set(first.finished) | set(second.finished) >= everything,
        60,
        "every trace processed after the restart",
    )
    assert await running.stop() == 0
    # At-least-once: what the first run finished but had not committed is processed again.
    assert len(first.finished) + len(second.finished) >= 400


async def test_two_consumers_in_a_group_lose_nothing_across_a_rebalance(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.in"
    await create_topics(kafka_broker.bootstrap, [topic], partitions=4)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    first, second = SlowRecorder(delay=(0, 0.01)), SlowRecorder(delay=(0, 0.01))
    one = RunningDaemon(_daemon(kafka_broker, topic_prefix, first))
    await one.started()
    batch1 = [native_trace(i) for i in range(200)]
    await produce(
        kafka_broker.bootstrap,
        topic,
        [encode(t) for t in batch1],
        keys=[t["trace_id"].encode() for t in batch1],
    )
    await wait_for(lambda: len(first.finished) >= 50, 60, "first consumer busy")
    two = RunningDaemon(_daemon(kafka_broker, topic_prefix, second))  # joins: rebalance
    await two.started()
    batch2 = [native_trace(i) for i in range(200, 400)]
    await produce(
        kafka_broker.bootstrap,
        topic,
        [encode(t) for t in batch2],
        keys=[t["trace_id"].encode() for t in batch2],
    )
    everything = {t["trace_id"] for t in batch1 + batch2}
    await wait_for(
        lambda: set(first.finished) | set(second.finished) >= everything,
        90,
        "every trace processed by one of the two consumers",
    )
    await wait_for(lambda: bool(second.finished), 30, "the second consumer got partitions")
    assert await one.stop() == 0
    assert await two.stop() == 0


async def test_the_daemon_reconnects_after_the_broker_restarts_and_loses_nothing(
    private_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.in"
    await create_topics(private_broker.bootstrap, [topic], partitions=2)
    await create_topics(private_broker.bootstrap, [f"{topic_prefix}.dlq"])
    stage = SlowRecorder(delay=(0, 0.005))
    running = RunningDaemon(_daemon(private_broker, topic_prefix, stage))
    await running.started()
    batch1 = [native_trace(i) for i in range(150)]
    await produce(private_broker.bootstrap, topic, [encode(t) for t in batch1])
    await wait_for(lambda: len(stage.finished) >= 20, 60, "consumption under way")
    await asyncio.to_thread(private_broker.stop)
    daemon = running.daemon
    await wait_for(lambda: not daemon._ready()[0], 60, "/readyz to report the outage")
    assert daemon._healthy()[0], "liveness does not depend on Kafka"
    await asyncio.to_thread(private_broker.start)
    batch2 = [native_trace(i) for i in range(150, 300)]
    await produce(private_broker.bootstrap, topic, [encode(t) for t in batch2])
    everything = {t["trace_id"] for t in batch1 + batch2}
    await wait_for(
        lambda: set(stage.finished) >= everything,
        120,
        "every trace processed after the broker came back",
    )

    async def committed_to_end() -> bool:
        offsets = await committed_offsets(private_broker.bootstrap, f"{topic_prefix}.group")
        return sum(offsets.values()) == 300

    await wait_for(committed_to_end, 60, "offsets committed after the restart")
    await wait_for(lambda: daemon._ready()[0], 60, "ready again after the outage")
    assert await running.stop() == 0
