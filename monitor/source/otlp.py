"""Decoding what the OpenTelemetry Collector's Kafka exporter writes (DESIGN.md section 2).

The exporter writes one `ExportTraceServiceRequest` per message, either as protobuf bytes
(`otlp_proto`) or in the OTLP/JSON encoding (`otlp_json`). OTLP/JSON is the protobuf JSON mapping
with one deviation: trace and span ids are lowercase hex strings, not base64. Field names may be
lowerCamelCase or the proto's snake_case, and enum values names or integers.

`decode_otlp` turns a message into flat, immutable `SpanRecord`s; it never raises anything but
`OtlpDecodeError` whatever the input bytes. `TraceAssembler` groups the spans of one trace that
arrive in several messages and maps each whole trace onto the `Trace` model with
`spans_to_trace` (in `monitor.source.otlp_mapping`, re-exported here).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from monitor.models import Trace
from monitor.source.otlp_mapping import MAX_DETAIL_CHARS, OtlpMappingError, spans_to_trace

__all__ = [
    "Assembled",
    "OtlpDecodeError",
    "OtlpFormat",
    "OtlpMappingError",
    "SpanEvent",
    "SpanRecord",
    "TraceAssembler",
    "decode_otlp",
    "detect_format",
    "spans_to_trace",
]

OtlpFormat = Literal["otlp_json", "otlp_proto"]
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
_OTLP_JSON_START = re.compile(rb'\s*\{\s*"(?:resourceSpans|resource_spans)"')


class OtlpDecodeError(ValueError):
    """A message that is not a decodable OTLP trace export.

    `reason` is a short, bounded label (fit for a metric label and a dead-letter header):
    empty_message, invalid_utf8, invalid_json, invalid_protobuf, invalid_id or schema_violation.
    `detail` says what was wrong without echoing the message's content.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail[:MAX_DETAIL_CHARS]
        super().__init__(f"{reason}: {self.detail}")


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event: its name, time and flattened attributes."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One decoded span, independent of the wire format.

    Ids are lowercase hex (32 digits for traces, 16 for spans); `parent_span_id` is None for a
    root span. Attribute values are str, bool, int, float, bytes, list (OTLP arrays) or dict
    (OTLP key-value lists), nested as the producer sent them; None for an empty value.
    `kind` and `status_code` are the OTLP enum numbers (kind 2 = SERVER, status 2 = ERROR).
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource_attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    kind: int = 0
    status_code: int = 0
    scope_name: str = ""

    @property
    def duration_ns(self) -> int:
        return self.end_time_unix_nano - self.start_time_unix_nano


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
    try:
        if not data:
            raise OtlpDecodeError("empty_message", "message has no value")
        if fmt == "otlp_proto":
            request = _parse_proto(data)
        elif fmt == "otlp_json":
            request = _parse_json(data)
        else:
            raise OtlpDecodeError("schema_violation", f"unknown OTLP format {fmt!r}")
        if not request.resource_spans:
            raise OtlpDecodeError(
                "schema_violation", "no resource spans: not an ExportTraceServiceRequest"
            )
        return _records(request)
    except OtlpDecodeError:
        raise
    except RecursionError:
        raise OtlpDecodeError("schema_violation", "message nested too deeply") from None
    except Exception as exc:  # the decoder's contract: nothing else escapes, whatever the bytes
        raise OtlpDecodeError(
            "schema_violation", f"undecodable message ({type(exc).__name__}: {exc})"
        ) from None


def _parse_proto(data: bytes) -> ExportTraceServiceRequest:
    try:
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError, or upb's own failures
        raise OtlpDecodeError("invalid_protobuf", f"not an OTLP protobuf message: {exc}") from None
    return request


def _parse_json(data: bytes) -> ExportTraceServiceRequest:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OtlpDecodeError("invalid_utf8", f"not UTF-8 at byte {exc.start}") from None
    try:
        document = json.loads(text)
    except RecursionError:
        raise OtlpDecodeError("invalid_json", "JSON nested too deeply") from None
    except ValueError as exc:
        raise OtlpDecodeError("invalid_json", str(exc)) from None
    if not isinstance(document, dict):
        raise OtlpDecodeError("schema_violation", "top level must be a JSON object")
    if "resourceSpans" not in document and "resource_spans" not in document:
        raise OtlpDecodeError("schema_violation", "no resourceSpans member")
    _hex_ids_to_base64(document)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except RecursionError:
        raise OtlpDecodeError("invalid_json", "JSON nested too deeply") from None
    except Exception as exc:  # json_format.ParseError and the odd TypeError/ValueError
        raise OtlpDecodeError("schema_violation", f"not OTLP/JSON: {exc}") from None
    return request


