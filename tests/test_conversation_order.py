"""Turns of a conversation: numbered by start, one at a time, the same whatever the arrival.

Through the real scoring stage (tier 0, the conversation stage, a real SQLite store): the turn
numbers in the store and in the results must depend only on which traces a conversation has.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import ScoringStage, build_scoring_stage
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sinks.store import turns_table

START = datetime(2026, 11, 26, 9, tzinfo=UTC)


def otlp_turn(
    n: int, *, conversation: str = "conv-1", complete: bool = True, revision: int = 1
) -> Trace:
    """An assembled OTLP turn: it started at second n; it ended in the reverse order."""
    return Trace.model_validate(
        {
            "trace_id": f"{(n * 7919) % 1000:04d}-t{n}",  # ids do not sort like the starts
            "timestamp": (START + timedelta(seconds=100 - n)).isoformat(),
            "conversation_id": conversation,
            "agent": "bot",
            "query": f"What does plan {n} cost?",
            "contexts": [{"id": f"d{n}", "text": f"Plan {n} costs {n} dollars a month."}],
            "answer": f"Plan {n} costs {n} dollars a month.",
            "metadata": {"source": "otlp"},
            "assembly": {"start_ns": start_ns(n), "complete": complete, "revision": revision},
        }
    )


def start_ns(n: int) -> int:
    return int((START + timedelta(seconds=n)).timestamp()) * 1_000_000_000


@asynccontextmanager
async def scoring(
    db: Path, registry: CollectorRegistry | None = None
) -> AsyncIterator[ScoringStage]:
    settings = Settings.model_validate(
        {"store": {"url": f"sqlite+aiosqlite:///{db}"}, "results": {"topic": None}}
    )
    async with AsyncExitStack() as stack:
        stage = await build_scoring_stage(settings, Metrics(registry), stack, None)
        yield stage


def stored_turns(db: Path) -> dict[int, str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT turn, trace_id FROM conversation_turns").fetchall()
    turns = dict(rows)
    assert len(turns) == len(rows)
    return turns


def stored_result_turns(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT trace_id, turn, result FROM evaluation_results").fetchall()
    for trace_id, turn, result in rows:
        assert json.loads(result)["turn"] == turn, f"{trace_id}: column and document disagree"
    return {trace_id: turn for trace_id, turn, _ in rows}


def expected(traces: list[Trace]) -> dict[int, str]:
    ordered = sorted(traces, key=lambda t: (t.assembly and t.assembly.start_ns, t.trace_id))
    return {turn: t.trace_id for turn, t in enumerate(ordered, start=1)}


async def test_twenty_turns_processed_at_once_are_numbered_by_start(tmp_path: Path) -> None:
    """The issue's race: 32 workers, one conversation, every turn released in the same tick."""
    traces = [otlp_turn(n) for n in range(1, 21)]
    random.Random(3).shuffle(traces)
    db = tmp_path / "r.db"
    async with scoring(db) as stage:
        await asyncio.gather(*(stage.processor.process(t) for t in traces))
    assert stored_turns(db) == expected(traces)
    by_trace = {trace_id: turn for turn, trace_id in expected(traces).items()}
    assert stored_result_turns(db) == by_trace, "results carry the turn"


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    order=st.permutations(list(range(1, 9))),
    cuts=st.lists(st.integers(1, 8), max_size=4),
    again=st.lists(st.integers(1, 8), max_size=3),
    restart_at=st.integers(0, 8),
)
def test_the_numbers_do_not_depend_on_arrival_batching_redelivery_or_restarts(
    tmp_path_factory: Any,
    order: list[int],
    cuts: list[int],
    again: list[int],
    restart_at: int,
) -> None:
    db = tmp_path_factory.mktemp("order") / "r.db"
    arrivals = [otlp_turn(n) for n in order] + [otlp_turn(n) for n in again]  # re-deliveries
    bounds = sorted({0, len(arrivals), *(c for c in cuts if c < len(arrivals))})
    batches = [arrivals[a:b] for a, b in itertools.pairwise(bounds)]

    async def run() -> None:
        done = 0
        stage_cm = scoring(db)
        stage = await stage_cm.__aenter__()
        for batch in batches:
            if done >= restart_at > 0:  # another replica takes over: state from the store
                await stage_cm.__aexit__(None, None, None)
                stage_cm = scoring(db)
                stage = await stage_cm.__aenter__()
            await asyncio.gather(*(stage.processor.process(t) for t in batch))
            done += len(batch)
        await stage_cm.__aexit__(None, None, None)

    asyncio.run(run())
    traces = [otlp_turn(n) for n in range(1, 9)]
    assert stored_turns(db) == expected(traces)
    assert stored_result_turns(db) == {t: n for n, t in expected(traces).items()}


