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
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from monitor.formats.assembly import SpanShape
from monitor.formats.otlp import OtlpDecodeError, OtlpFormat, parse_request
from monitor.formats.otlp_conventions import mapped_event_names
from monitor.formats.otlp_logs import log_event, parse_logs_request
from monitor.formats.otlp_salvage import encode_rejected, salvage, span_problem

__all__ = [
    "LogsPart",
    "RejectedPart",
    "Split",
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


@dataclass(frozen=True, slots=True)
class RejectedPart:
    """The spans of one trace the message carries that cannot be used (a bad span, or one
    under a bad resource or scope): why, and its spans as they came in the input's format.
    `trace_id` is None for spans whose trace id cannot be read."""

    trace_id: str | None
    detail: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Split:
    """A message split per trace: the usable parts, and the traces rejected whole."""

    parts: list[TracePart]
    rejected: list[RejectedPart] = field(default_factory=list)


def split_by_trace(data: bytes, fmt: OtlpFormat) -> Split:
    """One part per trace the message carries, in first-seen order (none when it has no spans).

    A trace with a bad span (a wrong JSON type, invalid UTF-8, a malformed id) or under a bad
    resource or scope is rejected alone and the others are kept (`otlp_salvage`). Raises
    OtlpDecodeError when nothing in the message can be used: it is not a decodable export, or
    no trace in it is good.
    """
    try:
        request = parse_request(data, fmt)
    except OtlpDecodeError as exc:
        return _salvaged(data, fmt, exc)
    spans = [
        (r, s, span)
        for r, resource_spans in enumerate(request.resource_spans)
        for s, scope_spans in enumerate(resource_spans.scope_spans)
        for span in scope_spans.spans
    ]
    for _, _, span in spans:
        problem = span_problem(span)
        if problem is not None:
            return _salvaged(data, fmt, OtlpDecodeError("invalid_id", problem))
    # the bytes are already the one trace's
    return Split(_parts(request, spans, data if fmt == "otlp_proto" else None))


def _salvaged(data: bytes, fmt: OtlpFormat, error: OtlpDecodeError) -> Split:
    saved = salvage(data, fmt)
    if saved is None or not saved.spans:
        raise error  # nothing to keep: the message is the dead letter, as it came
    rejected = [RejectedPart(r.trace_id, r.detail, encode_rejected(r, fmt)) for r in saved.rejected]
    return Split(_parts(saved.request, saved.spans, None), rejected)


def _parts(
    request: ExportTraceServiceRequest,
    spans: list[tuple[int, int, Span]],
    whole: bytes | None,
) -> list[TracePart]:
    """One part per trace of `spans`; `whole` is the request's own bytes, used as the part when
    there is one trace."""
    groups: dict[bytes, list[tuple[int, int, Span]]] = {}
    for r, s, span in spans:
        groups.setdefault(bytes(span.trace_id), []).append((r, s, span))
    single = len(groups) == 1 and whole is not None
    return [
        TracePart(
            trace_id.hex(),
            whole
            if single and whole is not None
            else _subset(request, grouped, _SPANS).SerializeToString(),
            tuple(_shape(span) for _, _, span in grouped),
        )
        for trace_id, grouped in groups.items()
    ]


def _shape(span: Span) -> SpanShape:
    return SpanShape(
        bytes(span.span_id),
        bytes(span.parent_span_id) if any(span.parent_span_id) else b"",
        int(span.start_time_unix_nano),
        int(span.end_time_unix_nano),
    )


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
