"""Which offsets are safe to commit: never past a message whose work is unfinished.

A message is "begun" when it is read and "finished" when every unit of work it carried is
processed, deliberately skipped or dead-lettered. An OTLP message can carry spans of several
traces, so a message holds a count of outstanding units rather than a flag.

Messages can finish out of order (the spans of a trace that is still being assembled hold back
the commit of later, finished ones). `commit_metadata` describes which offsets between the
commit and the last one read are unfinished, so the partition's next owner can skip the rest
instead of doing them twice (`ReplayFilter`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka.structs import TopicPartition


@dataclass
class _PartitionState:
    outstanding: dict[int, int] = field(default_factory=dict)  # offset -> unfinished units
    heap: list[int] = field(default_factory=list)  # offsets begun, lazily pruned
    next_offset: int | None = None  # one past the highest offset read
    committed: int | None = None
    committed_metadata: str = ""

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
        self._generations: dict[TopicPartition, int] = {}

    def generation(self, tp: TopicPartition) -> int:
        """How many times the partition was forgotten (revoked): work read in an earlier
        generation belongs to another owner now, even when the partition came back."""
        return self._generations.get(tp, 0)

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

    def heads(self) -> dict[TopicPartition, int]:
        """Per partition with unfinished messages, the lowest unfinished offset."""
        heads: dict[TopicPartition, int] = {}
        for tp, state in self._partitions.items():
            if state.outstanding:
                offset = state.committable()
                if offset is not None:
                    heads[tp] = offset
        return heads

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

    def to_commit_with_metadata(
        self, partitions: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Like `to_commit`, with each partition's `commit_metadata`; where either moved."""
        result: dict[TopicPartition, tuple[int, str]] = {}
        for tp, state in self._partitions.items():
            if partitions is not None and tp not in partitions:
                continue
            offset = state.committable()
            if offset is None:
                continue
            metadata = commit_metadata(offset, state.next_offset, state.outstanding)
            if (offset, metadata) != (state.committed, state.committed_metadata):
                result[tp] = (offset, metadata)
        return result

    def committable(self, tp: TopicPartition) -> int | None:
        state = self._partitions.get(tp)
        return state.committable() if state else None

    def mark_committed(
        self, offsets: dict[TopicPartition, int], metadata: dict[TopicPartition, str] | None = None
    ) -> None:
        for tp, offset in offsets.items():
            state = self._partitions.get(tp)
            if state is not None:
                state.committed = offset
                state.committed_metadata = (metadata or {}).get(tp, "")

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Drop revoked partitions; their unfinished messages are re-read by the next owner."""
        for tp in partitions:
            self._partitions.pop(tp, None)
            self._generations[tp] = self.generation(tp) + 1


METADATA_PREFIX = "unfinished:"
MAX_METADATA_CHARS = 3000  # brokers keep up to offset.metadata.max.bytes (4096 by default)


def commit_metadata(committed: int, next_offset: int | None, outstanding: Iterable[int]) -> str:
    """`unfinished:<read>:<o1>,<o2>...` in hex, relative to the committed offset: of the
    `read` offsets from the committed one on, only those listed are unfinished. Empty when
    nothing beyond the commit was read, or when the list would not fit."""
    if next_offset is None or next_offset <= committed:
        return ""
    pending = sorted(o - committed for o in outstanding if o >= committed)
    text = f"{METADATA_PREFIX}{next_offset - committed:x}:" + ",".join(f"{o:x}" for o in pending)
    return text if len(text) <= MAX_METADATA_CHARS else ""


class ReplayFilter:
    """Skips messages a partition's previous owner finished beyond its committed offset."""

    def __init__(self) -> None:
        self._ranges: dict[TopicPartition, tuple[int, int, frozenset[int]]] = {}
        self._read: dict[TopicPartition, range] = {}

    def load(self, tp: TopicPartition, committed: int, metadata: str) -> None:
        self._ranges.pop(tp, None)
        self._read.pop(tp, None)
        if not metadata.startswith(METADATA_PREFIX):
            return
        try:
            read, _, listed = metadata[len(METADATA_PREFIX) :].partition(":")
            pending = frozenset(committed + int(o, 16) for o in listed.split(",") if o)
            self._ranges[tp] = (committed, committed + int(read, 16), pending)
            self._read[tp] = range(committed, committed + int(read, 16))
        except ValueError:
            return  # written by something else: read everything again

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._ranges.pop(tp, None)
            self._read.pop(tp, None)

    def read_before(self, tp: TopicPartition, offset: int) -> bool:
        """The previous owner had read this offset by its last commit (and not finished it:
        it is read again)."""
        return offset in self._read.get(tp, ())

    def done(self, tp: TopicPartition, offset: int) -> bool:
        """Finished by the previous owner: skip it."""
        span = self._ranges.get(tp)
        if span is None:
            return False
        start, end, pending = span
        if offset >= end:
            del self._ranges[tp]  # past everything the previous owner read
            return False
        return start <= offset and offset not in pending
