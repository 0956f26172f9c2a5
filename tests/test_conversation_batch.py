"""A batch's conversations read together (issue 26), through real SQLite and PostgreSQL.

The score stage hands the conversation stage a whole batch before it processes the traces one
by one: the conversations not in memory are read with one query per table, and so are the
stored turns the batch renumbers and its traces stored before. The queries are counted on the
store's engine (`before_cursor_execute`); the turn numbers must come out as the rule gives them
whatever the batching: by start, ties by trace id, however the traces arrive.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry
from sqlalchemy import event, select
from structlog.testing import capture_logs

from monitor.config import Settings
from monitor.config.conversation import ConversationConfig
from monitor.daemon import build_scoring_stage
from monitor.faults import owned_while
from monitor.messages import RawMessage, Routed
from monitor.metrics import AgentLabels, Metrics
from monitor.models import EvaluationResult, Score, Trace
from monitor.sinks.conversations import IN_CHUNK, ConversationStore, StoredConversation
from monitor.sinks.deadletter import StreamDeadLetters
from monitor.sinks.store import Store, results_table, turns_table
from monitor.sources.offsets import OffsetTracker
from monitor.stages.conversation import ConversationMetrics, ConversationTracker
from monitor.stages.reject import Rejecter
from monitor.stages.score import ScoreStage
from tests.support.traces import encode, native_trace

START = datetime(2026, 11, 26, 9, tzinfo=UTC)
TP = TopicPartition("in", 0)
FROM = re.compile(r"\bFROM\s+(\w+)", re.IGNORECASE)


def turn(conversation: str, minute: int) -> dict[str, Any]:
    """A native trace without a producer's turn: numbered by when it started."""
    return native_trace(
        minute,
        trace_id=f"{conversation}-m{minute}",
        timestamp=(START + timedelta(minutes=minute)).isoformat(),
        conversation_id=conversation,
        turn=None,
    )


