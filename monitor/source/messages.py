"""The raw message every source yields, before decoding."""

from __future__ import annotations

from dataclasses import dataclass, field

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

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
