"""The results store on real SQLite and PostgreSQL: idempotent upserts, migrations, queries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.models import EvaluationResult, Score, StatementVerdict
from monitor.sinks.store import Store, sanitized_url


def _result(
    trace_id: str,
    faithfulness: float | None,
    evaluator: str = "heuristic",
    agent: str = "a",
    minutes_ago: int = 0,
) -> EvaluationResult:
    score = Score.of(faithfulness) if faithfulness is not None else Score.unmeasured("refusal")
    return EvaluationResult(
        trace_id=trace_id,
        agent=agent,
        evaluator=evaluator,
        timestamp=datetime.now(UTC) - timedelta(minutes=minutes_ago),
        scores={"faithfulness": score},
        statements=[StatementVerdict(statement="It opens at 9.", supported=False)],
    )


async def _exercise(store: Store) -> None:
    await asyncio.gather(
        *(store.save(_result(f"t{i}", i / 10), query=f"q{i}", answer="x") for i in range(10))
    )
    assert await store.count_results() == 10
    # A re-score of the same (trace, evaluator) overwrites; another evaluator adds a row.
    await store.save(_result("t3", 0.99))
    await store.save(_result("t3", 0.15, evaluator="llm"))
    assert await store.count_results() == 11
    stored = await store.get_result("t3", "heuristic")
    assert stored is not None and stored.scores["faithfulness"].value == 0.99
    worst = await store.worst(datetime.now(UTC) - timedelta(hours=1), limit=3)
    assert [r.trace_id for r, *_ in worst] == ["t0", "t1", "t3"]
    assert worst[0][1] == "q0", "the question is kept for the review"
    await store.save(_result("old", 0.0, minutes_ago=180))
    await store.save(_result("unmeasured", None))
    recent = await store.worst(datetime.now(UTC) - timedelta(hours=1), limit=100)
    ids = {r.trace_id for r, *_ in recent}
    assert "old" not in ids, "older than --since"
    assert "unmeasured" not in ids, "an unmeasured score is not a bad score"


async def test_sqlite_store_upserts_and_ranks_the_worst(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        await _exercise(store)
    finally:
        await store.close()
    reopened = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        assert await reopened.count_results() == 13, (
            "rows survive a restart; migration is idempotent"
        )
    finally:
        await reopened.close()


async def test_postgresql_store_upserts_and_ranks_the_worst(postgres_url: str) -> None:
    store = await Store.open(postgres_url)
    try:
        await _exercise(store)
    finally:
        await store.close()


def test_the_store_url_password_is_hidden() -> None:
    shown = sanitized_url("postgresql+asyncpg://monitor:hunter2@db:5432/ragmon")
    assert "hunter2" not in shown and "monitor" in shown


@pytest.mark.parametrize("metric", ["faithfulness", "answer_relevancy", "context_precision"])
async def test_worst_accepts_only_known_metrics(tmp_path: Path, metric: str) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        await store.worst(datetime.now(UTC), metric=metric)
        with pytest.raises(ValueError):
            await store.worst(datetime.now(UTC), metric="trace_id; DROP TABLE x")
    finally:
        await store.close()


async def _migrates_a_version_1_database(url: str) -> None:
    """A database written before `scored_at` existed gains the column (and keeps its rows);
    rows from before the column have none, and the review falls back to their trace time."""
    from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, Text, text
    from sqlalchemy.ext.asyncio import create_async_engine

    old = MetaData()
    Table(
        "evaluation_results",
        old,
        Column("trace_id", String(256), primary_key=True),
        Column("evaluator", String(32), primary_key=True),
        Column("conversation_id", String(256), index=True),
        Column("turn", Integer),
        Column("agent", String(128), index=True),
        Column("timestamp", DateTime(timezone=True), index=True),
        Column("faithfulness", Float),
        Column("answer_relevancy", Float),
        Column("context_precision", Float),
        Column("query", Text),
        Column("answer", Text),
        Column("result", Text, nullable=False),
    )
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(old.create_all)
        await conn.execute(text("CREATE TABLE ragmon_schema (version INTEGER NOT NULL)"))
        await conn.execute(text("INSERT INTO ragmon_schema (version) VALUES (1)"))
        row = _result("before", 0.2)
        await conn.execute(
            text(
                "INSERT INTO evaluation_results (trace_id, evaluator, agent, timestamp,"
                " faithfulness, result) VALUES (:t, 'heuristic', 'a', :ts, 0.2, :r)"
            ),
            {"t": "before", "ts": row.timestamp, "r": row.model_dump_json()},
        )
    await engine.dispose()

    from monitor.review.queries import worst_answers

    store = await Store.open(url)
    try:
        await store.save(_result("after", 0.1, minutes_ago=60 * 24 * 3))
        hour_ago = datetime.now(UTC) - timedelta(hours=1)
        listed = [i.trace_id for i in await worst_answers(store, hour_ago, metric="faithfulness")]
        assert listed == ["after", "before"], "scored just now; the old row by its trace time"
        by_trace_time = [
            i.trace_id
            for i in await worst_answers(store, hour_ago, time="trace", metric="faithfulness")
        ]
        assert by_trace_time == ["before"]
    finally:
        await store.close()
    reopened = await Store.open(url)  # a second start does not migrate again
    await reopened.close()


async def test_sqlite_store_migrates_a_version_1_database(tmp_path: Path) -> None:
    await _migrates_a_version_1_database(f"sqlite+aiosqlite:///{tmp_path / 'v1.db'}")


async def test_postgresql_store_migrates_a_version_1_database(postgres_url: str) -> None:
    await _migrates_a_version_1_database(postgres_url)
