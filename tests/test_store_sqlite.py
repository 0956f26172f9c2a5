"""The store's SQLite upserts (`monitor/sinks/store_sqlite.py`): the rows it writes as tuples in
one multi-row statement are stored exactly as SQLAlchemy's own compiled upsert stores them, and
a group commit larger than one statement, with a row of another owner in it, is written whole
but for that row's step; the driver's errors are the store's or the data's as through
SQLAlchemy. Real SQLite files.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import create_async_engine

from monitor.sinks import store_sqlite
from monitor.sinks.store import KeyConflict, Store, Upsert, metadata, results_table, turns_table
from monitor.sinks.store_faults import classify
from monitor.sinks.store_sqlite import SqliteUpsert

MOMENT = datetime(2026, 11, 26, 9, 30, 15, 123456, tzinfo=UTC)


def _turn(trace_id: str, conversation: str, turn: int, **values: Any) -> dict[str, Any]:
    row = {
        "trace_id": trace_id,
        "conversation_id": conversation,
        "turn": turn,
        "agent": "a",
        "timestamp": MOMENT,
        "evaluator": "heuristic",
        "hallucination": None,
        "drift": None,
        "memory_tokens": None,
        "detail": "{}",
    }
    return row | values


def _result(trace_id: str, **values: Any) -> dict[str, Any]:
    row = {
        "trace_id": trace_id,
        "evaluator": "heuristic",
        "conversation_id": "c",
        "turn": 1,
        "agent": "a",
        "timestamp": MOMENT,
        "scored_at": MOMENT + timedelta(seconds=2),
        "faithfulness": 0.5,
        "answer_relevancy": None,
        "context_precision": 1,
        "query": "q",
        "answer": "a",
        "result": '{"trace_id": "x"}',
    }
    return row | values


# Each value kind the tables hold: datetimes aware in UTC and in another zone, naive, on a
# whole second; integers in float columns; None; text beyond ASCII; a re-written key.
STEPS: list[list[tuple[Table, dict[str, Any]]]] = [
    [(turns_table, _turn("t1", "c1", 1)), (results_table, _result("t1"))],
    [
        (turns_table, _turn("t2", "c1", 2, hallucination=1, drift=0.25, memory_tokens=512)),
        (
            results_table,
            _result(
                "t2",
                timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=9))),
                scored_at=datetime(2026, 1, 2, 3, 4, 5),
                faithfulness=0,
                query="日本語の質問 ✓",
                answer=None,
            ),
        ),
    ],
    [(turns_table, _turn("t3", "c2", 1, timestamp=None, agent=None, detail="x" * 5000))],
    [(turns_table, _turn("t1", "c1", 3, evaluator="llm")), (results_table, _result("t1", turn=3))],
]


def _upserts(step: list[tuple[Table, dict[str, Any]]]) -> list[Upsert]:
    return [
        Upsert(t, row, owner="conversation_id" if t is turns_table else None) for t, row in step
    ]


async def _through_store(path: Path) -> None:
    async with await Store.open(f"sqlite+aiosqlite:///{path}") as store:
        # one group commit of three steps, then one re-writing a key
        await asyncio.gather(*(store.write(_upserts(step)) for step in STEPS[:3]))
        await store.write(_upserts(STEPS[3]))


async def _through_sqlalchemy(path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        for step in STEPS:
            for table, row in step:
                keys = [c.name for c in table.primary_key.columns]
                stmt = sqlite_insert(table)
                updated = {
                    c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys
                }
                await conn.execute(
                    stmt.on_conflict_do_update(index_elements=keys, set_=updated), row
                )
    await engine.dispose()


def _stored(path: Path, table: Table) -> list[tuple[Any, ...]]:
    columns = [c.name for c in table.columns]
    listed = ", ".join([f'"{c}"' for c in columns] + [f'typeof("{c}")' for c in columns])
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT {listed} FROM {table.name} ORDER BY trace_id").fetchall()


async def test_sqlite_stores_every_value_as_sqlalchemy_s_own_upsert_does(tmp_path: Path) -> None:
    await _through_store(tmp_path / "store.db")
    await _through_sqlalchemy(tmp_path / "sqlalchemy.db")
    for table in (turns_table, results_table):
        stored = _stored(tmp_path / "store.db", table)
        assert stored == _stored(tmp_path / "sqlalchemy.db", table)
        assert stored, table.name
    turns = {row[0]: row for row in _stored(tmp_path / "store.db", turns_table)}
    assert turns["t1"][2] == 3 and turns["t1"][4] == "2026-11-26 09:30:15.123456"
    assert turns["t2"][6:9] == (1.0, 0.25, 512) and turns["t2"][16] == "real"


async def test_a_commit_of_several_statements_fails_only_the_step_of_another_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_sqlite, "MAX_PARAMETERS", 25)  # two rows a statement
    async with await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}") as store:
        await store.write([Upsert(turns_table, _turn("taken", "A", 1), owner="conversation_id")])

        def step(trace_id: str, conversation: str) -> list[Upsert]:
            return [
                Upsert(turns_table, _turn(trace_id, conversation, 1), owner="conversation_id"),
                Upsert(results_table, _result(trace_id, conversation_id=conversation)),
            ]

        writes = [step(f"t{n}", f"c{n}") for n in range(7)]
        writes.insert(4, step("taken", "B"))  # its key is A's: this step alone fails
        outcomes = await asyncio.gather(*(store.write(w) for w in writes), return_exceptions=True)
    failed = [o for o in outcomes if o is not None]
    assert len(failed) == 1 and isinstance(failed[0], KeyConflict)
    assert outcomes[4] is failed[0] and failed[0].key == ("taken",)
    turns = {row[0]: row[1] for row in _stored(tmp_path / "r.db", turns_table)}
    assert turns == {"taken": "A", **{f"t{n}": f"c{n}" for n in range(7)}}
    results = {row[0] for row in _stored(tmp_path / "r.db", results_table)}
    assert results == {f"t{n}" for n in range(7)}


async def test_a_closed_driver_connection_is_the_store_s_fault_a_bad_text_the_data_s(
    tmp_path: Path,
) -> None:
    """aiosqlite says its connection is closed with a ValueError, and a text SQLite cannot
    encode is a UnicodeEncodeError (a ValueError too): the first is retried as the store's
    fault, the second dead-letters its trace (`store_faults.classify`)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    async with await Store.open(url):
        pass  # the schema
    engine = create_async_engine(url)
    upsert = SqliteUpsert.of(results_table, sqlite_insert(results_table), None, engine.dialect)
    try:
        async with engine.connect() as conn:
            with pytest.raises(ValueError) as bad_text:
                await upsert.write(conn, [_result("t1", query="\ud800")])
            assert classify(bad_text.value) == "data"
            assert await upsert.write(conn, [_result("t1"), _result("t2")]) == 2
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            await driver.close()
            with pytest.raises(sqlite3.OperationalError) as closed:
                await upsert.write(conn, [_result("t3")])
            assert classify(closed.value) == "store"
            await conn.invalidate()
    finally:
        await engine.dispose()
