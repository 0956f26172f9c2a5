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
