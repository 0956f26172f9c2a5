"""The results store: SQLAlchemy async over SQLite (default) or PostgreSQL.

One row per (trace_id, evaluator): a re-score overwrites, never duplicates. Writes are grouped:
`save` returns once the row is committed, but many concurrent saves share one transaction, so
a trace is finished (and its offset committable) only after its result is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

import structlog
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    cast,
    exists,
    func,
    or_,
    select,
    text,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from monitor.models import EvaluationResult
from monitor.retry import Backoff, RetryMetrics, RetryPolicy
from monitor.sinks.store_columns import SCORE_COLUMNS as SCORE_COLUMNS
from monitor.windows import TimeBasis

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

metadata = MetaData()

METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


class RankedResult(NamedTuple):
    """A stored result as `worst` ranks it, with its stored question and answer."""

    result: EvaluationResult
    query: str | None
    answer: str | None
    scored_at: datetime | None


results_table = Table(
    "evaluation_results",
    metadata,
    Column("trace_id", String(256), primary_key=True),
    Column("evaluator", String(32), primary_key=True),
    Column("conversation_id", String(256), index=True),
    Column("turn", Integer),
    Column("agent", String(128), index=True),
    Column("timestamp", DateTime(timezone=True), index=True),
    # When the result was (last) written: `review --since` counts from here, so a replay of
    # old traces is found right after it ran.
    Column("scored_at", DateTime(timezone=True), index=True),
    Column("faithfulness", Float),
    Column("answer_relevancy", Float),
    Column("context_precision", Float),
    Column("query", Text),
    Column("answer", Text),
    Column("result", Text, nullable=False),
)

conversation_state_table = Table(
    "conversation_state",
    metadata,
    Column("conversation_id", String(256), primary_key=True),
    Column("partition_key", String(300), index=True),
    Column("agent", String(128)),
    Column("updated_at", DateTime(timezone=True), index=True),
    Column("state", Text, nullable=False),
)

turns_table = Table(
    "conversation_turns",
    metadata,
    Column("conversation_id", String(256), primary_key=True),
    Column("turn", Integer, primary_key=True),
    Column("trace_id", String(256)),
    Column("agent", String(128), index=True),
    Column("timestamp", DateTime(timezone=True), index=True),
    Column("evaluator", String(32)),
    Column("hallucination", Float),
    Column("drift", Float),
    Column("memory_tokens", Integer),
    Column("detail", Text, nullable=False),
)

golden_runs_table = Table(
    "golden_runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("suite", String(128), index=True),
    Column("started_at", DateTime(timezone=True), index=True),
    Column("finished_at", DateTime(timezone=True)),
    Column("outcome", String(16)),
    Column("result", Text, nullable=False),
)

# Each migration moves the schema from version N-1 to N. Version 1 was the first set of tables;
# later versions append DDL here and never edit earlier entries ({timestamp} is the dialect's
# timezone-aware timestamp type). A new database gets the tables above as they are now from
# metadata.create_all, and every version is recorded as applied without running its DDL.
MIGRATIONS: list[list[str]] = [
    [],
    [
        "ALTER TABLE evaluation_results ADD COLUMN scored_at {timestamp}",
        "CREATE INDEX IF NOT EXISTS ix_evaluation_results_scored_at"
        " ON evaluation_results (scored_at)",
    ],
]
SCHEMA_LOCK_KEY = 0x7261676D6F6E  # "ragmon": the PostgreSQL advisory lock of schema changes
MAX_TEXT_CHARS = 4000
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0


def _transient(exc: BaseException) -> bool:
    """Connection trouble (retry) as opposed to a batch the database rejects (give up)."""
    if isinstance(exc, OSError | TimeoutError | OperationalError | InterfaceError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    # asyncpg's connection failures reach SQLAlchemy as a generic DBAPIError: look underneath.
    cause: BaseException | None = exc.orig
    while cause is not None:
        if isinstance(cause, OSError | TimeoutError) or "Connection" in type(cause).__name__:
            return True
        if "connection was closed" in str(cause) or "connection is closed" in str(cause):
            return True
        cause = cause.__cause__
    return False


class StoreError(Exception):
    pass


def sanitized_url(url: str) -> str:
    """The URL with its password hidden, for logs and check-config."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable store url>"


@dataclass
class _Pending:
    table: Table
    row: dict[str, Any]
    done: asyncio.Future[None]


