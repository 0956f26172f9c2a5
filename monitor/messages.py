"""The raw message every source yields, and the router's word on what it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from aiokafka.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class RawMessage:
    """One input message: a Kafka record, or a line of a replay file (offset = line number)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = field(default=())
    timestamp_ms: int | None = None
    # The full size when `value` holds only the start of the message (a replay line over the
    # size limit is not read into memory whole); None when `value` is all of it.
    size: int | None = None

    @property
    def value_size(self) -> int:
        """Bytes of the whole message, read or not."""
        if self.size is not None:
            return self.size
        return len(self.value) if self.value is not None else 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


MessageFormat = Literal["native", "otlp_json", "otlp_proto"]


@dataclass(frozen=True, slots=True)
class Routed:
    """A message and what the router found it holds (`monitor.stages.router`): its format, an
    OTLP logs export (GenAI events) rather than spans, and whether an internal topic carried
    it (written by the OTLP stage: span parts keyed by trace, assembled traces)."""

    message: RawMessage
    format: MessageFormat
    logs: bool = False
    internal: bool = False
