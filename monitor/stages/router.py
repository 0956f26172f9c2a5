"""The router: which stage a fetched message goes to, and in what format. The one place that
tells formats apart and the one size check of input.

- A message of the internal spans topic is a span part (or a log-record part, by its header)
  for the assemble stage; one of the internal traces topic is an assembled native trace for the
  score stage. Both were written by this daemon within the size limit and are not checked again.
- Any other message over `kafka.max_message_bytes` is rejected `too_large`, undecoded.
- A message of `kafka.otlp_logs_topics` is an OTLP logs export (GenAI events) for the re-key
  stage, in the configured format or, with `auto`, the one its first bytes show.
- Otherwise the format is the configured one, or with `auto` what the first bytes show:
  OTLP/JSON or protobuf span exports go to the re-key stage, and so does an OTLP/JSON logs
  export found among them; native JSON goes to `natives_to` (the score stage, or the re-key
  stage where natives must first be keyed by conversation: the OTLP consumer). Lines of a text
  file (`text_lines`) are never protobuf: bytes that are not JSON are left to the native
  decoder to name (invalid_utf8, invalid_json).

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from monitor.config import InputFormat, KafkaConfig
from monitor.formats.errors import DecodeError
from monitor.formats.otlp import detect_format
from monitor.formats.otlp_logs import detect_logs_format
from monitor.messages import MessageFormat, RawMessage, Routed
from monitor.stages.parts import holds_logs

StageName = Literal["rekey", "assemble", "score"]
REKEY: StageName = "rekey"
ASSEMBLE: StageName = "assemble"
SCORE: StageName = "score"


def size_error(msg: RawMessage, limit: int) -> DecodeError | None:
    """`too_large` when the message is over `limit` bytes (its whole size, read or not)."""
    if msg.value is not None and msg.value_size > limit:
        return DecodeError("too_large", f"{msg.value_size} bytes, limit {limit}")
    return None


@dataclass
class Routes:
    """One fetched batch, sorted: per stage its messages in order, and what no stage takes."""

    to: dict[str, list[Routed]] = field(default_factory=dict)
    rejected: list[tuple[RawMessage, DecodeError]] = field(default_factory=list)


class Router:
    def __init__(
        self,
        *,
        input_format: InputFormat,
        max_bytes: int,
        natives_to: StageName = SCORE,
        spans_topic: str | None = None,
        traces_topic: str | None = None,
        logs_topics: frozenset[str] = frozenset(),
        text_lines: bool = False,
    ) -> None:
        self._format = input_format
        self._max_bytes = max_bytes
        self._natives_to = natives_to
        self._spans_topic = spans_topic
        self._traces_topic = traces_topic
        self._logs_topics = logs_topics
        self._text_lines = text_lines

    @classmethod
    def of(cls, kafka: KafkaConfig, **options: object) -> Router:
        """The router of a daemon reading what `kafka` configures (its internal topics too)."""
        return cls(
            input_format=kafka.format,
            max_bytes=kafka.max_message_bytes,
            spans_topic=kafka.effective_spans_topic,
            traces_topic=kafka.effective_traces_topic,
            logs_topics=frozenset(kafka.otlp_logs_topics),
            **options,  # type: ignore[arg-type]
        )

    def route(self, messages: Sequence[RawMessage]) -> Routes:
        routes = Routes()
        for msg in messages:
            routed = self.classify(msg)
            if isinstance(routed, DecodeError):
                routes.rejected.append((msg, routed))
            else:
                stage, item = routed
                routes.to.setdefault(stage, []).append(item)
        return routes

    def classify(self, msg: RawMessage) -> tuple[StageName, Routed] | DecodeError:
        """The stage a message goes to and what it holds, or why it is rejected."""
        if msg.topic == self._spans_topic:
            return ASSEMBLE, Routed(msg, "otlp_proto", logs=holds_logs(msg), internal=True)
        if msg.topic == self._traces_topic:
            return SCORE, Routed(msg, "native", internal=True)
        too_large = size_error(msg, self._max_bytes)
        if too_large is not None:
            return too_large
        value = msg.value or b""
        if msg.topic in self._logs_topics:
            logs_format: MessageFormat
            if self._format == "otlp_json" or self._format == "otlp_proto":
                logs_format = self._format
            else:
                logs_format = detect_logs_format(value)
            return REKEY, Routed(msg, logs_format, logs=True)
        fmt: MessageFormat
        if self._format != "auto":
            fmt = self._format
        else:
            fmt = detect_format(value)
            if fmt == "otlp_proto" and self._text_lines:
                fmt = "native"
            if fmt == "native" and detect_logs_format(value) == "otlp_json":
                return REKEY, Routed(msg, "otlp_json", logs=True)
        if fmt == "native":
            return self._natives_to, Routed(msg, "native")
        return REKEY, Routed(msg, fmt)