def _members(obj: dict[str, Any], *names: str) -> list[Any]:
    """The list under the first of `names` present in obj; [] when absent or not a list."""
    for name in names:
        if name in obj:
            value = obj[name]
            return value if isinstance(value, list) else []
    return []


def _hex_ids_to_base64(document: dict[str, Any]) -> None:
    """Rewrite OTLP/JSON's hex ids in place into the base64 the protobuf JSON mapping expects.

    Only walks well-shaped parts; anything of the wrong shape is left for ParseDict to reject.
    """
    for resource_spans in _members(document, "resourceSpans", "resource_spans"):
        if not isinstance(resource_spans, dict):
            continue
        for scope_spans in _members(resource_spans, "scopeSpans", "scope_spans"):
            if not isinstance(scope_spans, dict):
                continue
            for span in _members(scope_spans, "spans"):
                if not isinstance(span, dict):
                    continue
                _convert_id(span, ("traceId", "trace_id"), TRACE_ID_BYTES)
                _convert_id(span, ("spanId", "span_id"), SPAN_ID_BYTES)
                _convert_id(span, ("parentSpanId", "parent_span_id"), SPAN_ID_BYTES)
                for link in _members(span, "links"):
                    if isinstance(link, dict):
                        _convert_id(link, ("traceId", "trace_id"), TRACE_ID_BYTES)
                        _convert_id(link, ("spanId", "span_id"), SPAN_ID_BYTES)


def _convert_id(obj: dict[str, Any], names: tuple[str, ...], size: int) -> None:
    for name in names:
        value = obj.get(name)
        if not isinstance(value, str) or value == "":
            continue
        if len(value) == 2 * size:
            try:
                raw = bytes.fromhex(value)
            except ValueError:
                raise OtlpDecodeError("invalid_id", f"{name} is not hex") from None
        else:  # tolerate producers that follow the plain protobuf mapping (base64)
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise OtlpDecodeError("invalid_id", f"{name} is neither hex nor base64") from None
            if len(raw) != size:
                raise OtlpDecodeError("invalid_id", f"{name} must be {size} bytes")
        obj[name] = base64.b64encode(raw).decode("ascii")


def _records(request: ExportTraceServiceRequest) -> list[SpanRecord]:
    records: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
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
    return SpanRecord(
        trace_id=trace_id.hex(),
        span_id=span_id.hex(),
        parent_span_id=parent.hex() if any(parent) else None,
        name=span.name,
        start_time_unix_nano=int(span.start_time_unix_nano),
        end_time_unix_nano=int(span.end_time_unix_nano),
        attributes=_attributes(span.attributes),
        resource_attributes=dict(resource),
        events=tuple(
            SpanEvent(
                name=event.name,
                time_unix_nano=int(event.time_unix_nano),
                attributes=_attributes(event.attributes),
            )
            for event in span.events
        ),
        kind=int(span.kind),
        status_code=int(span.status.code),
        scope_name=scope_name,
    )


def _attributes(pairs: Any) -> dict[str, Any]:
    """Flatten repeated KeyValue into a dict; a repeated key keeps its last value."""
    result: dict[str, Any] = {}
    for pair in pairs:
        kv: KeyValue = pair
        result[kv.key] = _any_value(kv.value)
    return result


