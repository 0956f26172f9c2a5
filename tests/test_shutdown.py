"""Work cut short by the shutdown deadline, or by a write refused for good, is never committed.

Unit tests of the score stage with a processing stage that never finishes, and of the last
guard of `rag-monitor run`; the real process ending within its deadline is
`tests/test_faults_shutdown.py`.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import TopicAuthorizationFailedError
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from monitor.messages import RawMessage, Routed
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sinks.deadletter import StreamDeadLetters
from monitor.sinks.produce import ProduceRejected
from monitor.sources.offsets import OffsetTracker
from monitor.stages.reject import Rejecter
from monitor.stages.score import ScoreStage
from tests.support.traces import native_trace

TP = TopicPartition("in", 0)
REPO = Path(__file__).resolve().parents[1]


class Stage:
    """Finishes every trace at once, but never `hang`, and refuses `refuse` for good."""

    def __init__(self, hang: str = "", refuse: str = "") -> None:
        self.hang, self.refuse = hang, refuse
        self.done: list[str] = []

    async def process(self, trace: Trace) -> None:
        if trace.trace_id == self.hang:
            await asyncio.Event().wait()
        if trace.trace_id == self.refuse:
            raise ProduceRejected("results", "results.topic", TopicAuthorizationFailedError())
        self.done.append(trace.trace_id)


def ingest(
    stage: Stage, tracker: OffsetTracker, letters: io.StringIO, **extra: object
) -> ScoreStage:
    metrics = Metrics(CollectorRegistry())
    return ScoreStage(
        processor=stage,
        rejecter=Rejecter(StreamDeadLetters(letters), metrics, tracker, max_bytes=1_048_576),
        tracker=tracker,
        metrics=metrics,
        tracer=None,
        max_in_flight=100,
        **extra,  # type: ignore[arg-type]
    )


def messages(tracker: OffsetTracker, count: int) -> list[Routed]:
    """Native messages read (begun in the tracker, as the consume loop does)."""
    batch = [
        RawMessage("in", 0, n, None, json.dumps(native_trace(n, conversation_id=None)).encode())
        for n in range(count)
    ]
    for msg in batch:
        tracker.begin(msg.tp, msg.offset)
    return [Routed(msg, "native") for msg in batch]


async def test_a_trace_cancelled_at_the_deadline_is_not_committed_past() -> None:
    tracker, letters = OffsetTracker(), io.StringIO()
    stage = Stage(hang="trace-000002")
    intake = ingest(stage, tracker, letters)
    await intake.handle_batch(messages(tracker, 5))
    assert not await intake.drain(time.monotonic() + 0.5)
    await asyncio.sleep(0.05)
    assert sorted(stage.done) == ["trace-000000", "trace-000001", "trace-000003", "trace-000004"]
    assert tracker.to_commit() == {TP: 2}, "the cancelled trace is read again, not skipped"
    assert letters.getvalue() == "", "nor dead-lettered"


class Preparing(Stage):
    """Prepares for each batch (`typing.BatchPreparing`); the first preparation never ends."""

    def __init__(self) -> None:
        super().__init__()
        self.preparations = 0

    @asynccontextmanager
    async def batch(self, traces: Sequence[tuple[Trace, Collection[TopicPartition]]]) -> Any:
        self.preparations += 1
        if self.preparations == 1:
            await asyncio.Event().wait()
        yield


async def test_a_batch_cancelled_while_it_was_prepared_holds_up_no_later_batch() -> None:
    """A later batch's traces of the same key wait for the earlier batch's; cancelled before
    any of them ran (the deadline, while the processor prepared), it must not make them wait
    for ever."""
    tracker, letters = OffsetTracker(), io.StringIO()
    stage = Preparing()
    intake = ingest(stage, tracker, letters)
    await intake.handle_batch(messages(tracker, 2))
    assert not await intake.drain(time.monotonic() + 0.2)
    assert stage.done == [], "cancelled while the batch was prepared"
    again = [Routed(r.message, "native") for r in messages(tracker, 2)]  # read again
    await intake.handle_batch(again)
    assert await intake.drain(time.monotonic() + 5), "the re-read batch is not held up"
    assert sorted(stage.done) == ["trace-000000", "trace-000001"]


async def test_a_write_refused_for_good_stops_the_daemon_and_leaves_the_trace_unfinished() -> None:
    tracker, letters = OffsetTracker(), io.StringIO()
    refused: list[ProduceRejected] = []
    intake = ingest(Stage(refuse="trace-000001"), tracker, letters, on_fatal=refused.append)
    await intake.handle_batch(messages(tracker, 3))
    assert await intake.drain(time.monotonic() + 5)
    assert [r.setting for r in refused] == ["results.topic"]
    assert tracker.to_commit() == {TP: 1}
    assert letters.getvalue() == "", "a refused write is no fault of the trace's"


@pytest.mark.slow
def test_the_last_guard_ends_a_process_that_outlives_its_deadline() -> None:
    """What `rag-monitor run` starts on SIGTERM: whatever still runs at the deadline (here the
    main thread sleeping, like a close that hangs), the process ends, exit 130, saying why."""
    code = (
        "import time\n"
        "from monitor.cli.daemon import _guard_deadline\n"
        "_guard_deadline(0.5, 1.0)\n"
        "time.sleep(120)\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 130
    assert time.monotonic() - started < 60, "ended by the guard, not by the end of its sleep"
    assert (
        "rag-monitor: shutdown deadline (1s) reached; exiting with work unfinished" in done.stderr
    )
