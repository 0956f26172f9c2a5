"""OTLP logs carrying GenAI content: decoding ExportLogsServiceRequest, joining events to spans.

The telemetry is produced by the real OpenTelemetry SDK and, for the current conventions, by
opentelemetry-util-genai's TelemetryHandler in `event_only` mode (what
opentelemetry-instrumentation-openai-v2 uses), then encoded with the real OTLP encoders in
protobuf and in OTLP/JSON (hex ids), as the Collector's Kafka exporter writes them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text

from monitor.formats.otlp import OtlpDecodeError, SpanRecord, decode_otlp, spans_to_trace
from monitor.formats.otlp_logs import (
    BODY_ATTRIBUTE,
    LogEvent,
    attach_log_events,
    decode_otlp_logs,
    detect_logs_format,
)
from monitor.formats.otlp_split import split_logs_by_trace
from monitor.models import Trace
from tests.support.otlp_spans import FORMATS, Fmt, serialize

QUESTION = "How long is the refund window?"
ANSWER = "Refunds are accepted within 30 days of delivery."
CONTEXT = "Refunds are accepted within 30 days of delivery. Shipping takes two days."


@dataclass
class Telemetry:
    """A service's tracer and logger providers with in-memory exporters."""

    spans: InMemorySpanExporter
    logs: InMemoryLogRecordExporter
    tracer_provider: TracerProvider
    logger_provider: LoggerProvider

    def span_message(self, fmt: Fmt) -> bytes:
        return serialize(encode_spans(self.spans.get_finished_spans()), fmt)

    def log_message(self, fmt: Fmt) -> bytes:
        return serialize_logs(encode_logs(self.logs.get_finished_logs()), fmt)


def serialize_logs(request: ExportLogsServiceRequest, fmt: Fmt) -> bytes:
    if fmt == "otlp_proto":
        data: bytes = request.SerializeToString()
        return data
    document = json_format.MessageToDict(request)
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for key in ("traceId", "spanId"):  # OTLP/JSON writes ids as hex
                    if key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    return json.dumps(document).encode()


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    resource = Resource.create({"service.name": "support-bot"})
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    yield Telemetry(spans, logs, tracer_provider, logger_provider)
    tracer_provider.shutdown()
    logger_provider.shutdown()


def _rag_turn_event_only(telemetry: Telemetry) -> None:
    """One RAG turn recorded by util-genai: workflow, retrieval, inference; content as events."""
    handler = TelemetryHandler(
        tracer_provider=telemetry.tracer_provider, logger_provider=telemetry.logger_provider
    )
    workflow = handler.workflow("support_answer")
    workflow.attributes["gen_ai.conversation.id"] = "conv-7"
    workflow.input_messages = [InputMessage(role="user", parts=[Text(content=QUESTION)])]
    with handler.retrieval(data_source_id="kb") as retrieval:
        retrieval.query_text = QUESTION
        retrieval.top_k = 3
        retrieval.documents = [{"id": "kb-1", "score": 0.9, "content": CONTEXT}]
    with handler.inference("openai", request_model="gpt-4o-mini") as inference:
        inference.input_messages = [
            InputMessage(role="system", parts=[Text(content=f"Context: {CONTEXT}")]),
            InputMessage(role="user", parts=[Text(content=QUESTION)]),
        ]
        inference.output_messages = [
            OutputMessage(role="assistant", parts=[Text(content=ANSWER)], finish_reason="stop")
        ]
    workflow.output_messages = [
        OutputMessage(role="assistant", parts=[Text(content=ANSWER)], finish_reason="stop")
    ]
    workflow.stop()


