"""The daemon's own spans reach an OTLP/HTTP endpoint and continue the producer's traceparent."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.traces import RunningDaemon, encode, native_trace, wait_for

pytestmark = pytest.mark.kafka

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


async def test_consume_spans_continue_the_traceparent_of_the_message(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in", f"{topic_prefix}.dlq"])
    await produce(
        kafka_broker.bootstrap,
        f"{topic_prefix}.in",
        [encode(native_trace(1))],
        headers=[("traceparent", f"00-{TRACE_ID}-{PARENT_SPAN}-01".encode())],
    )
    settings = Settings.model_validate(
        {
            "kafka": {
                "bootstrap_servers": kafka_broker.bootstrap,
                "topics": [f"{topic_prefix}.in"],
                "group_id": f"{topic_prefix}.g",
                "dlq_topic": f"{topic_prefix}.dlq",
            },
            "http": {"host": "127.0.0.1", "port": 0},
            "store": {"url": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"},
            "results": {"topic": None},
            "telemetry": {"otlp_endpoint": f"http://127.0.0.1:{port}"},
        }
    )
    daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
    running = RunningDaemon(daemon)
    await running.started()
    await wait_for(
        lambda: (
            daemon.metrics.registry.get_sample_value(
                "ragmon_traces_processed_total", {"agent": "default", "outcome": "ok"}
            )
            == 1.0
        ),
        30,
        "the trace processed",
    )
    assert await running.stop() == 0  # shutdown flushes the span processor
    await runner.cleanup()
    spans = [
        span
        for request in received
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    by_name = {span.name: span for span in spans}
    assert {"rag-monitor decode", "rag-monitor process"} <= set(by_name)
    decode = by_name["rag-monitor decode"]
    assert decode.trace_id.hex() == TRACE_ID, "the producer's trace is continued"
    assert decode.parent_span_id.hex() == PARENT_SPAN
    assert by_name["rag-monitor process"].parent_span_id == decode.span_id
