"""The results store on real SQLite and PostgreSQL: idempotent upserts, migrations, queries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.models import EvaluationResult, Score, StatementVerdict
from monitor.store import Store, sanitized_url


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
    assert [r.trace_id for r, _, _ in worst] == ["t0", "t1", "t3"]
    assert worst[0][1] == "q0", "the question is kept for the review"
    await store.save(_result("old", 0.0, minutes_ago=180))
    await store.save(_result("unmeasured", None))
    recent = await store.worst(datetime.now(UTC) - timedelta(hours=1), limit=100)
    ids = {r.trace_id for r, _, _ in recent}
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
