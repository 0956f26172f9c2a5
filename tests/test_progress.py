"""Is a stage making progress? Stuck partitions, failing writes, the gauge, the log, readiness.

Unit tests with a settable clock; a real daemon with a real stuck partition is in
`tests/test_faults_stuck.py`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from monitor.metrics import Metrics
from monitor.retry import FailingCalls
from monitor.shutdown import ShutdownClock
from monitor.sources.offsets import OffsetTracker
from monitor.sources.progress import StageWatch, StuckPartitions
from tests.support.clock import Clock

TP0, TP1 = TopicPartition("in", 0), TopicPartition("in", 1)


def test_a_partition_is_stuck_when_its_unfinished_head_stands_still_for_the_bound() -> None:
    clock, tracker = Clock(1000.0), OffsetTracker()
    stuck = StuckPartitions(tracker, 30, clock)
    for offset in (5, 6, 7):
        tracker.begin(TP0, offset)
    tracker.begin(TP1, 3)
    assert stuck.check() == []
    clock.now += 20
    tracker.finish(TP0, 6)  # later messages finishing is no progress while 5 holds the head
    tracker.finish(TP1, 3)  # TP1 is idle now: never stuck
    clock.now += 15
    (held,) = stuck.check()
    assert (held.tp, held.offset, held.seconds) == (TP0, 5, 35)
    assert held.describe() == "in/0 at offset 5 for 35s"
    tracker.finish(TP0, 5)  # the head moves to 7: the clock starts again
    assert stuck.check() == []
    clock.now += 29
    assert stuck.check() == []
    clock.now += 1
    assert [s.offset for s in stuck.check()] == [7]


def test_a_busy_partition_whose_head_keeps_finishing_is_never_stuck() -> None:
    clock, tracker = Clock(1000.0), OffsetTracker()
    stuck = StuckPartitions(tracker, 30, clock)
    for offset in range(100):
        tracker.begin(TP0, offset)
        clock.now += 10
        if offset:
            tracker.finish(TP0, offset - 1)
        assert stuck.check() == []


def watch(
    clock: Clock, failing: FailingCalls, registry: CollectorRegistry
) -> tuple[StageWatch, OffsetTracker]:
    tracker = OffsetTracker()
    stages = StageWatch(
        {"scoring": tracker, "otlp": OffsetTracker()}, 60, failing, Metrics(registry), clock
    )
    return stages, tracker


def test_the_watch_sets_the_gauge_names_the_cause_and_logs_once_a_minute() -> None:
    clock, registry = Clock(1000.0), CollectorRegistry()
    failing = FailingCalls(clock)
    stages, tracker = watch(clock, failing, registry)
    gauge = registry.get_sample_value
    tracker.begin(TP0, 9)
    failing.failed("call", "dead_letters", ConnectionError("broker away"))
    with structlog.testing.capture_logs() as logs:
        for _ in range(200):  # every second for 200 s
            stages.check()
            clock.now += 1
    assert gauge("ragmon_stuck_partitions", {"stage": "scoring"}) == 1
    assert gauge("ragmon_stuck_partitions", {"stage": "otlp"}) == 0
    warnings = [e for e in logs if e["event"] == "stage stuck: no progress while it has work"]
    assert len(warnings) == 3, "stuck from 60 s on: at 60, 120 and 180 s"
    assert warnings[0]["longest"] == ["in/0 at offset 9 for 60s"]
    assert "dead_letters write failing for 60s" in warnings[0]["failing_write"]
    problem = stages.problem()
    assert problem is not None
    assert problem.startswith("scoring stage stuck: no progress on in/0 at offset 9 for 199s")
    assert "a dead_letters write failing for 200s (ConnectionError: broker away)" in problem
    tracker.finish(TP0, 9)
    failing.ended("call")
    with structlog.testing.capture_logs() as logs:
        stages.check()
    assert gauge("ragmon_stuck_partitions", {"stage": "scoring"}) == 0
    assert [e["event"] for e in logs] == ["stage making progress again"]
    assert stages.problem() is None


def test_a_write_failing_past_the_bound_is_a_problem_even_without_a_stuck_partition() -> None:
    clock = Clock(1000.0)
    failing = FailingCalls(clock)
    stages, _ = watch(clock, failing, CollectorRegistry())
    failing.failed("call", "results", TimeoutError("no answer"))
    clock.now += 59
    stages.check()
    assert stages.problem() is None, "not yet past the bound"
    clock.now += 1
    stages.check()
    assert (
        stages.problem() == "no progress: a results write failing for 60s (TimeoutError: no answer)"
    )


def test_the_shutdown_clock_keeps_a_reserve_for_closing() -> None:
    clock = Clock(1000.0)
    shutdown = ShutdownClock(20, clock)
    assert not shutdown.started
    clock.now += 5
    shutdown.start()
    clock.now += 100
    shutdown.start()  # the first stop request counts
    # 20 s from the first stop request: closed by 18 s, drained by 13 s, guarded at 19 s
    assert shutdown.deadline() == 1023 and shutdown.drain_deadline() == 1018
    assert shutdown.guard_seconds == 19
    short = ShutdownClock(8, clock)
    assert (short.reserve_seconds, short.margin_seconds) == (2, 1.6), "shares of a short one"
    assert shutdown.left() == 0


async def test_a_close_that_hangs_is_given_up_on_at_the_deadline() -> None:
    shutdown = ShutdownClock(0.3)
    shutdown.start()
    closed: list[Any] = []

    async def hangs() -> None:
        await asyncio.sleep(60)

    async def quick() -> None:
        closed.append("quick")

    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        await shutdown.bounded("the store", hangs)()
        await shutdown.bounded("the producer", quick)()
    assert time.monotonic() - started < 1.0
    assert closed == ["quick"], "what comes after a hanging close still closes"
    assert [(e["event"], e["what"]) for e in logs] == [
        ("shutdown: no longer waiting for it to close", "the store")
    ]
