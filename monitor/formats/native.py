"""Decoding native JSON traces (DESIGN.md section 2) with errors fit for a dead-letter header."""

from __future__ import annotations

from pydantic import ValidationError

from monitor.models import Trace

MAX_DETAIL_CHARS = 1000


class DecodeError(ValueError):
    """A message that cannot become a trace: native JSON that fails the contract, or bytes
    that are not a decodable OTLP export (`monitor.formats.otlp` raises it as `OtlpDecodeError`).

    `reason` is a short, bounded label value (it becomes a metric label and a DLQ header):
    empty_message, too_large, invalid_utf8, invalid_json, schema_violation, ... and for OTLP
    invalid_protobuf or invalid_id. `detail` says what was wrong without echoing the message's
    content.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail[:MAX_DETAIL_CHARS]
        super().__init__(f"{reason}: {self.detail}")


def decode_native(value: bytes | None, max_bytes: int) -> Trace:
    """Validate one native trace message; raise DecodeError naming what is wrong."""
    if value is None:
        raise DecodeError("empty_message", "message has no value (tombstone)")
    if len(value) > max_bytes:
        raise DecodeError("too_large", f"message is {len(value)} bytes, limit {max_bytes}")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid_utf8", f"not UTF-8 at byte {exc.start}") from None
    try:
        return Trace.model_validate_json(text)
    except ValidationError as exc:
        raise _classify(exc) from None
    except RecursionError:
        raise DecodeError("invalid_json", "JSON nested too deeply") from None


def _classify(exc: ValidationError) -> DecodeError:
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    if any(err["type"] == "json_invalid" for err in errors):
        return DecodeError("invalid_json", "; ".join(err["msg"] for err in errors))
    if any(err["type"] == "model_type" and not err["loc"] for err in errors):
        return DecodeError("schema_violation", "top level must be a JSON object")
    if any(tuple(err["loc"]) == ("schema_version",) for err in errors):
        return DecodeError("unknown_schema_version", "schema_version must be 1")
    described = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in errors
    )
    return DecodeError("schema_violation", described)
