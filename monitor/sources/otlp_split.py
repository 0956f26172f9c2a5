"""Splitting an OTLP export per trace, and encoding export requests back onto the wire.

The Collector's Kafka exporter puts the spans of many traces into one message and, by default
(`partition_traces_by_id: false`), spreads the spans of one trace over partitions. The OTLP stage
therefore re-keys: each message is split into one export request per trace (resource and scope
kept, so nothing the mapping reads is lost) and produced keyed by trace id. Internal parts are
always OTLP protobuf; dead letters are encoded back into the format the input used.

Log exports (GenAI events with `event_only` content capture) are split the same way, keeping
only the records the mapping reads (`otlp_conventions.mapped_event_names`) that name a span:
they join that trace's spans in the assembler.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from monitor.sources.assembly import SpanShape
from monitor.sources.otlp import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    OtlpDecodeError,
    OtlpFormat,
    parse_request,
)
from monitor.sources.otlp_conventions import mapped_event_names
from monitor.sources.otlp_logs import log_event, parse_logs_request

__all__ = [
    "LogsPart",
    "TracePart",
    "encode_request",
    "merge_parts",
    "split_by_trace",
    "split_logs_by_trace",
]

MAPPED_EVENTS = mapped_event_names()


@dataclass(frozen=True, slots=True)
class TracePart:
    """The spans of one trace from one message: an export request as OTLP protobuf bytes."""

    trace_id: str  # lowercase hex, 32 digits
    data: bytes
    shapes: tuple[SpanShape, ...]

    @property
    def span_count(self) -> int:
        return len(self.shapes)


def split_by_trace(data: bytes, fmt: OtlpFormat) -> list[TracePart]:
    """One part per trace the message carries, in first-seen order; [] when it has no spans.

    Raises OtlpDecodeError when the message is not a decodable export or a span's ids are
    malformed (the whole message is then a dead letter: its traces cannot be told apart).
    """
    request = parse_request(data, fmt)
    groups: dict[bytes, list[tuple[int, int, Span]]] = {}
    for r, resource_spans in enumerate(request.resource_spans):
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for span in scope_spans.spans:
                _check_ids(span)
                groups.setdefault(bytes(span.trace_id), []).append((r, s, span))
    single = len(groups) == 1 and fmt == "otlp_proto"  # the bytes are already this trace
    return [
        TracePart(
            trace_id.hex(),
            data if single else _subset(request, spans, _SPANS).SerializeToString(),
            tuple(_shape(span) for _, _, span in spans),
        )
        for trace_id, spans in groups.items()
    ]


def _shape(span: Span) -> SpanShape:
    return SpanShape(
        bytes(span.span_id),
        bytes(span.parent_span_id) if any(span.parent_span_id) else b"",
        int(span.start_time_unix_nano),
        int(span.end_time_unix_nano),
    )


def _check_ids(span: Span) -> None:
    trace_id, span_id, parent = bytes(span.trace_id), bytes(span.span_id), span.parent_span_id
    if len(trace_id) != TRACE_ID_BYTES or not any(trace_id):
        raise OtlpDecodeError("invalid_id", f"trace_id must be {TRACE_ID_BYTES} non-zero bytes")
    if len(span_id) != SPAN_ID_BYTES or not any(span_id):
        raise OtlpDecodeError("invalid_id", f"span_id must be {SPAN_ID_BYTES} non-zero bytes")
    if parent and len(parent) != SPAN_ID_BYTES:
        raise OtlpDecodeError("invalid_id", f"span parent_span_id must be {SPAN_ID_BYTES} bytes")


# Where an export request keeps its resources, their scopes and the scopes' items.
_SPANS = ("resource_spans", "scope_spans", "spans")
_LOGS = ("resource_logs", "scope_logs", "log_records")
_Request = TypeVar("_Request", ExportTraceServiceRequest, ExportLogsServiceRequest)


def _subset(
    request: _Request, items: list[tuple[int, int, Any]], fields: tuple[str, str, str]
) -> _Request:
    """A request holding only these spans or log records, each under a copy of its resource
    and scope (`fields`: `_SPANS` or `_LOGS`)."""
    resources_field, scopes_field, items_field = fields
    out = type(request)()
    resources: dict[int, Any] = {}
    scopes: dict[tuple[int, int], Any] = {}
    for r, s, item in items:
        scope = scopes.get((r, s))
        if scope is None:
            source = getattr(request, resources_field)[r]
            resource = resources.get(r)
            if resource is None:
                resource = resources[r] = getattr(out, resources_field).add()
                resource.resource.CopyFrom(source.resource)
                resource.schema_url = source.schema_url
            source_scope = getattr(source, scopes_field)[s]
            scope = scopes[(r, s)] = getattr(resource, scopes_field).add()
            scope.scope.CopyFrom(source_scope.scope)
            scope.schema_url = source_scope.schema_url
        getattr(scope, items_field).append(item)
    return out


@dataclass(frozen=True, slots=True)
class LogsPart:
    """The log records of one trace from one message that the mapping can use: an
    ExportLogsServiceRequest as OTLP protobuf bytes."""

    trace_id: str  # lowercase hex, 32 digits
    data: bytes
    records: int


def split_logs_by_trace(data: bytes, fmt: OtlpFormat) -> list[LogsPart]:
    """One part per trace with log records the mapping reads (GenAI events that name a span),
    in first-seen order; [] when there are none (ordinary application logs).

    Raises OtlpDecodeError when the message is not a decodable logs export or a record's ids
    are malformed.
    """
    request = parse_logs_request(data, fmt)
    groups: dict[str, list[tuple[int, int, LogRecord]]] = {}
    for r, resource_logs in enumerate(request.resource_logs):
        for s, scope_logs in enumerate(resource_logs.scope_logs):
            for record in scope_logs.log_records:
                event = log_event(record)
                if event is not None and event.name in MAPPED_EVENTS:
                    groups.setdefault(event.trace_id, []).append((r, s, record))
    return [
        LogsPart(trace_id, _subset(request, records, _LOGS).SerializeToString(), len(records))
        for trace_id, records in groups.items()
    ]


def merge_parts(parts: list[bytes]) -> bytes:
    """Several protobuf export requests as one (protobuf concatenation appends repeated fields)."""
    return b"".join(parts)


def encode_request(data: bytes, fmt: OtlpFormat) -> bytes:
    """Protobuf export bytes in the given wire format (OTLP/JSON: lowerCamelCase, hex ids)."""
    if fmt == "otlp_proto":
        return data
    request = ExportTraceServiceRequest.FromString(data)
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _ids_to_hex(span)
                for link in span.get("links", []):
                    _ids_to_hex(link)
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def _ids_to_hex(obj: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if key in obj:
            obj[key] = base64.b64decode(obj[key]).hex()
