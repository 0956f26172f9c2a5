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
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from monitor.formats.assembly import SpanShape
from monitor.formats.otlp import OtlpDecodeError, OtlpFormat, parse_request
from monitor.formats.otlp_conventions import mapped_event_names
from monitor.formats.otlp_logs import log_event, parse_logs_request
from monitor.formats.otlp_salvage import encode_rejected, salvage, span_problem
from monitor.formats.otlp_wire import length_delimited

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
    if len(groups) == 1 and whole is not None:
        ((trace_id, grouped),) = groups.items()
        return [TracePart(trace_id.hex(), whole, tuple(_shape(span) for _, _, span in grouped))]
    subset = _Subsets(request, _SPANS)
    return [
        TracePart(trace_id.hex(), subset.of(grouped), tuple(_shape(span) for _, _, span in grouped))
        for trace_id, grouped in groups.items()
    ]


def _shape(span: Span) -> SpanShape:
    return SpanShape(
        bytes(span.span_id),
        bytes(span.parent_span_id) if any(span.parent_span_id) else b"",
        int(span.start_time_unix_nano),
        int(span.end_time_unix_nano),
    )


# Where an export request keeps its resources, their scopes and the scopes' items. Both
# signals number them alike: request.resources = 1; resource = 1, scopes = 2, schema_url = 3;
# scope = 1, items = 2, schema_url = 3 (tests/test_otlp_split.py checks the descriptors).
_SPANS = ("resource_spans", "scope_spans", "spans")
_LOGS = ("resource_logs", "scope_logs", "log_records")
_RESOURCES = _RESOURCE = _SCOPE = 1
_SCOPES = _ITEMS = 2
_SCHEMA_URL = 3


class _Subsets:
    """Export requests holding some of one request's spans or log records, each under its
    resource and scope (`fields`: `_SPANS` or `_LOGS`), written on the wire from the parts'
    own bytes: the same message as copying them into a new request, without the copies."""

    def __init__(self, request: Any, fields: tuple[str, str, str]) -> None:
        self._request = request
        self._fields = fields
        self._heads: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def of(self, items: list[tuple[int, int, Any]]) -> bytes:
        """The request of `items` ((resource index, scope index, span or log record))."""
        scopes: dict[int, dict[int, list[bytes]]] = {}
        for r, s, item in items:
            scopes.setdefault(r, {}).setdefault(s, []).append(
                length_delimited(_ITEMS, item.SerializeToString())
            )
        resources = []
        for r, by_scope in scopes.items():
            body = [self._head(r, -1)[0]]
            for s, encoded in by_scope.items():
                head, tail = self._head(r, s)
                body.append(length_delimited(_SCOPES, b"".join([head, *encoded, tail])))
            body.append(self._head(r, -1)[1])
            resources.append(length_delimited(_RESOURCES, b"".join(body)))
        return b"".join(resources)

    def _head(self, r: int, s: int) -> tuple[bytes, bytes]:
        """What comes before and after the scopes of resource `r` (s = -1) or the items of its
        scope `s`: the resource or scope, then its schema URL."""
        found = self._heads.get((r, s))
        if found is None:
            resources_field, scopes_field, _ = self._fields
            source = getattr(self._request, resources_field)[r]
            if s >= 0:
                source = getattr(source, scopes_field)[s]
            inner = source.resource if s < 0 else source.scope
            head = length_delimited(_RESOURCE if s < 0 else _SCOPE, inner.SerializeToString())
            url = source.schema_url
            tail = length_delimited(_SCHEMA_URL, url.encode("utf-8")) if url else b""
            found = self._heads[(r, s)] = (head, tail)
        return found


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
    subset = _Subsets(request, _LOGS)
    return [
        LogsPart(trace_id, subset.of(records), len(records)) for trace_id, records in groups.items()
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
