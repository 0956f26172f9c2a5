"""The results store: SQLAlchemy async over SQLite (default) or PostgreSQL.

One row per (trace_id, evaluator): a re-score overwrites, never duplicates. Writes are grouped:
`save` (one result) and `write` (the rows of one processing step, all or none) return once
committed, but many concurrent ones share one transaction, so a trace is finished (and its
offset committable) only after its rows are durable. A failed call is retried while the failure
is the store's (`store_faults`); only what the database refuses as data fails, and only the
step it belongs to.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
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
    func,
    inspect,
    or_,
    select,
    text,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from monitor.faults import DataFault, ServiceFault, WorkAbandoned
from monitor.models import EvaluationResult
from monitor.retry import Backoff, RetryMetrics, RetryPolicy
from monitor.sinks.store_columns import SCORE_COLUMNS as SCORE_COLUMNS
from monitor.sinks.store_faults import classify, read_only
from monitor.sinks.store_sqlite import SqliteUpsert, key_names
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

# One row per trace (a trace is one turn of one conversation): renumbering rewrites a trace's
# row, never another trace's, and a trace id seen under a second conversation cannot take the
# first one's row (`Upsert.owner`).
turns_table = Table(
    "conversation_turns",
    metadata,
    Column("trace_id", String(256), primary_key=True),
    Column("conversation_id", String(256), nullable=False, index=True),
    Column("turn", Integer, nullable=False),
    Column("agent", String(128), index=True),
    Column("timestamp", DateTime(timezone=True), index=True),
    Column("evaluator", String(32)),
    Column("hallucination", Float),
    Column("drift", Float),
    Column("memory_tokens", Integer),
    Column("detail", Text, nullable=False),
)

# The judge's verdicts as it gave them, by trace, task and what it saw (`LLMJudge`): written as
# soon as a verdict arrives, so a trace read again after a crash or a rebalance is not judged
# again, even when its result was never stored.
verdicts_table = Table(
    "judge_verdicts",
    metadata,
    Column("verdict_key", String(200), primary_key=True),
    Column("trace_id", String(256), index=True),
    Column("created_at", DateTime(timezone=True), index=True),
    Column("verdict", Text, nullable=False),
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
MigrationStep = Callable[[AsyncConnection], Awaitable[None]]


async def _turns_keyed_by_trace(conn: AsyncConnection) -> None:
    """Version 3: one turn row per trace (it was one per conversation and turn, so a
    renumbering could leave a trace with two rows, or overwrite another trace's row). Of a
    trace's rows the highest turn is kept; the numbering is checked again when its
    conversation is next loaded."""
    if not await conn.run_sync(lambda sync: inspect(sync).has_table(turns_table.name)):
        return  # created as it is now
    await conn.execute(text("ALTER TABLE conversation_turns RENAME TO conversation_turns_v2"))
    if conn.dialect.name == "postgresql":  # constraint and index names outlive the rename
        await conn.execute(
            text("ALTER TABLE conversation_turns_v2 DROP CONSTRAINT conversation_turns_pkey")
        )
    for index in ("ix_conversation_turns_agent", "ix_conversation_turns_timestamp"):
        await conn.execute(text(f"DROP INDEX IF EXISTS {index}"))
    await conn.run_sync(turns_table.create)
    columns = ", ".join(c.name for c in turns_table.columns)
    await conn.execute(
        text(
            f"INSERT INTO conversation_turns ({columns}) SELECT {columns} FROM"
            " (SELECT *, ROW_NUMBER() OVER (PARTITION BY trace_id ORDER BY turn DESC) AS copy"
            " FROM conversation_turns_v2 WHERE trace_id IS NOT NULL) AS old WHERE copy = 1"
        )
    )
    await conn.execute(text("DROP TABLE conversation_turns_v2"))


# Each migration moves the schema from version N-1 to N. Version 1 was the first set of tables;
# later versions append steps here and never edit earlier entries: DDL ({timestamp} is the
# dialect's timezone-aware timestamp type) or a function of the connection. A new database gets
# the tables above as they are now from metadata.create_all, and every version is recorded as
# applied without running its steps.
MIGRATIONS: list[list[str | MigrationStep]] = [
    [],
    [
        "ALTER TABLE evaluation_results ADD COLUMN scored_at {timestamp}",
        "CREATE INDEX IF NOT EXISTS ix_evaluation_results_scored_at"
        " ON evaluation_results (scored_at)",
    ],
    [_turns_keyed_by_trace],
]
SCHEMA_LOCK_KEY = 0x7261676D6F6E  # "ragmon": the PostgreSQL advisory lock of schema changes
MAX_TEXT_CHARS = 4000
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0


class StoreError(Exception):
    pass


class StoreUnavailable(ServiceFault):
    """The store was closed while a write waited for the database: the trace is unfinished."""


class StoreRejected(DataFault):
    """The database refused a step's rows as data (a value out of range, a NUL character...)."""

    reason = "store_rejected"


class KeyConflict(Exception):
    """A row's key is taken by a row of another owner (`Upsert.owner`): the step was not
    written. `key` is the row's primary key."""

    def __init__(self, table: str, key: tuple[Any, ...]) -> None:
        super().__init__(f"{table} row {key!r} belongs to another owner")
        self.table = table
        self.key = key


@dataclass(frozen=True)
class Upsert:
    """Insert or replace one row by primary key. With `owner` (a column), an existing row is
    replaced only when its `owner` is the same; otherwise the whole step fails with
    `KeyConflict` (checked in the database, so two writers cannot both win)."""

    table: Table
    row: dict[str, Any]
    owner: str | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        return tuple([self.row[name] for name in key_names(self.table)])


@dataclass(frozen=True)
class StoredResult:
    """A result as stored: the document (redacted as configured for the store), the question
    and answer beside it, and when it was scored."""

    result: EvaluationResult
    query: str | None = None
    answer: str | None = None
    scored_at: datetime | None = None

    @property
    def evaluator(self) -> str:
        return self.result.evaluator

    def upsert(self) -> Upsert:
        return Upsert(
            results_table, result_row(self.result, self.query, self.answer, self.scored_at)
        )


async def stored_results_of(conn: AsyncConnection, trace_ids: Sequence[str]) -> list[StoredResult]:
    """Every stored result of these traces, read on `conn`."""
    t = results_table
    query = select(t.c.result, t.c.query, t.c.answer, t.c.scored_at).where(
        t.c.trace_id.in_(list(trace_ids))
    )
    return [
        StoredResult(EvaluationResult.model_validate_json(r[0]), r[1], r[2], r[3])
        for r in (await conn.execute(query)).all()
    ]


def sanitized_url(url: str) -> str:
    """The URL with its password hidden, for logs and check-config."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable store url>"


@dataclass
class _Pending:
    """One step's rows, written all in one transaction (possibly with other steps')."""

    upserts: Sequence[Upsert]
    done: asyncio.Future[None]
    owned: Callable[[], bool] | None = None

    def fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


@dataclass
class _Conflicts(Exception):
    """Steps of a batch whose guarded rows belong to another owner (the batch rolled back)."""

    steps: dict[int, KeyConflict] = field(default_factory=dict)  # id(_Pending) -> conflict


class Store:
    def __init__(
        self,
        engine: AsyncEngine,
        batch_size: int = 500,
        retry_metrics: RetryMetrics | None = None,
    ):
        self._engine = engine
        self._dialect = engine.dialect.name
        self._statements: dict[tuple[str, str | None], Any] = {}
        self._sqlite: dict[tuple[str, str | None], SqliteUpsert] = {}
        self._batch_size = batch_size
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
            for number, steps in enumerate(MIGRATIONS, start=1):
                if number <= version:
                    continue
                for step in steps:
                    if isinstance(step, str):
                        await conn.execute(text(step.format(timestamp=timestamp)))
                    else:
                        await step(conn)
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

    async def __aenter__(self) -> Store:
        """An opened store (`Store.open`) as a context: closed at the end."""
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

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
        row = result_row(result, query, answer, scored_at or datetime.now(UTC))
        await self.save_row(results_table, row)

    async def save_row(self, table: Table, row: dict[str, Any]) -> None:
        """Upsert one row by primary key through the group-commit writer."""
        await self.write([Upsert(table, row)])

    async def write(
        self, upserts: Sequence[Upsert], *, owned: Callable[[], bool] | None = None
    ) -> None:
        """Write one step's rows in one transaction, through the group-commit writer; returns
        once committed. Raises `KeyConflict` (nothing written) when a guarded row belongs to
        another owner, `StoreRejected` when the database refuses the rows as data,
        `WorkAbandoned` when `owned` turned False before they were written (the trace's
        partition went elsewhere), `StoreUnavailable` when the store closed while waiting."""
        if self._closed:
            raise StoreUnavailable("store is closed")
        if not upserts:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(upserts, done, owned))
        self._wakeup.set()
        await done

    async def _write_loop(self) -> None:
        """Group commit without a timer: a transaction starts as soon as a step is queued, and
        the steps queued while it runs make the next one. A busy store writes large batches
        (up to `batch_size`), an idle one does not make its writers wait."""
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                await asyncio.sleep(0)  # the steps ready to queue in this turn of the loop join
                continue
            batch = self._queue[: self._batch_size]
            del self._queue[: len(batch)]
            await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        """Write the steps in one transaction, retried while the database is away. Steps with a
        key conflict fail alone (the rest are written without them); a batch the database
        refuses is written step by step, so a bad step fails only itself."""
        contested = _contested(batch)
        pending = [step for step in batch if id(step) not in contested]
        for step in batch:
            if id(step) in contested:
                self._queue.insert(0, step)  # the next batch, after this one is written
        while pending:
            try:
                await self._retrying(functools.partial(self._write_steps, pending))
            except _Conflicts as conflicts:
                for step in pending:
                    if id(step) in conflicts.steps:
                        step.fail(conflicts.steps[id(step)])
                pending = [p for p in pending if not p.done.done()]
                continue
            except ServiceFault as exc:  # the store closed while the database was away
                for step in pending:
                    step.fail(exc)
                return
            except Exception as exc:
                if len(pending) > 1:
                    log.warning("store rejected a batch", error=type(exc).__name__, rows=len(batch))
                    for step in pending:
                        await self._commit([step])
                    return
                pending[0].fail(self._failure(exc))
                return
            for step in pending:
                if not step.done.done():
                    step.done.set_result(None)
            return

    def _failure(self, exc: Exception) -> Exception:
        """What a step's writer gets when its rows could not be written."""
        if isinstance(exc, DataFault | ServiceFault):
            return exc
        fault = classify(exc)
        if fault == "data":
            return StoreRejected(f"the store refused the rows: {type(exc).__name__}: {exc}")
        if fault == "store":  # retried until the store closed
            return StoreUnavailable(f"store unavailable at shutdown: {type(exc).__name__}")
        return StoreError(f"store write failed: {type(exc).__name__}")

    async def _write_steps(self, batch: list[_Pending]) -> None:
        """One attempt: drop the steps whose trace is no longer ours, write the rest."""
        live = []
        for step in batch:
            if step.done.done():
                continue
            if step.owned is not None and not step.owned():
                step.fail(WorkAbandoned("partition revoked before its rows were written"))
                continue
            live.append(step)
        if not live:
            return
        try:
            async with self._engine.begin() as conn:
                await self._write_rows(conn, live)
        except Exception as exc:
            if read_only(exc):  # a failover: connect again, to the new primary
                await self._engine.dispose()
            raise

    async def _write_rows(self, conn: AsyncConnection, steps: list[_Pending]) -> None:
        guarded: dict[str, list[tuple[_Pending, Upsert]]] = {}
        plain: dict[str, tuple[Table, list[dict[str, Any]]]] = {}
        for step in steps:
            for upsert in step.upserts:
                if upsert.owner is not None:
                    guarded.setdefault(upsert.table.name, []).append((step, upsert))
                else:
                    plain.setdefault(upsert.table.name, (upsert.table, []))[1].append(upsert.row)
        conflicts = _Conflicts()
        for entries in guarded.values():
            written = await self._upsert_guarded(conn, [u for _, u in entries])
            for step, upsert in entries:
                if upsert.key not in written:
                    conflicts.steps[id(step)] = KeyConflict(upsert.table.name, upsert.key)
        if conflicts.steps:
            raise conflicts  # rolls the batch back; it is written again without them
        for table, rows in plain.values():
            await self._upsert(conn, table, rows)

    def _upsert_statement(self, table: Table, owner: str | None = None) -> Any:
        """The table's upsert (guarded by `owner`: returning the keys written), built once: a
        statement built anew is also hashed anew for SQLAlchemy's compiled cache."""
        statement = self._statements.get((table.name, owner))
        if statement is None:
            statement = self._statements[(table.name, owner)] = self._new_upsert(table, owner)
        return statement

    def _new_upsert(self, table: Table, owner: str | None, returning: bool = True) -> Any:
        keys = list(key_names(table))
        insert = pg_insert if self._dialect == "postgresql" else sqlite_insert
        stmt = insert(table)
        updated = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys}
        if owner is None:
            return stmt.on_conflict_do_update(index_elements=keys, set_=updated)
        where = table.c[owner] == stmt.excluded[owner]
        upsert = stmt.on_conflict_do_update(index_elements=keys, set_=updated, where=where)
        return upsert.returning(*table.primary_key.columns) if returning else upsert

    def _sqlite_upsert(self, table: Table, owner: str | None = None) -> SqliteUpsert:
        """The table's upsert for SQLite's driver (`store_sqlite`), built once."""
        upsert = self._sqlite.get((table.name, owner))
        if upsert is None:
            statement = self._new_upsert(table, owner, returning=False)
            upsert = SqliteUpsert.of(table, statement, owner, self._engine.dialect)
            self._sqlite[(table.name, owner)] = upsert
        return upsert

    async def _upsert(
        self, conn: AsyncConnection, table: Table, rows: Sequence[dict[str, Any]]
    ) -> None:
        keys = key_names(table)
        # The same key twice in one statement is an error on PostgreSQL: keep the last.
        unique = list({tuple([r[k] for k in keys]): r for r in rows}.values())
        if self._dialect == "sqlite":
            await self._sqlite_upsert(table).write(conn, unique)
            return
        # executemany form: one cached compiled statement, batched by SQLAlchemy's
        # "insertmanyvalues"; .values(rows) compiled a new statement for every batch.
        await conn.execute(self._upsert_statement(table), unique)

    async def _upsert_guarded(
        self, conn: AsyncConnection, upserts: Sequence[Upsert]
    ) -> set[tuple[Any, ...]]:
        """Upsert rows whose existing copy must have the same owner; the keys written (a row
        of another owner is left alone, its key missing from the answer)."""
        table, owner = upserts[0].table, upserts[0].owner
        unique = list({u.key: u.row for u in upserts}.values())
        if self._dialect == "sqlite":
            return await self._sqlite_upsert(table, owner).write_guarded(conn, unique)
        stmt = self._upsert_statement(table, owner)
        return {tuple(row) for row in await conn.execute(stmt, unique)}

    async def get_result(self, trace_id: str, evaluator: str) -> EvaluationResult | None:
        found = [s for s in await self.stored_results([trace_id]) if s.evaluator == evaluator]
        return found[0].result if found else None

    async def stored_results(self, trace_ids: Sequence[str]) -> list[StoredResult]:
        """Every stored result of these traces."""

        async def read(conn: AsyncConnection) -> list[StoredResult]:
            return await stored_results_of(conn, trace_ids)

        return await self.read(read) if trace_ids else []

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
            .where(since_clause(since, counted_from), value.is_not(None))
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
            .where(since_clause(since, counted_from), column.is_not(None))
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
            .where(since_clause(since, counted_from), or_(value.is_not(None), reason.is_not(None)))
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
                since_clause(since, counted_from),
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
        count = select(func.count()).where(since_clause(since, counted_from))
        latest = select(func.max(moment))
        if agent is not None:
            count = count.where(table.c.agent == agent)
            latest = latest.where(table.c.agent == agent)
        async with self._engine.connect() as conn:
            n = (await conn.execute(count.select_from(table))).scalar() or 0
            last = (await conn.execute(latest.select_from(table))).scalar()
        return int(n), as_datetime(last)

    # ---------------------------------------------------------------- generic keyed documents

    async def upsert_rows(self, table: Table, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace rows of one of the store's tables by primary key, in one
        transaction, through the group-commit writer (the one retried write path)."""
        await self.write([Upsert(table, row) for row in rows])

    async def select_rows(self, table: Table, **equals: Any) -> list[dict[str, Any]]:
        query = select(table)
        for name, value in equals.items():
            column = table.c[name]
            query = query.where(
                column.in_(value) if isinstance(value, list | set) else column == value
            )

        async def read(conn: AsyncConnection) -> list[dict[str, Any]]:
            return [dict(r._mapping) for r in (await conn.execute(query)).all()]

        return await self.read(read)

    async def read(self, operation: Callable[[AsyncConnection], Awaitable[_T]]) -> _T:
        """Run reads on one connection, in one snapshot (a transaction that sees one state of
        the database), riding out connection trouble like the writes."""

        async def attempt() -> _T:
            async with self._engine.connect() as conn:
                if self._dialect == "postgresql":
                    conn = await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    if self._dialect == "sqlite":
                        await conn.exec_driver_sql("BEGIN")  # reads see one snapshot too
                    return await operation(conn)

        return await self._retrying(attempt)

    async def _retrying(self, operation: Callable[[], Awaitable[_T]]) -> _T:
        """Run a direct store call, riding out connection trouble like the write loop does."""
        try:
            result = await self._retry.call(operation)
        except Exception as exc:
            if classify(exc) == "store":  # no longer retried: the store is closing
                raise StoreUnavailable(f"store unavailable: {type(exc).__name__}") from exc
            raise
        self.unavailable_since = None
        return result

    def _retryable(self, exc: BaseException) -> bool:
        return classify(exc) == "store" and not self._closed

    def _unavailable(self, _: BaseException) -> None:
        self.unavailable_since = self.unavailable_since or time.monotonic()


def _contested(steps: Sequence[_Pending]) -> set[int]:
    """Steps of one batch that guard a key an earlier step of the batch guards for another
    owner (ids): written after the others, one by one, so the database decides between them
    (in one statement the last would simply win)."""
    owners: dict[tuple[str, tuple[Any, ...]], Any] = {}
    contested: set[int] = set()
    for step in steps:
        for upsert in step.upserts:
            if upsert.owner is None:
                continue
            where = (upsert.table.name, upsert.key)
            if owners.setdefault(where, upsert.row[upsert.owner]) != upsert.row[upsert.owner]:
                contested.add(id(step))
    return contested


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


def as_datetime(value: Any) -> datetime | None:
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


def since_clause(since: datetime, counted_from: TimeBasis) -> ColumnElement[bool]:
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


def result_row(
    result: EvaluationResult,
    query: str | None,
    answer: str | None,
    scored_at: datetime | None,
) -> dict[str, Any]:
    """The `evaluation_results` row of a result."""

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