class Store:
    def __init__(
        self,
        engine: AsyncEngine,
        batch_size: int = 500,
        flush_seconds: float = 0.05,
        retry_metrics: RetryMetrics | None = None,
    ):
        self._engine = engine
        self._dialect = engine.dialect.name
        self._batch_size = batch_size
        self._flush_seconds = flush_seconds
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closed = False
        self.unavailable_since: float | None = None
        # Unbounded: while the database is away, traces stay unfinished rather than lost.
        self._retry = RetryPolicy(
            "store",
            Backoff(RETRY_MIN_SECONDS, RETRY_MAX_SECONDS),
            retry_on=self._retryable,
            metrics=retry_metrics,
            on_retry=self._unavailable,
        )

    @classmethod
    async def open(cls, url: str, **kwargs: Any) -> Store:
        """Connect, create or migrate the schema, and start the group-commit writer."""
        if url.startswith("sqlite"):
            engine = create_async_engine(url, connect_args={"timeout": 30})
        else:
            engine = create_async_engine(url, pool_pre_ping=True)
        store = cls(engine, **kwargs)
        await store._migrate()
        store._writer = asyncio.create_task(store._write_loop())
        log.info("store opened", url=sanitized_url(url))
        return store

    async def _migrate(self) -> None:
        """Create or migrate the schema, one process at a time.

        Replicas starting together on a fresh database (two pods of one deployment) would both
        see no schema and both create it; the loser's CREATE TABLE fails. So the whole check
        and DDL run in one transaction that holds the database's schema lock first: on
        PostgreSQL a transaction-level advisory lock (released at commit), on SQLite a write
        lock taken at BEGIN IMMEDIATE (the driver would otherwise run each DDL statement in a
        transaction of its own). The second process waits, then finds the schema current.
        """
        timestamp = DateTime(timezone=True).compile(dialect=self._engine.dialect)
        if self._dialect == "sqlite":
            async with self._engine.connect() as conn:  # not inside a transaction
                await conn.exec_driver_sql("PRAGMA journal_mode=WAL")
                await conn.commit()
        async with self._engine.begin() as conn:
            if self._dialect == "sqlite":
                await conn.exec_driver_sql("BEGIN IMMEDIATE")
            elif self._dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY}
                )
            await conn.execute(
                text("CREATE TABLE IF NOT EXISTS ragmon_schema (version INTEGER NOT NULL)")
            )
            current = (await conn.execute(text("SELECT max(version) FROM ragmon_schema"))).scalar()
            version = int(current or 0)
            if version == 0:
                # A new database: the tables are created as they are now.
                await conn.run_sync(metadata.create_all)
                version = len(MIGRATIONS)
                await conn.execute(
                    text("INSERT INTO ragmon_schema (version) VALUES (:v)"), {"v": version}
                )
            for number, statements in enumerate(MIGRATIONS, start=1):
                if number <= version:
                    continue
                for statement in statements:
                    await conn.execute(text(statement.format(timestamp=timestamp)))
                await conn.execute(
                    text("INSERT INTO ragmon_schema (version) VALUES (:v)"), {"v": number}
                )
            # Tables added since (none yet beyond the migrations) are created if missing.
            await conn.run_sync(metadata.create_all)

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        if self._writer is not None:
            await self._writer
        await self._engine.dispose()

    # ----------------------------------------------------------------------------- results

    async def save(
        self,
        result: EvaluationResult,
        query: str | None = None,
        answer: str | None = None,
        scored_at: datetime | None = None,
    ) -> None:
        """Upsert one result (scored now, unless `scored_at` says when); returns once it is
        committed."""
        row = _result_row(result, query, answer, scored_at or datetime.now(UTC))
        await self.save_row(results_table, row)

    async def save_row(self, table: Table, row: dict[str, Any]) -> None:
        """Upsert one row by primary key through the group-commit writer."""
        if self._closed:
            raise StoreError("store is closed")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(table, row, done))
        if len(self._queue) >= self._batch_size:
            self._wakeup.set()
        await done

    async def _write_loop(self) -> None:
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self._flush_seconds)
                continue
            batch = self._queue[: self._batch_size]
            try:
                # While the database is away the batch is kept and retried: its traces stay
                # unfinished, so reading waits instead of dead-lettering good results.
                await self._retrying(functools.partial(self._write, batch))
            except Exception as exc:
                del self._queue[: len(batch)]
                log.warning("store rejected a batch", error=type(exc).__name__, rows=len(batch))
                await self._write_one_by_one(batch)
                continue
            del self._queue[: len(batch)]
            for pending in batch:
                if not pending.done.done():
                    pending.done.set_result(None)
            if not self._queue:
                await asyncio.sleep(self._flush_seconds)

    async def _write_one_by_one(self, batch: list[_Pending]) -> None:
        """After a rejected batch: write its rows singly so one bad row fails only itself."""
        for pending in batch:
            try:
                await self._write([pending])
            except Exception as exc:
                if not pending.done.done():
                    pending.done.set_exception(
                        StoreError(f"store write failed: {type(exc).__name__}")
                    )
            else:
                if not pending.done.done():
                    pending.done.set_result(None)

    async def _write(self, batch: list[_Pending]) -> None:
        async with self._engine.begin() as conn:
            by_table: dict[str, tuple[Table, list[dict[str, Any]]]] = {}
            for pending in batch:
                by_table.setdefault(pending.table.name, (pending.table, []))[1].append(pending.row)
            for table, rows in by_table.values():
                await self._upsert(conn, table, rows)

    async def _upsert(
        self, conn: AsyncConnection, table: Table, rows: Sequence[dict[str, Any]]
    ) -> None:
        keys = [c.name for c in table.primary_key.columns]
        # The same key twice in one statement is an error on PostgreSQL: keep the last.
        unique = list({tuple(r[k] for k in keys): r for r in rows}.values())
        insert = pg_insert if self._dialect == "postgresql" else sqlite_insert
        stmt = insert(table)
        updated = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys}
        # executemany form: one cached compiled statement, batched by SQLAlchemy's
        # "insertmanyvalues"; .values(rows) compiled a new statement for every batch.
        await conn.execute(stmt.on_conflict_do_update(index_elements=keys, set_=updated), unique)

    async def get_result(self, trace_id: str, evaluator: str) -> EvaluationResult | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(results_table.c.result).where(
                        results_table.c.trace_id == trace_id,
                        results_table.c.evaluator == evaluator,
                    )
                )
            ).first()
        return EvaluationResult.model_validate_json(row[0]) if row else None

    async def count_results(self) -> int:
        async with self._engine.connect() as conn:
            return int(
                (await conn.execute(text("SELECT count(*) FROM evaluation_results"))).scalar() or 0
            )

    async def worst(
        self,
        since: datetime,
        metric: str = "faithfulness",
        agent: str | None = None,
        limit: int = 20,
        *,
        counted_from: TimeBasis = "trace",
    ) -> list[RankedResult]:
        """The lowest-scoring results by `metric` since a time, worst first (the latest first
        among equal scores); results whose metric is unmeasured are left out.

        A metric of SCORE_COLUMNS is ranked by its indexed column, any other by its value in
        the stored result document. `counted_from` says what `since` counts from: the trace's own
        timestamp, or when the result was scored (rows stored before `scored_at` existed count
        by their trace time).
        """
        value = _metric_value(self._dialect, _checked_metric(metric))
        query = (
            _ranked_rows()
            .where(_since(since, counted_from), value.is_not(None))
            .order_by(value.asc(), results_table.c.timestamp.desc())
            .limit(limit)
        )
        return await self._ranked(query, agent)

    async def _ranked(self, query: Select[Any], agent: str | None) -> list[RankedResult]:
        if agent is not None:
            query = query.where(results_table.c.agent == agent)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            RankedResult(EvaluationResult.model_validate_json(r[0]), r[1], r[2], r[3]) for r in rows
        ]

    async def agents(
        self, since: datetime, *, counted_from: TimeBasis = "trace", limit: int = 200
    ) -> list[str]:
        """The agent names with results since a time (counted as in `worst`), sorted."""
        column = results_table.c.agent
        query = (
            select(column)
            .where(_since(since, counted_from), column.is_not(None))
            .distinct()
            .order_by(column)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [str(r[0]) for r in (await conn.execute(query)).all()]

    async def score_counts(
        self,
        since: datetime,
        metric: str,
        agent: str | None = None,
        *,
        counted_from: TimeBasis = "trace",
    ) -> dict[str | None, int]:
        """How many results since a time have `metric` measured (key None) or unmeasured (key:
        the reason); results without the metric at all (another evaluator's) are not counted."""
        value = _metric_value(self._dialect, _checked_metric(metric))
        reason = _metric_reason(self._dialect, metric)
        query = (
            select(reason, func.count())
            .where(_since(since, counted_from), or_(value.is_not(None), reason.is_not(None)))
            .group_by(reason)
        )
        if agent is not None:
            query = query.where(results_table.c.agent == agent)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        counts: dict[str | None, int] = {}
        for key, count in rows:
            counts[None if key is None else str(key)] = int(count)
        return counts

    async def unmeasured(
        self,
        since: datetime,
        metric: str,
        reason: str,
        agent: str | None = None,
        limit: int = 5,
        *,
        counted_from: TimeBasis = "trace",
    ) -> list[RankedResult]:
        """The latest results since a time whose `metric` is unmeasured for `reason`."""
        value = _metric_value(self._dialect, _checked_metric(metric))
        query = (
            _ranked_rows()
            .where(
                _since(since, counted_from),
                value.is_(None),
                _metric_reason(self._dialect, metric) == reason,
            )
            .order_by(results_table.c.timestamp.desc(), results_table.c.trace_id)
            .limit(limit)
        )
        return await self._ranked(query, agent)

    async def result_extent(
        self, since: datetime, agent: str | None = None, *, counted_from: TimeBasis = "trace"
    ) -> tuple[int, datetime | None]:
        """How many results there are since a time, and when the latest of all was scored (or
        timestamped, by `counted_from`): what an empty window's hint is made of."""
        table = results_table
        moment = (
            table.c.timestamp
            if counted_from == "trace"
            else func.coalesce(table.c.scored_at, table.c.timestamp)
        )
        count = select(func.count()).where(_since(since, counted_from))
        latest = select(func.max(moment))
        if agent is not None:
            count = count.where(table.c.agent == agent)
            latest = latest.where(table.c.agent == agent)
        async with self._engine.connect() as conn:
            n = (await conn.execute(count.select_from(table))).scalar() or 0
            last = (await conn.execute(latest.select_from(table))).scalar()
        return int(n), _as_datetime(last)

    # ---------------------------------------------------------------- generic keyed documents

    async def upsert_rows(self, table: Table, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace rows of one of the store's tables by primary key, at once."""
        if not rows:
            return

        async def write() -> None:
            async with self._engine.begin() as conn:
                await self._upsert(conn, table, rows)

        await self._retrying(write)

    async def select_rows(self, table: Table, **equals: Any) -> list[dict[str, Any]]:
        query = select(table)
        for name, value in equals.items():
            column = table.c[name]
            query = query.where(
                column.in_(value) if isinstance(value, list | set) else column == value
            )

        async def read() -> list[dict[str, Any]]:
            async with self._engine.connect() as conn:
                return [dict(r._mapping) for r in (await conn.execute(query)).all()]

        return await self._retrying(read)

    async def _retrying(self, operation: Callable[[], Awaitable[_T]]) -> _T:
        """Run a direct store call, riding out connection trouble like the write loop does."""
        result = await self._retry.call(operation)
        self.unavailable_since = None
        return result

    def _retryable(self, exc: BaseException) -> bool:
        return _transient(exc) and not self._closed

    def _unavailable(self, _: BaseException) -> None:
        self.unavailable_since = self.unavailable_since or time.monotonic()

    async def delete_rows(self, table: Table, **equals: Any) -> None:
        stmt = table.delete()
        for name, value in equals.items():
            stmt = stmt.where(table.c[name] == value)
        async with self._engine.begin() as conn:
            await conn.execute(stmt)


def _ranked_rows() -> Select[Any]:
    """The columns a RankedResult is made of."""
    table = results_table
    return select(table.c.result, table.c.query, table.c.answer, table.c.scored_at)


def _checked_metric(metric: str) -> str:
    if metric not in SCORE_COLUMNS and not METRIC_NAME.fullmatch(metric):
        raise ValueError(f"unknown metric {metric!r}")
    return metric


def _metric_reason(dialect: str, metric: str) -> ColumnElement[Any]:
    """SQL for why a metric is unmeasured: the reason in the stored result (NULL if measured)."""
    path = ("scores", _checked_metric(metric), "reason")
    reason: ColumnElement[Any]
    if dialect == "postgresql":
        reason = cast(results_table.c.result, JSONB)[path].astext
    else:
        reason = type_coerce(results_table.c.result, JSON)[path].as_string()
    return reason


def _as_datetime(value: Any) -> datetime | None:
    """A timestamp as a query returns it (SQLite: a string, or naive), in UTC."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _metric_value(dialect: str, metric: str) -> ColumnElement[Any]:
    """SQL for a metric's value: its column, or the JSON path into the stored result."""
    if metric in SCORE_COLUMNS:
        return results_table.c[metric]
    path = ("scores", metric, "value")
    value: ColumnElement[Any]
    if dialect == "postgresql":
        value = cast(results_table.c.result, JSONB)[path].astext.cast(Float)
    else:
        value = type_coerce(results_table.c.result, JSON)[path].as_float()
    return value


def _since(since: datetime, counted_from: TimeBasis) -> ColumnElement[bool]:
    """Results at or after `since` by trace time, or by scoring time (falling back to the trace
    time of rows stored before `scored_at` existed)."""
    table = results_table
    if counted_from == "trace":
        return table.c.timestamp >= since
    if counted_from != "scored":
        raise ValueError(f"counted_from must be 'scored' or 'trace', not {counted_from!r}")
    return or_(
        table.c.scored_at >= since,
        and_(table.c.scored_at.is_(None), table.c.timestamp >= since),
    )


def _clip(value: str | None) -> str | None:
    return value[:MAX_TEXT_CHARS] if value is not None else None


def _result_row(
    result: EvaluationResult, query: str | None, answer: str | None, scored_at: datetime
) -> dict[str, Any]:
    def score(name: str) -> float | None:
        entry = result.scores.get(name)
        return entry.value if entry is not None else None

    return {
        "trace_id": result.trace_id,
        "evaluator": result.evaluator,
        "conversation_id": result.conversation_id,
        "turn": result.turn,
        "agent": result.agent,
        "timestamp": result.timestamp,
        "scored_at": scored_at,
        "faithfulness": score("faithfulness"),
        "answer_relevancy": score("answer_relevancy"),
        "context_precision": score("context_precision"),
        "query": _clip(query),
        "answer": _clip(answer),
        "result": result.model_dump_json(),
    }


def _turns_since(since: datetime, counted_from: TimeBasis) -> ColumnElement[bool]:
    """Turns whose trace is timestamped at or after `since`, or was scored then (a result of
    the trace written since: the turn row is written with it)."""
    if counted_from == "trace":
        return turns_table.c.timestamp >= since
    return exists().where(
        results_table.c.trace_id == turns_table.c.trace_id, _since(since, counted_from)
    )


async def turns_since(
    store: Store, since: datetime, *, counted_from: TimeBasis = "trace"
) -> list[dict[str, Any]]:
    """Stored conversation turns since a time: by their traces' timestamps (`counted_from`
    "trace") or by when they were scored ("scored")."""
    query = select(turns_table).where(_turns_since(since, counted_from))
    async with store._engine.connect() as conn:
        return [dict(r._mapping) for r in (await conn.execute(query)).all()]


async def turn_extent(
    store: Store, since: datetime, *, counted_from: TimeBasis = "trace"
) -> tuple[int, datetime | None]:
    """How many turns there are since a time, and when the latest of all was scored (or
    timestamped): what an empty window's hint is made of."""
    count = select(func.count()).select_from(turns_table).where(_turns_since(since, counted_from))
    if counted_from == "trace":
        latest = select(func.max(turns_table.c.timestamp))
    else:
        moment = func.coalesce(results_table.c.scored_at, results_table.c.timestamp)
        latest = select(func.max(moment)).where(
            results_table.c.trace_id.in_(select(turns_table.c.trace_id))
        )
    async with store._engine.connect() as conn:
        n = (await conn.execute(count)).scalar() or 0
        last = (await conn.execute(latest)).scalar()
    return int(n), _as_datetime(last)


class StoreGoldenSink:
    """Keeps each golden-suite run as a row of `golden_runs` (the scheduler's sink)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def save(self, run_result: Any) -> None:
        await self._store.upsert_rows(
            golden_runs_table,
            [
                {
                    "run_id": f"{run_result.suite}-{run_result.started_at.isoformat()}",
                    "suite": run_result.suite,
                    "started_at": run_result.started_at,
                    "finished_at": run_result.finished_at,
                    "outcome": run_result.outcome,
                    "result": run_result.model_dump_json(),
                }
            ],
        )
