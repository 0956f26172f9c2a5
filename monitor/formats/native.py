"""Decoding native JSON traces (the contract: schema/trace-v1.json, docs/input.md)."""

from __future__ import annotations

from datetime import datetime

from pydantic import ValidationError

from monitor.formats.errors import DecodeError
from monitor.models import AssemblyRecord, Trace
from monitor.times import micros


def decode_native(value: bytes | None, *, assembled: bool = False) -> Trace:
    """Validate one native trace message; raise DecodeError naming what is wrong.

    `assembled`: written by the OTLP stage to its traces topic, with what assembly knew
    (`Trace.assembly`). Anywhere else a trace carrying that record breaks the contract. (The
    size of a message is the router's to check, before anything is decoded.)
    """
    if value is None:
        raise DecodeError("empty_message", "message has no value (tombstone)")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid_utf8", f"not UTF-8 at byte {exc.start}") from None
    try:
        trace = Trace.model_validate_json(text)
    except ValidationError as exc:
        raise _classify(exc) from None
    except RecursionError:
        raise DecodeError("invalid_json", "JSON nested too deeply") from None
    if not assembled and trace.assembly is not None:
        raise DecodeError("schema_violation", "assembly: not a field of the native contract")
    if assembled and trace.assembly is None:
        return _lifted(trace)
    return trace


# What the OTLP stage wrote into `metadata` before `Trace.assembly` (a rolling upgrade leaves
# such traces on the traces topic for a moment).
_LEGACY_KEYS = ("started_at", "incomplete_trace", "revision")


def _lifted(trace: Trace) -> Trace:
    """A trace assembled by an older version, its assembly facts moved from `metadata` into
    `Trace.assembly`."""
    metadata = dict(trace.metadata or {})
    if not any(key in metadata for key in _LEGACY_KEYS):
        return trace
    started, incomplete, revision = (metadata.pop(key, None) for key in _LEGACY_KEYS)
    start_ns = None
    if isinstance(started, str):
        try:
            moment = datetime.fromisoformat(started)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None and micros(moment) > 0:
            start_ns = micros(moment) * 1000
    record = AssemblyRecord(
        start_ns=start_ns,
        complete=incomplete is not True,
        revision=revision if isinstance(revision, int) and revision > 1 else 1,
    )
    return trace.model_copy(update={"assembly": record, "metadata": metadata or None})


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
