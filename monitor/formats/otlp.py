"""Decoding what the OpenTelemetry Collector's Kafka exporter writes (docs/input.md; where this
sits in the pipeline: docs/architecture.md).

The exporter writes one `ExportTraceServiceRequest` per message, either as protobuf bytes
(`otlp_proto`) or in the OTLP/JSON encoding (`otlp_json`). OTLP/JSON is the protobuf JSON mapping
with one deviation: trace and span ids are lowercase hex strings, not base64. Field names may be
lowerCamelCase or the proto's snake_case, and enum values names or integers.

`decode_otlp` turns a message into flat, immutable `SpanRecord`s; it never raises anything but
`OtlpDecodeError` whatever the input bytes. `spans_to_trace` (in `monitor.formats.otlp_mapping`,
re-exported here) maps the spans of one whole trace onto the `Trace` model; splitting messages
per trace is `monitor.formats.otlp_split`, collecting a trace's parts `monitor.formats.assembly`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from monitor.formats.errors import DecodeError, OtlpMappingError
from monitor.formats.otlp_mapping import spans_to_trace
from monitor.formats.otlp_records import SpanEvent, SpanRecord
from monitor.formats.otlp_wire import (
    convert_id,
    flatten_attributes,
    guarded,
    json_document,
    members,
    parse_document,
    parse_export,
)

__all__ = [
    "OtlpDecodeError",
    "OtlpFormat",
    "OtlpMappingError",
    "SpanEvent",
    "SpanRecord",
    "decode_otlp",
    "detect_format",
    "parse_request",
    "spans_to_trace",
]

OtlpFormat = Literal["otlp_json", "otlp_proto"]
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
_OTLP_JSON_START = re.compile(rb'\s*\{\s*"(?:resourceSpans|resource_spans)"')


OtlpDecodeError = DecodeError
"""A message that is not a decodable OTLP trace export: the decoders' one error, by the name
the OTLP modules use (reasons empty_message, invalid_utf8, invalid_json, invalid_protobuf,
invalid_id or schema_violation)."""


def detect_format(data: bytes) -> Literal["native", "otlp_json", "otlp_proto"]:
    """Guess a message's format for the `auto` input mode from its first bytes; never raises.

    OTLP/JSON, as the Collector writes it, is an object whose first member is `resourceSpans`
    (or `resource_spans`). Anything else starting like JSON (`{` or `[`), including invalid
    UTF-8 or broken JSON, is native, so the native decoder names the problem. The rest, which
    includes every OTLP protobuf export (it starts with field tag 0x0a), is OTLP protobuf.
    Only a prefix is inspected, so native traces are not parsed twice.
    """
    if _OTLP_JSON_START.match(data):
        return "otlp_json"
    stripped = data[:64].lstrip(b" \t\r\n")
    if not stripped or stripped[:1] in (b"{", b"["):
        return "native"
    return "otlp_proto"


def decode_otlp(data: bytes, fmt: OtlpFormat) -> list[SpanRecord]:
    """Decode one Kafka message into its spans, in the order they were sent.

    Raises OtlpDecodeError (and nothing else) when the bytes are not an ExportTraceServiceRequest
    in the given format, when the message is empty or carries no resource spans at all, or when
    a span's ids are malformed. A request whose resources carry no spans decodes to [].
    """
    return guarded(lambda: _records(parse_request(data, fmt)))


def parse_request(data: bytes, fmt: OtlpFormat) -> ExportTraceServiceRequest:
    """The export request a message holds; raises OtlpDecodeError like `decode_otlp`.

    Span ids are not checked here (`decode_otlp` and the per-trace split check them).
    """

    return parse_export(
        data, fmt, ExportTraceServiceRequest, _parse_json, resources_field="resource_spans"
    )


def _parse_json(data: bytes) -> ExportTraceServiceRequest:
    document = json_document(data, "resourceSpans", "resource_spans")
    _hex_ids_to_base64(document)
    return parse_document(document, ExportTraceServiceRequest())


def _hex_ids_to_base64(document: dict[str, Any]) -> None:
    """Rewrite OTLP/JSON's hex ids in place into the base64 the protobuf JSON mapping expects.

    Only walks well-shaped parts; anything of the wrong shape is left for ParseDict to reject.
    """
    for resource_spans in members(document, "resourceSpans", "resource_spans"):
        if not isinstance(resource_spans, dict):
            continue
        for scope_spans in members(resource_spans, "scopeSpans", "scope_spans"):
            if not isinstance(scope_spans, dict):
                continue
            for span in members(scope_spans, "spans"):
                if not isinstance(span, dict):
                    continue
                convert_id(span, ("traceId", "trace_id"), TRACE_ID_BYTES)
                convert_id(span, ("spanId", "span_id"), SPAN_ID_BYTES)
                convert_id(span, ("parentSpanId", "parent_span_id"), SPAN_ID_BYTES)
                for link in members(span, "links"):
                    if isinstance(link, dict):
                        convert_id(link, ("traceId", "trace_id"), TRACE_ID_BYTES)
                        convert_id(link, ("spanId", "span_id"), SPAN_ID_BYTES)


def _records(request: ExportTraceServiceRequest) -> list[SpanRecord]:
    records: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = flatten_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope_name = scope_spans.scope.name
            for span in scope_spans.spans:
                records.append(_record(span, resource, scope_name))
    return records


def _record(span: Span, resource: dict[str, Any], scope_name: str) -> SpanRecord:
    trace_id = bytes(span.trace_id)
    span_id = bytes(span.span_id)
    parent = bytes(span.parent_span_id)
    if len(trace_id) != TRACE_ID_BYTES or not any(trace_id):
        raise OtlpDecodeError("invalid_id", f"trace_id must be {TRACE_ID_BYTES} non-zero bytes")
    if len(span_id) != SPAN_ID_BYTES or not any(span_id):
        raise OtlpDecodeError("invalid_id", f"span_id must be {SPAN_ID_BYTES} non-zero bytes")
    if parent and len(parent) != SPAN_ID_BYTES:
        raise OtlpDecodeError("invalid_id", f"span parent_span_id must be {SPAN_ID_BYTES} bytes")
    events = span.events
    return SpanRecord(
        trace_id.hex(),
        span_id.hex(),
        parent.hex() if any(parent) else None,
        span.name,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        flatten_attributes(span.attributes),
        resource,  # one dict for the resource's spans: read only
        tuple(
            SpanEvent(event.name, event.time_unix_nano, flatten_attributes(event.attributes))
            for event in events
        )
        if events
        else (),
        span.kind,
        span.status.code,
        scope_name,
    )
