"""Compressed batches and OTLP exports (from the real OpenTelemetry SDK) through the real broker."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_spans import openinference_rag_spans, split_in_two
from tests.support.recorder import SlowRecorder
from tests.support.traces import RunningDaemon, daemon_settings, encode, native_trace, wait_for

pytestmark = pytest.mark.kafka


async def test_messages_compressed_with_every_codec_are_read(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.in"
    await create_topics(kafka_broker.bootstrap, [topic, f"{topic_prefix}.dlq"])
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    expected = set()
    for index, codec in enumerate(codecs):
        traces = [native_trace(index * 100 + i) for i in range(20)]
        expected |= {t["trace_id"] for t in traces}
        await produce(kafka_broker.bootstrap, topic, [encode(t) for t in traces], compression=codec)
    stage = SlowRecorder()
    settings = daemon_settings(
        kafka_broker.bootstrap, [topic], f"{topic_prefix}.group", f"{topic_prefix}.dlq"
    )
    running = RunningDaemon(
        Daemon(settings, SourceSpec("kafka"), processor=stage, registry=CollectorRegistry())
    )
    await running.started()
    await wait_for(lambda: set(stage.finished) >= expected, 60, "traces of every codec")
    assert await running.stop() == 0


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
async def test_otlp_spans_split_across_messages_become_one_trace_each(
    kafka_broker: KafkaBroker, topic_prefix: str, fmt: str
) -> None:
    topic = f"{topic_prefix}.in"
    await create_topics(kafka_broker.bootstrap, [topic, f"{topic_prefix}.dlq"])
    traces = [openinference_rag_spans(session=f"session-{i}") for i in range(3)]
    messages = [part for spans in traces for part in split_in_two(spans, fmt)]  # type: ignore[arg-type]
    assert len(messages) == 6, "each trace's spans travel in two messages"
    await produce(kafka_broker.bootstrap, topic, messages)
    received = []

    class Keep(SlowRecorder):
        async def process(self, trace):  # type: ignore[no-untyped-def]
            received.append(trace)
            await super().process(trace)

    stage = Keep()
    settings = daemon_settings(
        kafka_broker.bootstrap,
        [topic],
        f"{topic_prefix}.group",
        f"{topic_prefix}.dlq",
        format="auto",
        otlp_assembly_window_seconds=1.0,
    )
    running = RunningDaemon(
        Daemon(settings, SourceSpec("kafka"), processor=stage, registry=CollectorRegistry())
    )
    await running.started()
    await wait_for(lambda: len(received) >= 3, 60, "three assembled traces")
    assert await running.stop() == 0
    assert len(received) == 3, "one trace per OTLP trace id, not one per message"
    for trace in received:
        assert trace.query and trace.answer
        assert len(trace.contexts) == 2, "retriever documents from the other message are joined"
        assert trace.conversation_id is not None and trace.conversation_id.startswith("session-")
