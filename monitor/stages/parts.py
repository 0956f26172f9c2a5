"""Where a span part came from: the headers the re-key stage writes on the spans topic and the
assemble stage reads back, so that a dead letter names the message the spans first came in
(its topic, partition, offset and key) and is encoded in that message's format."""

from __future__ import annotations

from dataclasses import dataclass

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
