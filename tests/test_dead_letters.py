"""Poison messages go to the dead-letter topic with their origin and reason; consumption goes on."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import committed_offsets, create_topics, produce, read_all
from tests.support.recorder import SlowRecorder
from tests.support.traces import RunningDaemon, daemon_settings, encode, native_trace, wait_for

pytestmark = pytest.mark.kafka

POISON: dict[str, bytes] = {
    "invalid_json": b'{"trace_id": "x", ',
    "invalid_utf8": b'{"trace_id": "\xff\xfe"}',
    "schema_violation": json.dumps(
        {"trace_id": "no-answer", "timestamp": "2026-01-01T00:00:00Z", "query": "q", "contexts": []}
    ).encode(),
    "unknown_schema_version": encode(native_trace(1, schema_version=7)),
    "too_large": encode(native_trace(2, answer="x" * 5000)),
    "otlp_undecodable": b"\x0a\xff\xff\xff\xff\x0f garbage that is not protobuf",
}


async def test_each_kind_of_poison_message_is_dead_lettered_with_headers(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic, dlq = f"{topic_prefix}.in", f"{topic_prefix}.dlq"
    await create_topics(kafka_broker.bootstrap, [topic, dlq])
    good_before, good_after = native_trace(100), native_trace(101)
    values = [encode(good_before), *POISON.values(), encode(good_after)]
    await produce(
        kafka_broker.bootstrap,
        topic,
        values,
        keys=[f"key-{i}".encode() for i in range(len(values))],
        headers=[("producer", b"test-suite")],
    )
    stage = SlowRecorder()
    settings = daemon_settings(
        kafka_broker.bootstrap, [topic], f"{topic_prefix}.group", dlq, max_message_bytes=4096
    )
    daemon = Daemon(settings, SourceSpec("kafka"), processor=stage, registry=CollectorRegistry())
    running = RunningDaemon(daemon)
    await running.started()
    await wait_for(lambda: len(stage.finished) == 2, 60, "both good traces processed")

    letters = await read_all(kafka_broker.bootstrap, dlq, expected=len(POISON))
    assert len(letters) == len(POISON)
    by_reason = {}
    for record in letters:
        headers = {k: v.decode() for k, v in record.headers}
        by_reason[headers["ragmon.error.reason"]] = (record, headers)
    assert set(by_reason) == set(POISON)
    for index, (reason, value) in enumerate(POISON.items(), start=1):
        record, headers = by_reason[reason]
        assert record.value == value, "the original value is kept byte for byte"
        assert record.key == f"key-{index}".encode(), "the original key is kept"
        assert headers["producer"] == "test-suite", "the original headers are kept"
        assert headers["ragmon.original.topic"] == topic
        assert headers["ragmon.original.partition"] == "0"
        assert headers["ragmon.original.offset"] == str(index)
        assert headers["ragmon.error.class"]
        assert headers["ragmon.error.message"]

    async def committed_past_everything() -> bool:
        offsets = await committed_offsets(kafka_broker.bootstrap, f"{topic_prefix}.group")
        return offsets.get((topic, 0)) == len(values)

    await wait_for(committed_past_everything, 30, "poison messages committed past")
    assert stage.finished == [good_before["trace_id"], good_after["trace_id"]]
    exported = daemon.metrics.registry.get_sample_value
    for reason in POISON:
        assert exported("ragmon_dead_letters_total", {"reason": reason}) == 1.0
    assert await running.stop() == 0
