"""Is a consumer making progress? Partitions whose committable offset stands still with work.

A partition is stuck when it has unfinished messages and its committable offset (the lowest
unfinished one) has not moved for `after_seconds`: the message at its head is not finishing, so
nothing of the partition can be committed and a crash would re-read all that was read since.
An idle partition is never stuck, nor is one whose head keeps finishing, however slowly the
rest goes. What holds the head is not this module's business: the daemon adds the write that
has been failing, if any (`monitor.retry.FailingCalls`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog
from aiokafka.structs import TopicPartition

from monitor.metrics import Metrics
from monitor.retry import Failing, FailingCalls
from monitor.sources.offsets import OffsetTracker

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Stuck:
    """A partition held at `offset` for `seconds`."""

    tp: TopicPartition
    offset: int
    seconds: float

    def describe(self) -> str:
        where = f"{self.tp.topic}/{self.tp.partition}"
        return f"{where} at offset {self.offset} for {self.seconds:.0f}s"


class StuckPartitions:
    """Watches one consumer's offset tracker (call `check` as often as you like)."""

    def __init__(
        self,
        tracker: OffsetTracker,
        after_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self._tracker = tracker
        self.after_seconds = after_seconds
        self._clock = clock
        self._held: dict[TopicPartition, tuple[int, float]] = {}  # offset, since when

    def check(self) -> list[Stuck]:
        """The stuck partitions, longest first."""
        now = self._clock()
        heads = self._tracker.heads()
        held: dict[TopicPartition, tuple[int, float]] = {}
        for tp, offset in heads.items():
            before = self._held.get(tp)
            held[tp] = before if before is not None and before[0] == offset else (offset, now)
        self._held = held
        stuck = [
            Stuck(tp, offset, now - since)
            for tp, (offset, since) in self._held.items()
            if now - since >= self.after_seconds
        ]
        return sorted(stuck, key=lambda s: -s.seconds)


LOG_EVERY_SECONDS = 60.0


class StageWatch:
    """Whether each stage of the daemon makes progress: its stuck partitions (counted in
    ``ragmon_stuck_partitions{stage}``), and a write failing longer than the bound.

    `check` is called about every second; while a stage is stuck it logs one warning a minute
    naming the partitions and the failing write, and one line when it moves again.
    """

    def __init__(
        self,
        trackers: Mapping[str, OffsetTracker],
        after_seconds: float,
        failing: FailingCalls,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.after_seconds = after_seconds
        self._clock = clock
        self._watches = {
            stage: StuckPartitions(tracker, after_seconds, clock)
            for stage, tracker in trackers.items()
        }
        self._failing = failing
        self._gauge = metrics.stuck_partitions
        self._stuck: dict[str, list[Stuck]] = {}
        self._logged: dict[str, float] = {}

    def check(self) -> None:
        now = self._clock()
        write = self.failing_write()
        for stage, watch in self._watches.items():
            stuck = watch.check()
            self._stuck[stage] = stuck
            self._gauge.labels(stage).set(len(stuck))
            if stuck:
                last = self._logged.get(stage)
                if last is None or now - last >= LOG_EVERY_SECONDS:
                    self._logged[stage] = now
                    log.warning(
                        "stage stuck: no progress while it has work",
                        stage=stage,
                        partitions=len(stuck),
                        longest=[s.describe() for s in stuck[:5]],
                        failing_write=_describe(write, now) if write is not None else None,
                    )
            elif self._logged.pop(stage, None) is not None:
                log.info("stage making progress again", stage=stage)

    def failing_write(self) -> Failing | None:
        """The write that has failed for longer than the bound, if any."""
        oldest = self._failing.oldest()
        if oldest is None or self._clock() - oldest.since < self.after_seconds:
            return None
        return oldest

    def problem(self) -> str | None:
        """Why the daemon is not making progress (for /readyz); None when it is."""
        now = self._clock()
        write = self.failing_write()
        cause = f"; {_describe(write, now)}" if write is not None else ""
        for stage, stuck in self._stuck.items():
            if stuck:
                shown = ", ".join(s.describe() for s in stuck[:3])
                more = f" and {len(stuck) - 3} more" if len(stuck) > 3 else ""
                return f"{stage} stage stuck: no progress on {shown}{more}{cause}"
        if write is not None:
            return f"no progress: {_describe(write, now)}"
        return None


def _describe(write: Failing, now: float) -> str:
    return f"a {write.operation} write failing for {now - write.since:.0f}s ({write.error})"
