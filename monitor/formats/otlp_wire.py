"""What decoding OTLP traces and OTLP logs share: the wire, not the signal.

Both arrive as an export request in protobuf or OTLP/JSON; both must raise `OtlpDecodeError`
and nothing else, whatever the bytes. OTLP/JSON writes ids as hex where the protobuf JSON
mapping expects base64, so ids are rewritten before parsing. Attributes flatten the same way.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import Message  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from monitor.formats.errors import DecodeError as OtlpDecodeError

R = TypeVar("R")
M = TypeVar("M", bound=Message)


def guarded(work: Callable[[], R]) -> R:
    """Run a decoding step so that nothing but OtlpDecodeError escapes, whatever the bytes."""
    try:
        return work()
    except OtlpDecodeError:
        raise
    except RecursionError:
        raise OtlpDecodeError("schema_violation", "message nested too deeply") from None
    except Exception as exc:
        raise OtlpDecodeError(
            "schema_violation", f"undecodable message ({type(exc).__name__}: {exc})"
        ) from None


def parse_export(
    data: bytes,
    fmt: str,
    message_type: type[M],
    parse_json: Callable[[bytes], M],
    resources_field: str,
) -> M:
    """The export request (`message_type`) a message holds in protobuf or OTLP/JSON, with at
    least one resource in `resources_field`; raises OtlpDecodeError and nothing else."""

    def parse() -> M:
        if not data:
            raise OtlpDecodeError("empty_message", "message has no value")
        if fmt == "otlp_proto":
            request = parse_proto(message_type, data)
        elif fmt == "otlp_json":
            request = parse_json(data)
        else:
            raise OtlpDecodeError("schema_violation", f"unknown OTLP format {fmt!r}")
        if not getattr(request, resources_field):
            what = resources_field.replace("_", " ")
            raise OtlpDecodeError("schema_violation", f"no {what}: not an {message_type.__name__}")
        return request

    return guarded(parse)


def parse_proto(message_type: type[M], data: bytes) -> M:
    try:
        message: M = message_type.FromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError, or upb's own failures
        raise OtlpDecodeError("invalid_protobuf", f"not an OTLP protobuf message: {exc}") from None
    return message


def json_document(data: bytes, top_member: str, snake_member: str) -> dict[str, Any]:
    """The OTLP/JSON document a message holds, checked to carry its top-level member."""
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
    if top_member not in document and snake_member not in document:
        raise OtlpDecodeError("schema_violation", f"no {top_member} member")
    return document


def parse_document(document: dict[str, Any], message: M) -> M:
    """Fill `message` from an OTLP/JSON document whose ids are already base64."""
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except RecursionError:
        raise OtlpDecodeError("invalid_json", "JSON nested too deeply") from None
    except Exception as exc:  # json_format.ParseError and the odd TypeError/ValueError
        raise OtlpDecodeError("schema_violation", f"not OTLP/JSON: {exc}") from None
    return message


def members(obj: dict[str, Any], *names: str) -> list[Any]:
    """The list under the first of `names` present in obj; [] when absent or not a list."""
    for name in names:
        if name in obj:
            value = obj[name]
            return value if isinstance(value, list) else []
    return []


def convert_id(obj: dict[str, Any], names: tuple[str, ...], size: int) -> None:
    """Rewrite an OTLP/JSON hex id in place as base64 (base64 input is tolerated)."""
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


def flatten_attributes(pairs: Any) -> dict[str, Any]:
    """Flatten repeated KeyValue into a dict; a repeated key keeps its last value."""
    result: dict[str, Any] = {}
    for pair in pairs:
        kv: KeyValue = pair
        value = kv.value
        which = value.WhichOneof("value")
        # most attributes are strings: read them here, without a call for each
        result[kv.key] = value.string_value if which == "string_value" else any_value(value, which)
    return result


def any_value(value: AnyValue, which: str | None = "") -> Any:
    """An AnyValue as Python (`which`: its `WhichOneof("value")`, when already read)."""
    if which == "":
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
        return [any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return flatten_attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return bytes(value.bytes_value)
    return None  # unset, or a profiles-only dictionary index


# ------------------------------------------------------------------------------ protobuf wire
# Enough of the wire format to take a message apart where a parser refuses it whole
# (`monitor.formats.otlp_salvage`).

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def length_delimited_fields(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, payload) of the length-delimited fields of a protobuf message; other
    fields are skipped. Raises ValueError when `data` is not protobuf wire format."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == WIRE_VARINT:
            _, pos = read_varint(data, pos)
        elif wire == WIRE_I64:
            pos += 8
        elif wire == WIRE_I32:
            pos += 4
        elif wire == WIRE_LEN:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError("length past the end")
            yield number, data[pos : pos + size]
            pos += size
        else:
            raise ValueError(f"wire type {wire}")
    if pos != len(data):
        raise ValueError("truncated field")


def length_delimited(number: int, payload: bytes) -> bytes:
    """A length-delimited field on the wire."""
    return encode_varint(number << 3 | WIRE_LEN) + encode_varint(len(payload)) + payload


def encode_varint(value: int) -> bytes:
    """A non-negative integer as a protobuf varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
