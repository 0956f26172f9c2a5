"""What can be saved of an OTLP trace export that does not decode whole.

One bad span (a wrong JSON type, invalid UTF-8 in a protobuf string, a malformed id) or one bad
resource or scope makes the protobuf and JSON parsers refuse the whole export, which would cost
every trace it carries. Here the export is taken apart where it is still well formed -- the
JSON document's members, or the protobuf wire format's length-delimited fields -- and each
resource, scope and span is parsed on its own: the good traces come out as one export request,
and every trace with a bad span (or under a bad resource or scope) is rejected whole, with the
spans as they came, in the input's format, for its dead letter. A span whose own trace id cannot
be read is rejected alone.

Only an export whose frame is broken (not JSON, no resource list, not protobuf at all) is lost
whole: then nothing in it can be attributed to a trace.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from monitor.formats.errors import DecodeError as OtlpDecodeError
from monitor.formats.otlp_wire import (
    convert_id,
    json_document,
    length_delimited,
    length_delimited_fields,
    members,
    parse_document,
)

__all__ = ["Rejected", "Salvaged", "encode_rejected", "salvage", "span_problem"]

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
_SCOPES = ("scopeSpans", "scope_spans")
_RESOURCES = ("resourceSpans", "resource_spans")


@dataclass
class Rejected:
    """A trace rejected whole (`trace_id` None: spans whose trace cannot be told), why, and its
    spans as they came, each with its resource and scope (the dead letter's content)."""

    trace_id: str | None
    detail: str
    pieces: list[Any] = field(default_factory=list)


@dataclass
class Salvaged:
    """The spans of the export's good traces, each with the indexes of its resource and scope
    in `request` (resources and scopes copied as they were), and the rejected traces."""

    request: ExportTraceServiceRequest
    spans: list[tuple[int, int, Span]]
    rejected: list[Rejected]


def span_problem(span: Span) -> str | None:
    """What is wrong with a parsed span's ids; None when they are well formed."""
    trace_id, span_id, parent = bytes(span.trace_id), bytes(span.span_id), span.parent_span_id
    if len(trace_id) != TRACE_ID_BYTES or not any(trace_id):
        return f"trace_id must be {TRACE_ID_BYTES} non-zero bytes"
    if len(span_id) != SPAN_ID_BYTES or not any(span_id):
        return f"span_id must be {SPAN_ID_BYTES} non-zero bytes"
    if parent and len(parent) != SPAN_ID_BYTES:
        return f"parent_span_id must be {SPAN_ID_BYTES} bytes"
    return None


def salvage(data: bytes, fmt: str) -> Salvaged | None:
    """The good traces and the rejected ones; None when the export's frame itself is broken."""
    sorter = _Sorter()
    if fmt == "otlp_json":
        try:
            document = json_document(data, *_RESOURCES)
        except OtlpDecodeError:
            return None
        _JsonWalk(sorter).walk(document)
    else:
        try:
            fields = list(length_delimited_fields(data))
        except ValueError:
            return None
        _ProtoWalk(sorter).walk(fields)
    return sorter.result()


# ------------------------------------------------------------------------------ sorting


class _Sorter:
    """Collects candidate spans and problems, then keeps only the traces without a problem."""

    def __init__(self) -> None:
        self.request = ExportTraceServiceRequest()
        self._candidates: list[tuple[int, int, Span, str, Any]] = []
        self._rejected: dict[str | None, Rejected] = {}

    def scope(
        self,
        resource: Resource,
        resource_schema: str,
        scope: InstrumentationScope,
        scope_schema: str,
    ) -> tuple[int, int]:
        """A place for good spans under a copy of this resource and scope."""
        resource_spans = self.request.resource_spans.add()
        resource_spans.resource.CopyFrom(resource)
        resource_spans.schema_url = resource_schema
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(scope)
        scope_spans.schema_url = scope_schema
        return len(self.request.resource_spans) - 1, 0

    def place(
        self, resource: ResourceSpans | str, scope: ScopeSpans | str
    ) -> tuple[int, int] | str:
        """Where the good spans of this resource and scope go, or what is wrong with them."""
        if isinstance(resource, str):
            return f"its resource: {resource}"
        if isinstance(scope, str):
            return f"its scope: {scope}"
        return self.scope(resource.resource, resource.schema_url, scope.scope, scope.schema_url)

    def span(
        self,
        place: tuple[int, int] | str,
        span: Span | str,
        trace_id: str | None,
        where: str,
        piece: Any,
    ) -> None:
        """A span parsed on its own (or what is wrong with it) under its resource and scope."""
        if isinstance(place, str):
            self.bad(trace_id, f"{where}: {place}", piece)
        elif isinstance(span, str):
            self.bad(trace_id, f"{where}: {span}", piece)
        else:
            self.good(place, span, piece)

    def good(self, where: tuple[int, int], span: Span, piece: Any) -> None:
        """A span that parsed: kept unless its ids are malformed or its trace is rejected."""
        problem = span_problem(span)
        trace_id = bytes(span.trace_id).hex()
        if problem is not None:
            self.bad(None if problem.startswith("trace_id") else trace_id, problem, piece)
            return
        self._candidates.append((where[0], where[1], span, trace_id, piece))

    def bad(self, trace_id: str | None, detail: str, piece: Any) -> None:
        """A span that cannot be used: its whole trace is rejected."""
        rejected = self._rejected.setdefault(trace_id, Rejected(trace_id, detail))
        rejected.pieces.append(piece)

    def result(self) -> Salvaged:
        spans: list[tuple[int, int, Span]] = []
        for r, s, span, trace_id, piece in self._candidates:
            if trace_id in self._rejected:
                self._rejected[trace_id].pieces.append(piece)
            else:
                spans.append((r, s, span))
        return Salvaged(self.request, spans, list(self._rejected.values()))


# ------------------------------------------------------------------------------ OTLP/JSON


class _JsonWalk:
    """Resources, scopes and spans of an OTLP/JSON document, each parsed on its own. A
    piece is (resource members, scope members, span) as they came, for the dead letter."""

    def __init__(self, sorter: _Sorter) -> None:
        self._sorter = sorter

    def walk(self, document: dict[str, Any]) -> None:
        for index, resource_spans in enumerate(members(document, *_RESOURCES)):
            where = f"resource {index}"
            if not isinstance(resource_spans, dict):
                self._sorter.bad(None, f"{where} is not an object", (resource_spans, None, None))
                continue
            head = {k: v for k, v in resource_spans.items() if k not in _SCOPES}
            resource = _parse_json(ResourceSpans(), head)
            for s, scope_spans in enumerate(members(resource_spans, *_SCOPES)):
                self._scope(head, resource, scope_spans, f"{where}, scope {s}")

    def _scope(
        self,
        head: dict[str, Any],
        resource: ResourceSpans | str,
        scope_spans: Any,
        where: str,
    ) -> None:
        if not isinstance(scope_spans, dict):
            self._sorter.bad(None, f"{where} is not an object", (head, scope_spans, None))
            return
        scope_head = {k: v for k, v in scope_spans.items() if k != "spans"}
        place = self._sorter.place(resource, _parse_json(ScopeSpans(), scope_head))
        for n, raw in enumerate(members(scope_spans, "spans")):
            prepared = _span_for_parsing(raw)
            span = prepared if isinstance(prepared, str) else _parse_json(Span(), prepared)
            piece = (head, scope_head, raw)
            self._sorter.span(place, span, _json_trace_id(raw), f"{where}, span {n}", piece)


def _parse_json(message: Any, document: Any) -> Any:
    """The message filled from `document`, or what is wrong with it."""
    if not isinstance(document, dict):
        return "not an object"
    try:
        return parse_document(document, message)
    except OtlpDecodeError as exc:
        return exc.detail


def _span_for_parsing(raw: Any) -> dict[str, Any] | str:
    """A copy of a span object with its hex ids (and its links') rewritten as base64, or what
    is wrong with it."""
    if not isinstance(raw, dict):
        return "not an object"
    span = dict(raw)
    try:
        convert_id(span, ("traceId", "trace_id"), TRACE_ID_BYTES)
        convert_id(span, ("spanId", "span_id"), SPAN_ID_BYTES)
        convert_id(span, ("parentSpanId", "parent_span_id"), SPAN_ID_BYTES)
        if isinstance(span.get("links"), list):
            span["links"] = [
                dict(link) if isinstance(link, dict) else link for link in span["links"]
            ]
            for link in span["links"]:
                if isinstance(link, dict):
                    convert_id(link, ("traceId", "trace_id"), TRACE_ID_BYTES)
                    convert_id(link, ("spanId", "span_id"), SPAN_ID_BYTES)
    except OtlpDecodeError as exc:
        return exc.detail
    return span


def _json_trace_id(raw: Any) -> str | None:
    """The trace id of a span object as lowercase hex, when it can be read."""
    if not isinstance(raw, dict):
        return None
    value = raw.get("traceId", raw.get("trace_id"))
    if not isinstance(value, str):
        return None
    try:
        raw_id = (
            bytes.fromhex(value)
            if len(value) == 2 * TRACE_ID_BYTES
            else base64.b64decode(value, validate=True)
        )
    except (binascii.Error, ValueError):
        return None
    return raw_id.hex() if len(raw_id) == TRACE_ID_BYTES and any(raw_id) else None


def encode_rejected(rejected: Rejected, fmt: str) -> bytes:
    """The rejected trace's spans as an export in the input's format, as they came."""
    return encode_json(rejected.pieces) if fmt == "otlp_json" else encode_proto(rejected.pieces)


def encode_json(pieces: list[Any]) -> bytes:
    """OTLP/JSON of rejected pieces, as they came: each under its resource and scope."""
    resources = []
    for head, scope_head, span in pieces:
        if not isinstance(head, dict):  # a resource that is not even an object
            resources.append(head)
            continue
        scope = dict(scope_head) if isinstance(scope_head, dict) else scope_head
        if isinstance(scope, dict) and span is not None:
            scope["spans"] = [span]
        resources.append({**head, "scopeSpans": [scope]})
    return json.dumps({"resourceSpans": resources}, ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------------------ protobuf


def encode_proto(pieces: list[Any]) -> bytes:
    """An export request of rejected pieces, their bytes as they came (resource, scope, span)."""
    out = bytearray()
    for resource_raw, scope_raw, span_raw in pieces:
        scope = scope_raw + (length_delimited(2, span_raw) if span_raw is not None else b"")
        out += length_delimited(1, resource_raw + length_delimited(2, scope))
    return bytes(out)


def _parse_proto(message_type: type[Message], payload: bytes) -> Any:
    try:
        return message_type.FromString(payload)
    except Exception as exc:  # google.protobuf.message.DecodeError, or upb's own failures
        return str(exc) or type(exc).__name__


def _split(payload: bytes, numbers: tuple[int, ...]) -> tuple[dict[int, list[bytes]], bytes]:
    """The fields `numbers` of a message, and the bytes of the others (kept as they are)."""
    found: dict[int, list[bytes]] = {n: [] for n in numbers}
    rest = bytearray()
    for number, value in length_delimited_fields(payload):
        if number in found:
            found[number].append(value)
        else:
            rest += length_delimited(number, value)
    return found, bytes(rest)


class _ProtoWalk:
    """Resources, scopes and spans of a protobuf export, each parsed on its own where the
    whole does not parse. A piece is (resource bytes, scope bytes, span bytes), each already
    framed as the fields of its parent, for the dead letter."""

    def __init__(self, sorter: _Sorter) -> None:
        self._sorter = sorter

    def walk(self, fields: list[tuple[int, bytes]]) -> None:
        for index, (number, payload) in enumerate(fields):
            if number != 1:
                continue
            where = f"resource {index}"
            whole = _parse_proto(ResourceSpans, payload)
            if not isinstance(whole, str):
                self._resource(whole, payload)
                continue
            try:
                parts, rest = _split(payload, (2,))
            except ValueError as exc:
                self._sorter.bad(None, f"{where}: {exc}", (payload, b"", None))
                continue
            head = _parse_proto(ResourceSpans, rest)
            for s, scope_payload in enumerate(parts[2]):
                self._scope(head, rest, scope_payload, f"{where}, scope {s}")

    def _resource(self, whole: ResourceSpans, payload: bytes) -> None:
        """A resource that parses: its spans are good unless their ids are malformed."""
        _, rest = _split(payload, (2,))
        for scope_spans in whole.scope_spans:
            place = self._sorter.scope(
                whole.resource, whole.schema_url, scope_spans.scope, scope_spans.schema_url
            )
            scope_head = ScopeSpans(scope=scope_spans.scope, schema_url=scope_spans.schema_url)
            scope_raw = scope_head.SerializeToString()
            for span in scope_spans.spans:
                piece = (rest, scope_raw, span.SerializeToString())
                self._sorter.good(place, span, piece)

    def _scope(self, head: Any, resource_raw: bytes, payload: bytes, where: str) -> None:
        whole = _parse_proto(ScopeSpans, payload)
        try:
            spans_raw = [value for number, value in length_delimited_fields(payload) if number == 2]
            _, scope_raw = _split(payload, (2,))
        except ValueError as exc:
            self._sorter.bad(None, f"{where}: {exc}", (resource_raw, payload, None))
            return
        scope = whole if not isinstance(whole, str) else _parse_proto(ScopeSpans, scope_raw)
        place = self._sorter.place(head, scope)
        for n, span_raw in enumerate(spans_raw):
            piece = (resource_raw, scope_raw, span_raw)
            span = _parse_proto(Span, span_raw)
            self._sorter.span(place, span, _proto_trace_id(span_raw), f"{where}, span {n}", piece)


def _proto_trace_id(span_raw: bytes) -> str | None:
    """The trace id of a span on the wire (field 1, bytes: never UTF-8 checked), as hex."""
    try:
        ids = [value for number, value in length_delimited_fields(span_raw) if number == 1]
    except ValueError:
        return None
    if len(ids) == 1 and len(ids[0]) == TRACE_ID_BYTES and any(ids[0]):
        return ids[0].hex()
    return None