@pytest.mark.parametrize("fmt", FORMATS)
def test_event_only_turn_maps_once_its_log_events_join_the_spans(
    fmt: Fmt, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "event_only")
    _rag_turn_event_only(telemetry)
    spans = decode_otlp(telemetry.span_message(fmt), fmt)
    assert detect_logs_format(telemetry.log_message(fmt)) == fmt
    events = decode_otlp_logs(telemetry.log_message(fmt), fmt)

    (event,) = events
    chat = next(s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat")
    assert (event.trace_id, event.span_id) == (chat.trace_id, chat.span_id)
    assert event.name == "gen_ai.client.inference.operation.details"
    assert event.attributes["gen_ai.output.messages"][0]["parts"][0]["content"] == ANSWER

    with pytest.raises(Exception, match="no_answer"):
        spans_to_trace(spans)  # the spans alone carry no content
    trace = spans_to_trace(attach_log_events(spans, events))
    assert isinstance(trace, Trace)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert trace.conversation_id == "conv-7"
    assert trace.agent == "support-bot"
    assert trace.model == "gpt-4o-mini"
    # event_only records the retrieval's documents nowhere: the trace says so
    assert trace.contexts == [] and trace.contexts_without_text == 3


@pytest.mark.parametrize("fmt", FORMATS)
def test_span_only_turn_needs_no_logs(
    fmt: Fmt, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    _rag_turn_event_only(telemetry)
    assert telemetry.logs.get_finished_logs() == ()
    trace = spans_to_trace(decode_otlp(telemetry.span_message(fmt), fmt))
    assert isinstance(trace, Trace)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert [(c.id, c.text) for c in trace.contexts] == [("kb-1", CONTEXT)]
    assert trace.contexts_without_text is None


def _legacy_events(telemetry: Telemetry) -> None:
    """GenAI 1.27-1.36 events as the older openai-v2 emitted them: the event name in the
    `event.name` attribute, the content in the log body."""
    tracer = telemetry.tracer_provider.get_tracer("app")
    logger = telemetry.logger_provider.get_logger("opentelemetry.instrumentation.openai_v2")
    with (
        tracer.start_as_current_span(
            "rag", attributes={"traceloop.span.kind": "workflow", "session.id": "s-1"}
        ),
        tracer.start_as_current_span(
            "chat gpt-4", attributes={"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}
        ),
    ):
        context = trace_api.set_span_in_context(trace_api.get_current_span())
        logger.emit(
            attributes={"event.name": "gen_ai.user.message", "gen_ai.system": "openai"},
            body={"content": QUESTION},
            context=context,
        )
        logger.emit(
            attributes={"event.name": "gen_ai.choice", "gen_ai.system": "openai"},
            body={"index": 0, "finish_reason": "stop", "message": {"content": ANSWER}},
            context=context,
        )
    logger.emit(body="an application log line without a span")


@pytest.mark.parametrize("fmt", FORMATS)
def test_legacy_role_events_in_logs(fmt: Fmt, telemetry: Telemetry) -> None:
    _legacy_events(telemetry)
    events = decode_otlp_logs(telemetry.log_message(fmt), fmt)
    assert [e.name for e in events] == ["gen_ai.user.message", "gen_ai.choice"], (
        "the name moves from the event.name attribute; the log without a span is left out"
    )
    assert events[0].attributes[BODY_ATTRIBUTE] == {"content": QUESTION}
    assert "event.name" not in events[0].attributes
    spans = decode_otlp(telemetry.span_message(fmt), fmt)
    trace = spans_to_trace(attach_log_events(spans, events))
    assert isinstance(trace, Trace)
    assert (trace.query, trace.answer, trace.conversation_id) == (QUESTION, ANSWER, "s-1")


@pytest.mark.parametrize("fmt", FORMATS)
def test_split_keeps_per_trace_only_the_records_the_mapping_reads(
    fmt: Fmt, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A logs export holding two turns' GenAI events, an application log without a span and an
    event of a span that the mapping does not read: one part per trace, each a protobuf logs
    export with only that trace's GenAI records under their resource and scope."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "event_only")
    _rag_turn_event_only(telemetry)
    _rag_turn_event_only(telemetry)
    _legacy_events(telemetry)  # a third trace, plus a log line without a span
    logger = telemetry.logger_provider.get_logger("app")
    with telemetry.tracer_provider.get_tracer("app").start_as_current_span("http"):
        context = trace_api.set_span_in_context(trace_api.get_current_span())
        logger.emit(attributes={"event.name": "app.cache.miss"}, body="miss", context=context)
    message = telemetry.log_message(fmt)
    everything = decode_otlp_logs(message, fmt)
    traces_in_order = list(dict.fromkeys(e.trace_id for e in everything))
    assert len(traces_in_order) == 4

    parts = split_logs_by_trace(message, fmt)
    assert [p.trace_id for p in parts] == traces_in_order[:3], "the cache-miss trace is left out"
    assert [p.records for p in parts] == [1, 1, 2]
    for part in parts:
        events = decode_otlp_logs(part.data, "otlp_proto")
        assert {e.trace_id for e in events} == {part.trace_id}
        assert events == [e for e in everything if e.trace_id == part.trace_id]
        request = ExportLogsServiceRequest.FromString(part.data)
        resource = {
            a.key: a.value.string_value for a in request.resource_logs[0].resource.attributes
        }
        assert resource["service.name"] == "support-bot"
        assert request.resource_logs[0].scope_logs[0].scope.name
    first_chat = decode_otlp_logs(parts[0].data, "otlp_proto")[0]
    assert first_chat.attributes["gen_ai.output.messages"][0]["parts"][0]["content"] == ANSWER


def test_split_of_logs_without_genai_events_is_empty_and_of_garbage_an_error(
    telemetry: Telemetry,
) -> None:
    telemetry.logger_provider.get_logger("app").emit(body="service started")
    assert split_logs_by_trace(telemetry.log_message("otlp_proto"), "otlp_proto") == []
    with pytest.raises(OtlpDecodeError) as caught:
        split_logs_by_trace(b'{"resourceSpans": []}', "otlp_json")
    assert caught.value.reason == "schema_violation"


def _span(span_id: str, trace_id: str = "a" * 32) -> SpanRecord:
    return SpanRecord(trace_id, span_id, None, "chat", 1, 2)


def _event(span_id: str, time: int, text: str, trace_id: str = "a" * 32) -> LogEvent:
    return LogEvent(trace_id, span_id, "gen_ai.user.message", time, {BODY_ATTRIBUTE: text})


def test_join_matches_trace_and_span_ids_in_time_order_and_once() -> None:
    spans = [_span("1" * 16), _span("2" * 16)]
    late, early = _event("1" * 16, 20, "second"), _event("1" * 16, 10, "first")
    elsewhere = _event("1" * 16, 5, "other trace", trace_id="b" * 32)
    unknown_span = _event("3" * 16, 5, "no such span")
    joined = attach_log_events(spans, [late, early, early, elsewhere, unknown_span])
    assert [e.attributes[BODY_ATTRIBUTE] for e in joined[0].events] == ["first", "second"]
    assert joined[1] is spans[1], "a span without events is returned as it is"
    again = attach_log_events(joined, [early])
    assert len(again[0].events) == 2, "redelivered events are attached once"
    assert attach_log_events(spans, []) == spans


@pytest.mark.parametrize(
    ("data", "fmt", "reason"),
    [
        (b"", "otlp_proto", "empty_message"),
        (b"\xff\x00garbage", "otlp_proto", "invalid_protobuf"),
        (b'{"resourceLogs": [', "otlp_json", "invalid_json"),
        (b"[1, 2]", "otlp_json", "schema_violation"),
        (b'{"resourceSpans": []}', "otlp_json", "schema_violation"),
        (b"\xff\xfe", "otlp_json", "invalid_utf8"),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": '
            b'[{"traceId": "zz", "spanId": "1"}]}]}]}',
            "otlp_json",
            "invalid_id",
        ),
    ],
)
def test_undecodable_logs_are_decode_errors(data: bytes, fmt: Any, reason: str) -> None:
    with pytest.raises(OtlpDecodeError) as caught:
        decode_otlp_logs(data, fmt)
    assert caught.value.reason == reason
    assert detect_logs_format(b'  {"resourceLogs": []}') == "otlp_json"
    assert detect_logs_format(b"\x0a\x00") == "otlp_proto"
