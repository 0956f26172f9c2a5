"""The one error of the decoders: what is wrong with an input, fit for a dead-letter header."""

from __future__ import annotations

MAX_DETAIL_CHARS = 1000


class DecodeError(ValueError):
    """A message (or one trace of it) that cannot become a trace.

    `reason` is a short, bounded label value (it becomes a metric label and a DLQ header):
    empty_message, too_large, invalid_utf8, invalid_json, schema_violation, ... and for OTLP
    invalid_protobuf or invalid_id. `detail` says what was wrong without echoing the message's
    content.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail[:MAX_DETAIL_CHARS]
        super().__init__(f"{reason}: {self.detail}")


class OtlpMappingError(DecodeError):
    """A decodable OTLP trace that looks like a RAG turn but cannot become a `Trace`: its
    `reason` is no_query, no_answer, no_timestamp or invalid_trace (dead-lettered as
    `otlp_unmappable`, where a `DecodeError` of the spans themselves is `otlp_undecodable`)."""
