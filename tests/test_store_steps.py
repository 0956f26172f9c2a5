"""The store's writes: whose fault a failure is, steps written all or nothing, and the schema
migration that keys conversation turns by trace (issue 21).

Real databases throughout: SQLite files, the shared PostgreSQL server (a database of the test's
own), and a TCP proxy between the store and PostgreSQL to take the database away mid-write.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import event, text
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from monitor.faults import WorkAbandoned
from monitor.models import EvaluationResult, Score
from monitor.retry import RetryMetrics
from monitor.sinks.store import (
    KeyConflict,
    Store,
    StoreRejected,
    Upsert,
    results_table,
    turns_table,
)
from monitor.sinks.store_faults import classify, sqlstate
from tests.support.tcp_proxy import TcpProxy


def _result(trace_id: str, query: str = "q") -> tuple[EvaluationResult, str]:
    result = EvaluationResult(
        trace_id=trace_id,
        timestamp=datetime(2026, 11, 26, tzinfo=UTC),
        evaluator="heuristic",
        scores={"faithfulness": Score.of(1.0)},
    )
    return result, query


def _turn(trace_id: str, conversation: str, turn: int) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "conversation_id": conversation,
        "turn": turn,
        "agent": "a",
        "timestamp": datetime(2026, 11, 26, tzinfo=UTC),
        "evaluator": "heuristic",
        "hallucination": None,
        "drift": None,
        "memory_tokens": None,
        "detail": "{}",
    }


def _result_row(trace_id: str) -> dict[str, Any]:
    from monitor.sinks.store import result_row

    result, query = _result(trace_id)
    return result_row(result, query, "a", datetime.now(UTC))


async def _trace_ids(store: Store, table: Any) -> set[str]:
    return {row["trace_id"] for row in await store.select_rows(table)}


# ------------------------------------------------------------------------------ classification


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), "store"),  # 57P01
        (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), "store"),
        (asyncpg.exceptions.ConnectionDoesNotExistError("closed mid-operation"), "store"),  # 08003
        (asyncpg.exceptions.ReadOnlySQLTransactionError("read-only transaction"), "store"),  # 25006
        (asyncpg.exceptions.SerializationError("could not serialize"), "store"),  # 40001
        (asyncpg.exceptions.TooManyConnectionsError("too many clients"), "store"),  # 53300
        (asyncpg.exceptions.UndefinedTableError("no such table"), "store"),  # 42P01
        (asyncpg.exceptions.CharacterNotInRepertoireError("NUL"), "data"),  # 22021
        (asyncpg.exceptions.NumericValueOutOfRangeError("out of range"), "data"),  # 22003
        (asyncpg.exceptions.UniqueViolationError("duplicate key"), "data"),  # 23505
        (asyncpg.exceptions.DataError("invalid input for query argument $1"), "data"),
        (asyncpg.exceptions.InterfaceError("connection is closed"), "store"),
        (ConnectionRefusedError(111, "refused"), "store"),
        (TimeoutError(), "store"),
        (sqlite3.OperationalError("database is locked"), "store"),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), "data"),
        (OverflowError("Python int too large to convert to SQLite INTEGER"), "data"),
        (AttributeError("a bug"), "other"),
        (asyncio.CancelledError(), "other"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else value,
)
def test_a_failure_is_the_data_s_fault_only_by_sqlstate_class_or_unbindable_value(
    error: BaseException, fault: str
) -> None:
    assert classify(error) == fault
    if isinstance(error, Exception):  # the same, wrapped the way SQLAlchemy wraps it
        wrapped = DBAPIError("INSERT ...", {}, error)
        wrapped.__cause__ = error
        assert classify(wrapped) == (fault if fault != "other" else "store")


async def test_a_session_ended_by_the_server_is_the_store_s_fault(postgres_url: str) -> None:
    """What `pg_ctl stop -m fast` does to every session (57P01, admin_shutdown), here to one."""
    engine = create_async_engine(postgres_url)
    try:
        with pytest.raises(DBAPIError) as ended:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        with pytest.raises(DBAPIError) as nul:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT CAST(:v AS text)"), {"v": "a\x00b"})
    finally:
        await engine.dispose()
    codes, cause = set(), ended.value.__cause__
    while cause is not None:
        codes.add(getattr(cause, "sqlstate", None))
        cause = cause.__cause__
    assert "57P01" in codes, codes
    assert classify(ended.value) == "store"
    assert sqlstate(nul.value) == "22021" and classify(nul.value) == "data"


def test_sqlite_s_own_errors_are_classified_from_a_real_database(tmp_path: Path) -> None:
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with pytest.raises(IntegrityError) as duplicate, engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with pytest.raises(OperationalError) as missing, engine.begin() as conn:
        conn.execute(text("SELECT * FROM missing"))
    engine.dispose()
    assert classify(duplicate.value) == "data"
    assert classify(missing.value) == "store", "a broken store is not the trace's fault"


# ---------------------------------------------------------------------------------- steps


async def _a_step_is_written_all_or_nothing(store_url: str) -> None:
    """A step claiming a trace id another conversation has fails whole (none of its rows are
    written); the other steps of its batch are written, the trace's owner's too."""
    store = await Store.open(store_url)
    try:
        await store.write([Upsert(turns_table, _turn("t1", "A", 1), owner="conversation_id")])
        outcomes = await asyncio.gather(
            store.write(  # conversation B claims t1: its other rows must not be written either
                [
                    Upsert(turns_table, _turn("t2", "B", 1), owner="conversation_id"),
                    Upsert(turns_table, _turn("t1", "B", 2), owner="conversation_id"),
                    Upsert(results_table, _result_row("t2")),
                ]
            ),
            store.write([Upsert(turns_table, _turn("t3", "C", 1), owner="conversation_id")]),
            store.write([Upsert(turns_table, _turn("t1", "A", 3), owner="conversation_id")]),
            return_exceptions=True,
        )
        assert isinstance(outcomes[0], KeyConflict) and list(outcomes[1:]) == [None, None]
        rows = {r["trace_id"]: r for r in await store.select_rows(turns_table)}
        assert {t: (r["conversation_id"], r["turn"]) for t, r in rows.items()} == {
            "t1": ("A", 3),
            "t3": ("C", 1),
        }
        assert await _trace_ids(store, results_table) == set()
    finally:
        await store.close()


async def test_sqlite_writes_a_step_all_or_nothing(tmp_path: Path) -> None:
    await _a_step_is_written_all_or_nothing(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")


async def test_postgresql_writes_a_step_all_or_nothing(postgres_url: str) -> None:
    await _a_step_is_written_all_or_nothing(postgres_url)


async def test_a_step_whose_trace_moved_to_another_replica_is_not_written(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    try:
        with pytest.raises(WorkAbandoned):
            await store.write([Upsert(results_table, _result_row("gone"))], owned=lambda: False)
        await store.write([Upsert(results_table, _result_row("ours"))], owned=lambda: True)
        assert await _trace_ids(store, results_table) == {"ours"}
    finally:
        await store.close()


async def test_a_batch_the_database_refuses_is_written_step_by_step_through_an_outage(
    postgres_url: str,
) -> None:
    """A NUL character (22021) fails its batch; while the steps are written one by one the
    database goes away for a second. Only the step with the NUL fails; the others wait for the
    database and are written (before issue 21 they failed with `StoreError`, and their traces
    were dead-lettered)."""
    url = make_url(postgres_url)
    registry = CollectorRegistry()
    async with TcpProxy(url.port or 5432, target_host=url.host or "127.0.0.1") as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        store = await Store.open(proxied, retry_metrics=RetryMetrics.of(registry))
        loop = asyncio.get_running_loop()
        outages: list[float] = []

        @event.listens_for(store._engine.sync_engine, "handle_error")
        def take_the_database_away(context: ExceptionContext) -> None:
            if not outages and sqlstate(context.original_exception) == "22021":
                outages.append(loop.time())
                proxy.cut()
                loop.call_later(1.0, proxy.resume)

        try:
            good, bad, other = _result("good"), _result("bad", "a\x00b"), _result("other")
            outcomes = await asyncio.gather(
                store.save(*good),
                store.save(*bad),
                store.save(*other),
                return_exceptions=True,
            )
            stored = await _trace_ids(store, results_table)
        finally:
            await store.close()
    assert outages, "the batch met the NUL"
    assert outcomes[0] is None and outcomes[2] is None, outcomes
    assert isinstance(outcomes[1], StoreRejected) and outcomes[1].reason == "store_rejected"
    assert stored == {"good", "other"}
    retries = registry.get_sample_value("ragmon_retries_total", {"operation": "store"})
    assert retries is not None and retries > 0


# ------------------------------------------------------------------------------- migration


async def _migrates_turns_to_one_row_per_trace(url: str) -> None:
    """A version 2 database (turn rows keyed by conversation and turn, one trace holding two
    rows after an interrupted renumbering) keeps one row per trace, its highest turn."""
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE conversation_turns (conversation_id VARCHAR(256) NOT NULL,"
                " turn INTEGER NOT NULL, trace_id VARCHAR(256), agent VARCHAR(128),"
                " timestamp TIMESTAMP, evaluator VARCHAR(32), hallucination FLOAT, drift FLOAT,"
                " memory_tokens INTEGER, detail TEXT NOT NULL,"
                " PRIMARY KEY (conversation_id, turn))"
            )
        )
        await conn.execute(
            text("CREATE INDEX ix_conversation_turns_agent ON conversation_turns (agent)")
        )
        await conn.execute(text("CREATE TABLE ragmon_schema (version INTEGER NOT NULL)"))
        await conn.execute(text("INSERT INTO ragmon_schema (version) VALUES (1), (2)"))
        for conversation, turn, trace_id in (("c", 1, "a"), ("c", 2, "b"), ("c", 3, "b")):
            await conn.execute(
                text(
                    "INSERT INTO conversation_turns (conversation_id, turn, trace_id, agent,"
                    " evaluator, detail) VALUES (:c, :n, :t, 'x', 'heuristic', '{}')"
                ),
                {"c": conversation, "n": turn, "t": trace_id},
            )
    await engine.dispose()
    store = await Store.open(url)
    try:
        rows = await store.select_rows(turns_table)
        assert sorted((r["trace_id"], r["turn"]) for r in rows) == [("a", 1), ("b", 3)]
        with pytest.raises(KeyConflict):  # keyed by trace now, guarded by conversation
            await store.write(
                [Upsert(turns_table, _turn("a", "other", 1), owner="conversation_id")]
            )
    finally:
        await store.close()
    reopened = await Store.open(url)  # a second start does not migrate again
    await reopened.close()


async def test_sqlite_store_keys_turn_rows_by_trace(tmp_path: Path) -> None:
    await _migrates_turns_to_one_row_per_trace(f"sqlite+aiosqlite:///{tmp_path / 'v2.db'}")


async def test_postgresql_store_keys_turn_rows_by_trace(postgres_url: str) -> None:
    await _migrates_turns_to_one_row_per_trace(postgres_url)
