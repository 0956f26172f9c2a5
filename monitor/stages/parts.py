"""Where a span part came from: the headers the re-key stage writes on the spans topic and the
assemble stage reads back, so that a dead letter names the message the spans first came in
(its topic, partition, offset and key) and is encoded in that message's format. A part's header
also carries the shapes of its spans (ids, parent ids, times), so that the assemble stage
knows whether a trace is whole without parsing the part: it is parsed once, when the trace is
mapped."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.formats.assembly import SpanShape
from monitor.formats.otlp import OtlpFormat
from monitor.messages import RawMessage
from monitor.sinks.deadletter import HEADER_PREFIX

FORMAT_HEADER = HEADER_PREFIX + "input.format"
ORIGIN_TOPIC = HEADER_PREFIX + "original.topic"
ORIGIN_PARTITION = HEADER_PREFIX + "original.partition"
ORIGIN_OFFSET = HEADER_PREFIX + "original.offset"
ORIGIN_KEY = HEADER_PREFIX + "original.key"
REVISION_HEADER = HEADER_PREFIX + "trace.revision"
PART_KIND_HEADER = HEADER_PREFIX + "part.kind"
LOGS_KIND = b"logs"  # a spans-topic part holding log records, not spans
SHAPES_HEADER = HEADER_PREFIX + "part.shapes"
_SHAPE = struct.Struct("<8s8sQQ")  # span id, parent span id (zeros: a root), start, end
MAX_SHAPES_IN_HEADER = 512  # 16 KiB; a part of more spans is parsed by the assemble stage


@dataclass(frozen=True, slots=True)
class PartToken:
    """One part's bookkeeping: the message to finish, where its spans came from, their format."""

    message: RawMessage
    origin: RawMessage
    fmt: OtlpFormat

    @classmethod
    def of_input(cls, msg: RawMessage, fmt: OtlpFormat) -> PartToken:
        """A part split off an input message in process: the message is its own origin."""
        return cls(msg, msg, fmt)


def part_headers(msg: RawMessage, fmt: OtlpFormat, logs: bool = False) -> list[tuple[str, bytes]]:
    """Headers of a part on the spans topic: the input's own, then where it came from (and,
    for log records, what it holds)."""
    kept = [(k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)]
    ours = [
        (ORIGIN_TOPIC, msg.topic.encode()),
        (ORIGIN_PARTITION, str(msg.partition).encode()),
        (ORIGIN_OFFSET, str(msg.offset).encode()),
        (FORMAT_HEADER, fmt.encode()),
    ]
    if msg.key is not None:
        ours.append((ORIGIN_KEY, msg.key))
    if logs:
        ours.append((PART_KIND_HEADER, LOGS_KIND))
    return kept + ours


def holds_logs(msg: RawMessage) -> bool:
    """A spans-topic message carrying log records."""
    return any(k == PART_KIND_HEADER and v == LOGS_KIND for k, v in msg.headers)


def part_token(msg: RawMessage) -> PartToken:
    """The token of a spans-topic message, its origin restored from the headers."""
    headers = dict(msg.headers)
    fmt_text = headers.get(FORMAT_HEADER, b"otlp_proto").decode("ascii", "replace")
    fmt: OtlpFormat = "otlp_json" if fmt_text == "otlp_json" else "otlp_proto"
    try:
        origin = RawMessage(
            topic=headers[ORIGIN_TOPIC].decode("utf-8", "replace"),
            partition=int(headers[ORIGIN_PARTITION]),
            offset=int(headers[ORIGIN_OFFSET]),
            key=headers.get(ORIGIN_KEY),
            value=None,
            headers=tuple((k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)),
        )
    except (KeyError, ValueError):  # written by someone else: the spans message is the origin
        origin = RawMessage(msg.topic, msg.partition, msg.offset, msg.key, None, msg.headers)
    return PartToken(msg, origin, fmt)


def without_our_headers(msg: RawMessage) -> list[tuple[str, bytes]]:
    """The message's own headers, none of ours (which a hop writes afresh)."""
    return [(k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)]


def shapes_header(shapes: Sequence[SpanShape]) -> list[tuple[str, bytes]]:
    """The header carrying a part's span shapes; none when they do not fit its layout (ids of
    another length, times past 64 bits) or are too many."""
    if len(shapes) > MAX_SHAPES_IN_HEADER:
        return []
    try:
        packed = b"".join(
            _SHAPE.pack(span_id, parent or bytes(8), start, end)
            for span_id, parent, start, end in shapes
            if len(span_id) == 8 and len(parent) in (0, 8)
        )
    except struct.error:
        return []
    if len(packed) != len(shapes) * _SHAPE.size:
        return []
    return [(SHAPES_HEADER, packed)]


def header_shapes(msg: RawMessage) -> tuple[SpanShape, ...] | None:
    """The span shapes a spans-topic part's header carries; None without one (written by a
    version before it, or too many spans)."""
    for key, value in msg.headers:
        if key == SHAPES_HEADER:
            if not value or len(value) % _SHAPE.size:
                return None
            return tuple(
                SpanShape(span_id, b"" if not any(parent) else parent, start, end)
                for span_id, parent, start, end in _SHAPE.iter_unpack(value)
            )
    return None
