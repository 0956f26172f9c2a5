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
    process = by_name["rag-monitor process"]
    assert process.parent_span_id == decode.span_id
    # every tier-0 score is an OTel GenAI evaluation event on the processing span
    events = [e for e in process.events if e.name == "gen_ai.evaluation.result"]
    attributes = [{a.key: a.value for a in e.attributes} for e in events]
    by_metric = {a["gen_ai.evaluation.name"].string_value: a for a in attributes}
    assert {"faithfulness", "support", "answer_relevancy"} <= set(by_metric)
    faithfulness = by_metric["faithfulness"]
    assert faithfulness["rag_monitor.evaluator"].string_value == "heuristic"
    assert 0.0 <= faithfulness["gen_ai.evaluation.score.value"].double_value <= 1.0
    assert all("error.type" not in a for a in attributes if "gen_ai.evaluation.score.value" in a)


def test_unmeasured_scores_are_events_with_their_reason_and_no_value() -> None:
    from datetime import UTC, datetime

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from monitor.models import EvaluationResult, Score
    from monitor.sinks.span_events import add_evaluation_events

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = EvaluationResult(
        trace_id="t1",
        timestamp=datetime(2026, 11, 26, tzinfo=UTC),
        evaluator="llm",
        scores={
            "faithfulness": Score.of(0.25),
            "context_precision": Score.unmeasured("no_contexts"),
        },
    )
    add_evaluation_events(result)  # no recording span: nothing, no error
    with provider.get_tracer("test").start_as_current_span("process"):
        add_evaluation_events(result)
    (span,) = exporter.get_finished_spans()
    events = {e.attributes["gen_ai.evaluation.name"]: dict(e.attributes) for e in span.events}
    assert events["faithfulness"] == {
        "gen_ai.evaluation.name": "faithfulness",
        "rag_monitor.evaluator": "llm",
        "gen_ai.evaluation.score.value": 0.25,
    }
    assert events["context_precision"]["error.type"] == "no_contexts"
    assert "gen_ai.evaluation.score.value" not in events["context_precision"]
