"""Which offsets are safe to commit: never past a message whose work is unfinished.

A message is "begun" when it is read and "finished" when every unit of work it carried is
processed, deliberately skipped or dead-lettered. An OTLP message can carry spans of several
traces, so a message holds a count of outstanding units rather than a flag.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from aiokafka.structs import TopicPartition


@dataclass
class _PartitionState:
    outstanding: dict[int, int] = field(default_factory=dict)  # offset -> unfinished units
    heap: list[int] = field(default_factory=list)  # offsets begun, lazily pruned
    next_offset: int | None = None  # one past the highest offset read
    committed: int | None = None

    def committable(self) -> int | None:
        while self.heap and self.heap[0] not in self.outstanding:
            heapq.heappop(self.heap)
        if self.heap:
            return self.heap[0]
        return self.next_offset


class OffsetTracker:
    """Per-partition bookkeeping of unfinished messages; not thread-safe, one event loop only."""

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _PartitionState] = {}

    def begin(self, tp: TopicPartition, offset: int, units: int = 1) -> None:
        state = self._partitions.setdefault(tp, _PartitionState())
        if units > 0:
            if offset not in state.outstanding:
                heapq.heappush(state.heap, offset)
            state.outstanding[offset] = state.outstanding.get(offset, 0) + units
        if state.next_offset is None or offset + 1 > state.next_offset:
            state.next_offset = offset + 1

    def add_units(self, tp: TopicPartition, offset: int, units: int) -> None:
        """A begun message turned out to carry more work (for example several OTLP traces)."""
        state = self._partitions.get(tp)
        if state is None or offset not in state.outstanding:
            return
        state.outstanding[offset] += units

    def finish(self, tp: TopicPartition, offset: int, units: int = 1) -> None:
        """Mark units of a message done; a message of a revoked partition is ignored."""
        state = self._partitions.get(tp)
        if state is None:
            return
        left = state.outstanding.get(offset)
        if left is None:
            return
        if left <= units:
            del state.outstanding[offset]
        else:
            state.outstanding[offset] = left - units

    def pending(self, tp: TopicPartition | None = None) -> int:
        """Unfinished messages, in one partition or in all."""
        if tp is not None:
            state = self._partitions.get(tp)
            return len(state.outstanding) if state else 0
        return sum(len(s.outstanding) for s in self._partitions.values())

    def to_commit(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Per partition, the lowest unfinished offset, where it moved since the last commit."""
        result: dict[TopicPartition, int] = {}
        for tp, state in self._partitions.items():
            if partitions is not None and tp not in partitions:
                continue
            offset = state.committable()
            if offset is not None and offset != state.committed:
                result[tp] = offset
        return result

    def committable(self, tp: TopicPartition) -> int | None:
        state = self._partitions.get(tp)
        return state.committable() if state else None

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            state = self._partitions.get(tp)
            if state is not None:
                state.committed = offset

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Drop revoked partitions; their unfinished messages are re-read by the next owner."""
        for tp in partitions:
            self._partitions.pop(tp, None)

    def partitions(self) -> set[TopicPartition]:
        return set(self._partitions)
