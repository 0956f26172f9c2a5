"""OTLP logs that carry GenAI content, and joining them to the spans they belong to.

Instrumentations that follow the GenAI semantic conventions with content capture set to
`event_only` (opentelemetry-instrumentation-openai-v2 with opentelemetry-util-genai, for
example) record prompts and completions as OTLP log records ("events"), not as span
attributes. The Collector's Kafka exporter writes them to their own topic (`otlp_logs` by
default) as `ExportLogsServiceRequest`s, protobuf or OTLP/JSON, like spans.

`decode_otlp_logs` turns one such message into `LogEvent`s; `attach_log_events` joins them to
their spans by trace and span id, as span events, which is where the mapper reads GenAI events
from (`monitor.formats.otlp_mapping`). Both are pure; neither raises anything but
`OtlpDecodeError` (the decoder) whatever the input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from monitor.formats.otlp import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    OtlpDecodeError,
    SpanEvent,
    SpanRecord,
)
from monitor.formats.otlp_wire import (
    any_value,
    convert_id,
    flatten_attributes,
    guarded,
    json_document,
    members,
    parse_document,
    parse_export,
)

__all__ = [
    "BODY_ATTRIBUTE",
    "LogEvent",
    "attach_log_events",
    "decode_otlp_logs",
    "detect_logs_format",
    "log_event",
    "parse_logs_request",
]

T = TypeVar("T")
OtlpLogsFormat = Literal["otlp_json", "otlp_proto"]
BODY_ATTRIBUTE = "body"
"""The key a log record's body is stored under among the event's attributes (the older GenAI
events, `gen_ai.user.message`, `gen_ai.choice`, carry their content in the body)."""
_OTLP_LOGS_JSON_START = re.compile(rb'\s*\{\s*"(?:resourceLogs|resource_logs)"')


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One log record that belongs to a span: ids in lowercase hex, the event name, when it
    happened and its attributes (the body, when there is one, under `BODY_ATTRIBUTE`)."""

    trace_id: str
    span_id: str
    name: str
    time_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)

    def as_span_event(self) -> SpanEvent:
        return SpanEvent(self.name, self.time_unix_nano, dict(self.attributes))


def detect_logs_format(data: bytes) -> OtlpLogsFormat:
    """OTLP/JSON when the message opens with `resourceLogs`, otherwise protobuf; never raises."""
    return "otlp_json" if _OTLP_LOGS_JSON_START.match(data) else "otlp_proto"


def decode_otlp_logs(data: bytes, fmt: OtlpLogsFormat) -> list[LogEvent]:
    """The log records of one Kafka message that belong to a span, in the order sent.

    Records without a trace and span id (ordinary application logs) are left out: they cannot
    be joined to a span. Raises OtlpDecodeError (and nothing else) when the bytes are not an
    ExportLogsServiceRequest in the given format or an id is malformed.
    """
    return guarded(
        lambda: [
            event
            for resource_logs in parse_logs_request(data, fmt).resource_logs
            for scope_logs in resource_logs.scope_logs
            for record in scope_logs.log_records
            if (event := log_event(record)) is not None
        ]
    )


def parse_logs_request(data: bytes, fmt: OtlpLogsFormat) -> ExportLogsServiceRequest:
    """The export request a message holds; raises OtlpDecodeError (and nothing else) like
    `decode_otlp_logs`. Record ids are not checked here (`log_event` checks them)."""
    return parse_export(
        data, fmt, ExportLogsServiceRequest, _parse_json, resources_field="resource_logs"
    )


def _parse_json(data: bytes) -> ExportLogsServiceRequest:
    document = json_document(data, "resourceLogs", "resource_logs")
    # OTLP/JSON writes ids as hex; the protobuf JSON mapping expects base64.
    for resource_logs in members(document, "resourceLogs", "resource_logs"):
        for scope_logs in members(_dict(resource_logs), "scopeLogs", "scope_logs"):
            for record in members(_dict(scope_logs), "logRecords", "log_records"):
                if isinstance(record, dict):
                    convert_id(record, ("traceId", "trace_id"), TRACE_ID_BYTES)
                    convert_id(record, ("spanId", "span_id"), SPAN_ID_BYTES)
    return parse_document(document, ExportLogsServiceRequest())


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def log_event(record: LogRecord) -> LogEvent | None:
    """The record as an event of its span; None when it names no span (an application log).
    Raises OtlpDecodeError when an id is malformed."""
    trace_id, span_id = bytes(record.trace_id), bytes(record.span_id)
    if not any(trace_id) or not any(span_id):
        return None
    if len(trace_id) != TRACE_ID_BYTES or len(span_id) != SPAN_ID_BYTES:
        raise OtlpDecodeError(
            "invalid_id", f"log record ids must be {TRACE_ID_BYTES} and {SPAN_ID_BYTES} bytes"
        )
    attributes = flatten_attributes(record.attributes)
    # The event name is a field of its own since OTLP 1.5; older SDKs set `event.name`.
    name = record.event_name or attributes.pop("event.name", None)
    if record.HasField("body"):
        body = any_value(record.body)
        if body is not None:
            attributes[BODY_ATTRIBUTE] = body
    return LogEvent(
        trace_id=trace_id.hex(),
        span_id=span_id.hex(),
        name=name if isinstance(name, str) else "",
        time_unix_nano=int(record.time_unix_nano or record.observed_time_unix_nano),
        attributes=attributes,
    )


def attach_log_events(spans: Sequence[SpanRecord], events: Iterable[LogEvent]) -> list[SpanRecord]:
    """The spans with every log event of theirs appended to their events (in time order).

    An event joins the span with the same trace and span id; events whose span is not among
    `spans` are ignored (the caller keeps them until the span arrives, or counts them). An
    event delivered twice (at-least-once) is attached once. Spans without events are returned
    as they are.
    """
    by_span: dict[tuple[str, str], list[LogEvent]] = {}
    for event in events:
        by_span.setdefault((event.trace_id, event.span_id), []).append(event)
    if not by_span:
        return list(spans)
    joined: list[SpanRecord] = []
    for span in spans:
        found = by_span.get((span.trace_id, span.span_id))
        if not found:
            joined.append(span)
            continue
        seen = {_identity(e.name, e.time_unix_nano, e.attributes) for e in span.events}
        added: list[SpanEvent] = []
        for event in sorted(found, key=lambda e: e.time_unix_nano):
            identity = _identity(event.name, event.time_unix_nano, event.attributes)
            if identity not in seen:
                seen.add(identity)
                added.append(event.as_span_event())
        joined.append(replace(span, events=(*span.events, *added)))
    return joined


def _identity(name: str, time_unix_nano: int, attributes: dict[str, Any]) -> str:
    return f"{name}\x00{time_unix_nano}\x00{json.dumps(attributes, sort_keys=True, default=repr)}"