async def test_a_turn_that_started_earlier_but_arrives_later_moves_the_later_ones_up(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    registry = CollectorRegistry()
    first, second, third = otlp_turn(1), otlp_turn(2), otlp_turn(3)
    async with scoring(db, registry) as stage:
        await stage.processor.process(first)
        await stage.processor.process(third)
        assert stored_turns(db) == {1: first.trace_id, 2: third.trace_id}
        await stage.processor.process(second)  # started before the third, scored after it
    assert stored_turns(db) == {1: first.trace_id, 2: second.trace_id, 3: third.trace_id}
    assert stored_result_turns(db)[third.trace_id] == 3
    assert registry.get_sample_value("ragmon_conversation_turns_renumbered_total") == 1.0
    with sqlite3.connect(db) as conn:
        drift = dict(conn.execute("SELECT trace_id, drift FROM conversation_turns").fetchall())
    assert drift[first.trace_id] is None and drift[third.trace_id] == 0.0


@pytest.mark.parametrize("again", [False, True], ids=["new-turn", "redelivered-turn"])
async def test_turn_rows_and_results_left_disagreeing_are_repaired_together_on_load(
    tmp_path: Path, again: bool
) -> None:
    """Two writers during a rebalance can leave a conversation's turn rows and results
    numbered apart: the load checks both, and the conversation's next step (a new turn, or a
    re-delivered one) rewrites every misplaced row and result in one transaction."""
    db = tmp_path / "r.db"
    traces = [otlp_turn(n) for n in (1, 2, 3)]
    async with scoring(db) as stage:
        for trace in traces:
            await stage.processor.process(trace)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE conversation_turns SET turn = 9 WHERE trace_id = ?", [traces[2].trace_id]
        )
        conn.execute(  # the row is right, its result is not
            "UPDATE evaluation_results SET turn = 5 WHERE trace_id = ?", [traces[1].trace_id]
        )
    registry = CollectorRegistry()
    latest = otlp_turn(4)
    async with scoring(db, registry) as stage:
        await stage.processor.process(traces[0] if again else latest)
    everything = traces if again else [*traces, latest]
    assert stored_turns(db) == expected(everything)
    assert stored_result_turns(db) == {t: n for n, t in expected(everything).items()}
    assert registry.get_sample_value("ragmon_conversation_turns_renumbered_total") == 2.0


async def test_a_producers_turn_wins_over_the_start(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    late_start = otlp_turn(9).model_copy(update={"turn": 1})
    early_start = otlp_turn(1).model_copy(update={"turn": 2})
    async with scoring(db) as stage:
        await stage.processor.process(early_start)
        await stage.processor.process(late_start)
    assert stored_turns(db) == {1: late_start.trace_id, 2: early_start.trace_id}


async def test_one_conversation_waits_while_others_run(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    async with scoring(db) as stage:
        tracker = stage.tracker
        async with tracker.turn(otlp_turn(1)) as held:
            assert held is not None and held.number == 1
            other = asyncio.create_task(stage.processor.process(otlp_turn(1, conversation="c2")))
            same = asyncio.create_task(stage.processor.process(otlp_turn(2)))
            await asyncio.wait_for(other, 10)  # a different conversation is not held up
            await asyncio.sleep(0.2)
            assert not same.done(), "the conversation's next turn waits for this one"
        await asyncio.wait_for(same, 10)


async def test_a_failed_turn_gives_its_number_back(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    async with scoring(db) as stage:
        try:
            async with stage.tracker.turn(otlp_turn(1)):
                raise RuntimeError("evaluator crashed")
        except RuntimeError:
            pass
        await stage.processor.process(otlp_turn(2))
    assert stored_turns(db) == {1: otlp_turn(2).trace_id}


async def test_a_revision_is_upserted_without_counting_the_metrics_again(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    registry = CollectorRegistry()
    incomplete = otlp_turn(1, complete=False)
    revised = otlp_turn(1, revision=2).model_copy(update={"answer": "Plan 1 costs 1 dollars."})
    async with scoring(db, registry) as stage:
        await stage.processor.process(incomplete)
        await stage.processor.process(revised)
        result = (
            await stage.store.get_result(incomplete.trace_id, "heuristic") if stage.store else None
        )
    assert result is not None and result.turn == 1
    assert "incomplete_trace" not in result.flags, "the revision replaced the incomplete result"
    count = registry.get_sample_value(
        "ragmon_evaluations_total", {"agent": "bot", "evaluator": "heuristic", "outcome": "ok"}
    )
    assert count == 1.0, "counted once"
    flags = registry.get_sample_value(
        "ragmon_evaluation_flags_total", {"agent": "bot", "reason": "incomplete_trace"}
    )
    assert flags == 1.0
    assert stored_turns(db) == {1: incomplete.trace_id}


async def test_a_fragment_never_overwrites_a_trace_scored_whole(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    registry = CollectorRegistry()
    whole = otlp_turn(1)
    fragment = otlp_turn(1, complete=False).model_copy(update={"contexts": []})
    async with scoring(db, registry) as stage:
        await stage.processor.process(whole)
        await stage.processor.process(fragment)
        assert stage.store is not None
        result = await stage.store.get_result(whole.trace_id, "heuristic")
    assert result is not None and result.flags == [] and result.scores["faithfulness"].value == 1.0
    skipped = registry.get_sample_value(
        "ragmon_traces_skipped_total", {"reason": "otlp_late_spans"}
    )
    assert skipped == 1.0


def test_turn_rows_know_how_they_were_numbered(tmp_path: Path) -> None:
    db = tmp_path / "r.db"

    async def run() -> None:
        async with scoring(db) as stage:
            await stage.processor.process(otlp_turn(1))
            await stage.processor.process(otlp_turn(2).model_copy(update={"turn": 2}))

    asyncio.run(run())
    with sqlite3.connect(db) as conn:
        details = {
            t: json.loads(d)
            for t, d in conn.execute(f"SELECT turn, detail FROM {turns_table.name}")
        }
    assert "start_us" in details[1] and "start_us" not in details[2]