class Reads:
    """The SELECTs run on the store's engine, by the table they read."""

    def __init__(self, store: Store) -> None:
        self.tables: Counter[str] = Counter()
        event.listen(store._engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            found = FROM.search(statement)
            self.tables[found.group(1) if found else "?"] += 1


@dataclass
class Replica:
    """The real scoring stage behind the real score stage, fed whole batches as a consume loop
    feeds it."""

    score: ScoreStage
    store: Store
    tracker: ConversationTracker
    registry: CollectorRegistry
    letters: io.StringIO
    offsets: OffsetTracker
    next_offset: int = 0

    async def batch(self, traces: list[dict[str, Any]]) -> None:
        routed = []
        for trace in traces:
            msg = RawMessage(TP.topic, TP.partition, self.next_offset, None, encode(trace))
            self.offsets.begin(TP, msg.offset)
            self.next_offset += 1
            routed.append(Routed(msg, "native"))
        await self.score.handle_batch(routed)
        assert await self.score.drain(time.monotonic() + 30)
        assert self.letters.getvalue() == "", "nothing dead-lettered"

    def counted(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@asynccontextmanager
async def replica(url: str, **conversations: Any) -> AsyncIterator[Replica]:
    """A replica that starts with nothing in memory (a restart, or another pod)."""
    settings = Settings.model_validate(
        {"store": {"url": url}, "results": {"topic": None}, "conversations": conversations}
    )
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    async with AsyncExitStack() as stack:
        stage = await build_scoring_stage(settings, metrics, stack, None)
        assert stage.store is not None
        offsets, letters = OffsetTracker(), io.StringIO()
        score = ScoreStage(
            processor=stage.processor,
            rejecter=Rejecter(StreamDeadLetters(letters), metrics, offsets, max_bytes=1 << 20),
            tracker=offsets,
            metrics=metrics,
            tracer=None,
            max_in_flight=1000,
        )
        yield Replica(score, stage.store, stage.tracker, registry, letters, offsets)


async def stored_turns(store: Store) -> dict[str, dict[str, int]]:
    """conversation -> trace id -> turn, from the turn rows; the results must say the same."""

    async def read(conn: Any) -> tuple[list[Any], list[Any]]:
        rows = await conn.execute(
            select(turns_table.c.conversation_id, turns_table.c.trace_id, turns_table.c.turn)
        )
        results = await conn.execute(
            select(results_table.c.trace_id, results_table.c.turn, results_table.c.result)
        )
        return rows.all(), results.all()

    rows, results = await store.read(read)
    turns: dict[str, dict[str, int]] = {}
    for conversation_id, trace_id, number in rows:
        turns.setdefault(conversation_id, {})[trace_id] = number
    by_trace = {trace_id: number for c in turns.values() for trace_id, number in c.items()}
    for trace_id, number, document in results:
        assert number == json.loads(document)["turn"] == by_trace[trace_id], trace_id
    return turns


def by_start(conversation: str, minutes: list[int]) -> dict[str, int]:
    return {f"{conversation}-m{m}": n for n, m in enumerate(sorted(minutes), start=1)}


# ------------------------------------------------------------------ one query per table


async def _a_batch_reads_its_conversations_with_one_query_per_table(url: str) -> None:
    olds = [f"old-{i:02d}" for i in range(30)]
    async with replica(url) as first:
        await first.batch([turn(c, m) for c in olds for m in (1, 2)])
    async with replica(url) as second:
        reads = Reads(second.store)
        news = [f"new-{i:02d}" for i in range(10)]
        await second.batch([turn(c, 3) for c in olds] + [turn(c, 1) for c in news])
        assert reads.tables == {
            "conversation_turns": 1,
            "evaluation_results": 1,
            "conversation_state": 1,
        }, "40 conversations read with one query per table, none alone"
        turns = await stored_turns(second.store)
    assert all(turns[c] == by_start(c, [1, 2, 3]) for c in olds)
    assert all(turns[c] == by_start(c, [1]) for c in news)


async def test_sqlite_reads_a_batch_s_conversations_with_one_query_per_table(
    tmp_path: Path,
) -> None:
    await _a_batch_reads_its_conversations_with_one_query_per_table(
        f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    )


async def test_postgresql_reads_a_batch_s_conversations_with_one_query_per_table(
    postgres_url: str,
) -> None:
    await _a_batch_reads_its_conversations_with_one_query_per_table(postgres_url)


# ------------------------------------------------------------------ out of order


async def _out_of_order_turns_are_numbered_by_start_in_and_across_batches(url: str) -> None:
    async with replica(url) as first:
        await first.batch([turn("c", 5), turn("c", 1), turn("c", 3), turn("d", 2)])
        assert (await stored_turns(first.store))["c"] == by_start("c", [1, 3, 5])
    async with replica(url) as second:
        reads = Reads(second.store)
        # started before stored turns (they move up), a re-delivered one, a new last one
        await second.batch([turn("c", 6), turn("c", 4), turn("c", 3), turn("c", 2)])
        assert reads.tables == {
            "conversation_turns": 2,  # the conversation, then the turns it moves by trace id
            "evaluation_results": 2,
            "conversation_state": 1,
        }, "the turns the batch moves are read once, not once per step"
        assert (await stored_turns(second.store))["c"] == by_start("c", [1, 2, 3, 4, 5, 6])
        # m3: 2 -> 3, m5: 3 -> 4 (by m2), then m5: 4 -> 5 (by m4); m3 re-delivered keeps 3
        assert second.counted("ragmon_conversation_turns_renumbered_total") == 3
        await second.batch([turn("c", 0)])  # in memory now: nothing of it is read again
        assert reads.tables["conversation_state"] == 1
        turns = await stored_turns(second.store)
    assert turns["c"] == by_start("c", [0, 1, 2, 3, 4, 5, 6])
    assert turns["d"] == by_start("d", [2])


async def test_sqlite_numbers_out_of_order_turns_by_start_in_and_across_batches(
    tmp_path: Path,
) -> None:
    await _out_of_order_turns_are_numbered_by_start_in_and_across_batches(
        f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    )


async def test_postgresql_numbers_out_of_order_turns_by_start_in_and_across_batches(
    postgres_url: str,
) -> None:
    await _out_of_order_turns_are_numbered_by_start_in_and_across_batches(postgres_url)


# ------------------------------------------------------------------ the bound


async def test_a_batch_larger_than_the_bound_keeps_what_it_needs_until_it_is_done(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    conversations = [f"conv-{i:02d}" for i in range(12)]
    async with replica(url, max_conversations=4) as first:
        await first.batch([turn(c, 1) for c in conversations])
    async with replica(url, max_conversations=4) as second:
        reads = Reads(second.store)
        await second.batch([turn(c, m) for m in (3, 2) for c in conversations])
        assert reads.tables["conversation_state"] == 1, "none evicted mid-batch and read again"
        assert len(second.tracker) == 4, "the bound holds again once the batch is done"
        assert second.counted("ragmon_conversations_evicted_total", reason="lru") == 8
        turns = await stored_turns(second.store)
    assert all(turns[c] == by_start(c, [1, 2, 3]) for c in conversations)


# ------------------------------------------------------------------ a read overtaken


class HeldReads(ConversationStore):
    """Reads a batch's conversations, then holds the answer until `go` is set."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.read = asyncio.Event()
        self.go = asyncio.Event()

    async def load_many(self, conversation_ids: Any) -> dict[str, StoredConversation]:
        found = await super().load_many(conversation_ids)
        self.read.set()
        await self.go.wait()
        return found


def result_of(trace: Trace) -> EvaluationResult:
    return EvaluationResult(
        trace_id=trace.trace_id,
        conversation_id=trace.conversation_id,
        agent=trace.agent,
        timestamp=trace.timestamp,
        evaluator="heuristic",
        scores={"faithfulness": Score.of(1.0)},
    )


async def test_a_conversation_revoked_while_its_batch_read_it_is_not_kept_from_that_read(
    tmp_path: Path,
) -> None:
    """The partition goes to another replica while the batch reads; that replica writes a
    turn; the partition comes back. The read is older than that turn: it must not be kept."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:

        def tracker(conversations: ConversationStore) -> ConversationTracker:
            metrics = ConversationMetrics(CollectorRegistry(), AgentLabels(10))
            return ConversationTracker(ConversationConfig(), metrics, store=conversations)

        m1, m2, m3 = (Trace.model_validate(turn("c", m)) for m in (1, 2, 3))
        other = tracker(ConversationStore(store))
        await other.observe(m1, result_of(m1))
        held = HeldReads(store)
        ours = tracker(held)
        done = asyncio.Event()

        async def process_batch() -> None:
            async with ours.batch([(m3, [TP])]):
                with owned_while(lambda: True, (TP,)):
                    await ours.observe(m3, result_of(m3))
            done.set()

        task = asyncio.create_task(process_batch())
        await asyncio.wait_for(held.read.wait(), 10)
        ours.forget_partitions({TP})
        await other.observe(m2, result_of(m2))  # the other replica's turn, after the read
        held.go.set()
        await asyncio.wait_for(task, 10)
        assert done.is_set()
        rows = await store.select_rows(turns_table, conversation_id="c")
    finally:
        await store.close()
    assert {r["trace_id"]: r["turn"] for r in rows} == by_start("c", [1, 2, 3])


class FirstReadWaits(ConversationStore):
    """The first batch read waits until a second has been read and kept."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.calls = 0
        self.second_done = asyncio.Event()

    async def load_many(self, conversation_ids: Any) -> dict[str, StoredConversation]:
        self.calls += 1
        found = await super().load_many(conversation_ids)
        if self.calls == 1:
            await self.second_done.wait()
        return found


async def test_batch_reads_that_overlap_each_keep_what_they_read(tmp_path: Path) -> None:
    """Two batches (two partitions) read the store at once and the later one finishes first:
    each keeps its own read (neither falls back to reading turn by turn), and turns are
    numbered from what was stored."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        metrics = ConversationMetrics(CollectorRegistry(), AgentLabels(10))
        writer = ConversationTracker(ConversationConfig(), metrics, store=ConversationStore(store))
        a1, a2, b1, b2 = (
            Trace.model_validate(turn(c, m)) for c, m in (("a", 1), ("a", 2), ("b", 1), ("b", 2))
        )
        for trace in (a1, b1):
            await writer.observe(trace, result_of(trace))
        reads = FirstReadWaits(store)
        tracker = ConversationTracker(
            ConversationConfig(),
            ConversationMetrics(CollectorRegistry(), AgentLabels(10)),
            store=reads,
        )

        async def process(trace: Trace, then: asyncio.Event | None) -> None:
            async with tracker.batch([(trace, [TP])]):
                with owned_while(lambda: True, (TP,)):
                    await tracker.observe(trace, result_of(trace))
            if then is not None:
                then.set()

        with capture_logs() as logs:
            first = asyncio.create_task(process(a2, None))
            await asyncio.sleep(0.05)
            await asyncio.wait_for(process(b2, reads.second_done), 10)
            await asyncio.wait_for(first, 10)
        rows = await store.select_rows(turns_table)
    finally:
        await store.close()
    assert [e for e in logs if e["event"] == "reading a batch's conversations failed"] == []
    assert reads.calls == 2
    assert {r["trace_id"]: r["turn"] for r in rows} == {
        **by_start("a", [1, 2]),
        **by_start("b", [1, 2]),
    }


# ------------------------------------------------------------------ parameter limits


async def _a_batch_beyond_one_in_list_is_read_in_slices(url: str) -> None:
    store = await Store.open(url)
    try:
        conversations = ConversationStore(store)
        tracker = ConversationTracker(
            ConversationConfig(),
            ConversationMetrics(CollectorRegistry(), AgentLabels(10)),
            store=conversations,
        )
        stored = [Trace.model_validate(turn(f"conv-{i:04d}", 1)) for i in range(0, 1200, 100)]
        for trace in stored:
            await tracker.observe(trace, result_of(trace))
        reads = Reads(store)
        found = await conversations.load_many([f"conv-{i:04d}" for i in range(1200)])
        assert reads.tables == {
            "conversation_turns": 3,
            "evaluation_results": 3,
            "conversation_state": 3,
        }, f"1,200 conversations in slices of {IN_CHUNK}"
    finally:
        await store.close()
    assert len(found) == 1200
    assert {c for c, s in found.items() if s.turns} == {t.conversation_id for t in stored}
    for conversation_id in {t.conversation_id for t in stored}:
        rows = found[conversation_id].turns
        assert [(r.trace_id, r.turn) for r in rows] == [(f"{conversation_id}-m1", 1)]


async def test_sqlite_reads_a_batch_beyond_one_in_list_in_slices(tmp_path: Path) -> None:
    await _a_batch_beyond_one_in_list_is_read_in_slices(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")


async def test_postgresql_reads_a_batch_beyond_one_in_list_in_slices(postgres_url: str) -> None:
    await _a_batch_beyond_one_in_list_is_read_in_slices(postgres_url)


# ------------------------------------------------------------------ a failed read


class FailingReads(ConversationStore):
    """A batch's read fails; one conversation's read (`load`) works."""

    async def load(self, conversation_id: str) -> StoredConversation:
        return (await super().load_many([conversation_id]))[conversation_id]

    async def load_many(self, conversation_ids: Any) -> dict[str, StoredConversation]:
        raise RuntimeError("the batch's read failed")


async def test_a_failed_batch_read_leaves_each_turn_to_read_its_conversation(
    tmp_path: Path,
) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        m1, m2 = (Trace.model_validate(turn("c", m)) for m in (1, 2))
        metrics = ConversationMetrics(CollectorRegistry(), AgentLabels(10))
        first = ConversationTracker(ConversationConfig(), metrics, ConversationStore(store))
        await first.observe(m2, result_of(m2))
        failing = ConversationTracker(ConversationConfig(), metrics, FailingReads(store))
        async with failing.batch([(m1, [TP])]):
            assert len(failing) == 0, "nothing kept from a read that failed"
            await failing.observe(m1, result_of(m1))  # reads "c" itself: m2 is stored
        rows = await store.select_rows(turns_table, conversation_id="c")
    finally:
        await store.close()
    assert {r["trace_id"]: r["turn"] for r in rows} == by_start("c", [1, 2])