def _any_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return int(value.int_value)
    if which == "double_value":
        return float(value.double_value)
    if which == "array_value":
        return [_any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return bytes(value.bytes_value)
    return None  # unset, or a profiles-only dictionary index


# ---------------------------------------------------------------------------- assembling

T = TypeVar("T", bound=Hashable)
Mapper = Callable[[Sequence[SpanRecord]], Trace | None]


@dataclass(frozen=True, slots=True)
class Assembled(Generic[T]):
    """One emitted trace (or one span-less message) and the messages it came from.

    `result` is the mapped Trace, None (no RAG turn, or a message that carried no spans, then
    `trace_id` is None) or the OtlpMappingError saying why a RAG turn could not be mapped.
    `tokens` are every source token that contributed spans to this trace. A message's spans can
    belong to several traces: `released_tokens` are the tokens that no pending trace refers to
    any longer, i.e. whose message is fully handed out once this and every earlier Assembled
    holding it are processed. `late` is True when this trace id was already emitted before
    (spans that arrived after its window closed); its result then covers only the late spans.
    """

    trace_id: str | None
    result: Trace | OtlpMappingError | None
    tokens: list[T]
    released_tokens: list[T]
    span_count: int = 0
    late: bool = False


@dataclass
class _Pending(Generic[T]):
    first_seen: float
    spans: dict[str, SpanRecord] = field(default_factory=dict)
    tokens: list[T] = field(default_factory=list)


class TraceAssembler(Generic[T]):
    """Collects spans that arrive in several messages into whole traces.

    A trace is emitted `window_seconds` after its FIRST span arrived (not its last: a steady
    trickle cannot keep a trace open forever), or earlier when more than `max_pending_traces`
    traces are pending (oldest first, so memory stays bounded), or by `flush()`. `now` is any
    monotonic clock in seconds (time.monotonic()). Tokens are opaque and hashable, for example a
    Kafka (partition, offset). Mapping runs when a trace is emitted. Not thread-safe.
    """

    def __init__(
        self,
        window_seconds: float = 5.0,
        max_pending_traces: int = 10_000,
        mapper: Mapper = spans_to_trace,
        remember_emitted: int = 100_000,
    ) -> None:
        if window_seconds < 0 or max_pending_traces < 1:
            raise ValueError("window_seconds must be >= 0 and max_pending_traces >= 1")
        self.window_seconds = window_seconds
        self.max_pending_traces = max_pending_traces
        self._mapper = mapper
        self._pending: OrderedDict[str, _Pending[T]] = OrderedDict()
        self._ready: list[Assembled[T]] = []
        self._token_refs: dict[T, int] = {}
        self._emitted: OrderedDict[str, None] = OrderedDict()
        self._remember = remember_emitted

    def __len__(self) -> int:
        """Traces pending (not yet emitted)."""
        return len(self._pending)

    def add(self, spans: Sequence[SpanRecord], token: T, now: float) -> None:
        """Take a message's spans. A message with no spans is returned by the next pop_ready
        as Assembled(trace_id=None, result=None, tokens=[token]) so its caller can finish it."""
        if not spans:
            self._ready.append(Assembled(None, None, [token], [token]))
            return
        for span in spans:
            pending = self._pending.get(span.trace_id)
            if pending is None:
                pending = self._pending[span.trace_id] = _Pending(first_seen=now)
            pending.spans[span.span_id] = span
            if token not in pending.tokens:
                pending.tokens.append(token)
                self._token_refs[token] = self._token_refs.get(token, 0) + 1
        while len(self._pending) > self.max_pending_traces:
            trace_id, oldest = self._pending.popitem(last=False)
            self._ready.append(self._emit(trace_id, oldest))

    def pop_ready(self, now: float) -> list[Assembled[T]]:
        """Emit span-less messages, evicted traces, and traces whose window has passed,
        in the order they arrived."""
        ready, self._ready = self._ready, []
        while self._pending:
            trace_id, pending = next(iter(self._pending.items()))
            if now - pending.first_seen < self.window_seconds:
                break
            del self._pending[trace_id]
            ready.append(self._emit(trace_id, pending))
        return ready

    def flush(self) -> list[Assembled[T]]:
        """Emit everything now (shutdown, end of input, partitions revoked)."""
        ready, self._ready = self._ready, []
        while self._pending:
            trace_id, pending = self._pending.popitem(last=False)
            ready.append(self._emit(trace_id, pending))
        return ready

    def _emit(self, trace_id: str, pending: _Pending[T]) -> Assembled[T]:
        result: Trace | OtlpMappingError | None
        try:
            result = self._mapper(list(pending.spans.values()))
        except OtlpMappingError as exc:
            result = exc
        released: list[T] = []
        for token in pending.tokens:
            left = self._token_refs.get(token, 1) - 1
            if left <= 0:
                self._token_refs.pop(token, None)
                released.append(token)
            else:
                self._token_refs[token] = left
        late = trace_id in self._emitted
        self._emitted[trace_id] = None
        self._emitted.move_to_end(trace_id)
        while len(self._emitted) > self._remember:
            self._emitted.popitem(last=False)
        return Assembled(
            trace_id,
            result,
            list(pending.tokens),
            released,
            span_count=len(pending.spans),
            late=late,
        )
