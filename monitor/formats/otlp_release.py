"""One assembled trace onto the `Trace` model: decode its parts, join its log records, map it,
and stamp it with what assembly knows (when it started, whether it is whole, its revision).

Pure and thread-safe: the OTLP stage runs it in a worker thread for large traces, so that the
CPU one trace of many spans costs does not hold the event loop (`monitor.offload`).
"""

from __future__ import annotations

from typing import Any

from monitor.formats.assembly import Release
from monitor.formats.errors import OtlpMappingError
from monitor.formats.otlp import decode_otlp, spans_to_trace
from monitor.formats.otlp_logs import attach_log_events, decode_otlp_logs
from monitor.formats.otlp_split import merge_parts
from monitor.models import AssemblyRecord, Trace
from monitor.times import datetime_from_ns

__all__ = ["map_release", "release_bytes", "stamp"]


def release_bytes(release: Release[Any]) -> int:
    return sum(map(len, release.parts)) + sum(map(len, release.event_parts))


def map_release(release: Release[Any], score_plain_llm_calls: bool) -> tuple[Trace, int] | None:
    """The release as a stamped trace, with a digest of what it says (equal digests: a
    re-assembly that changes nothing); None when it holds no RAG turn. Raises OtlpDecodeError
    or OtlpMappingError (never anything else)."""
    spans = decode_otlp(merge_parts(list(release.parts)), "otlp_proto")
    if release.event_parts:
        events = decode_otlp_logs(merge_parts(list(release.event_parts)), "otlp_proto")
        spans = attach_log_events(spans, events)
    trace = spans_to_trace(spans, score_plain_llm_calls=score_plain_llm_calls)
    if trace is None:
        return None
    digest = hash((trace.model_dump_json(), release.complete, release.start_ns))
    return stamp(trace, release), digest


def stamp(trace: Trace, release: Release[Any]) -> Trace:
    """The trace with what assembly knows (`Trace.assembly`): when it started, whether it is
    whole, its revision."""
    start_ns = release.start_ns or None
    if start_ns is not None:
        try:
            datetime_from_ns(start_ns)
        except ValueError:
            raise OtlpMappingError(
                "invalid_trace", f"absurd start time: {start_ns} ns since 1970"
            ) from None
    record = AssemblyRecord(start_ns=start_ns, complete=release.complete, revision=release.revision)
    return trace.model_copy(update={"assembly": record})
