"""The store's upserts on SQLite: one multi-row statement of rows prepared as tuples.

SQLAlchemy's executemany of a compiled upsert turns every row into parameters through its
compiler (a dict per row, the type processors) on the event loop, and the driver's
executemany steps SQLite once per row, each step releasing the GIL and taking it back from a
busy event loop. Here each table's upsert is compiled once to SQL text, each row becomes a
tuple through the bind processors SQLAlchemy applies to its columns (so the stored values are
the same), and a group commit's rows of a table go to the driver as one INSERT of many VALUES
rows, on the store's transaction's own aiosqlite connection: one step, one statement text per
row count (SQLite's statement cache keeps the recent ones), one hop to the driver's thread
(through SQLAlchemy's cursor, three: `bench/scored_loop.py` counts them).

A guarded upsert (`Upsert.owner`) has no RETURNING: the rows SQLite changed (the cursor's
row count; a row left to another owner is not changed) are compared with the rows given, and
only when some are missing are the stored owners read back, in the same transaction, to say
which.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, select, tuple_
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert

Key = tuple[Any, ...]
# SQLite's bound on a statement's parameters (SQLITE_MAX_VARIABLE_NUMBER's default).
MAX_PARAMETERS = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999


@functools.cache
def key_names(table: Table) -> tuple[str, ...]:
    """The names of a table's primary key columns (asked for every row written)."""
    return tuple(c.name for c in table.primary_key.columns)


@dataclass(frozen=True)
class SqliteUpsert:
    """One table's upsert (`statement`, without RETURNING) as SQL text and row converter."""

    table: Table
    sql: str
    columns: tuple[str, ...]
    processors: tuple[tuple[int, Callable[[Any], Any]], ...]  # (position, bind processor)
    keys: tuple[str, ...]
    owner: str | None
    _texts: dict[int, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(
        cls, table: Table, statement: Insert, owner: str | None, dialect: Dialect
    ) -> SqliteUpsert:
        names = [c.name for c in table.columns]
        compiled = statement.compile(dialect=dialect, column_keys=names)
        columns = tuple(compiled.positiontup or ())
        if sorted(columns) != sorted(names):
            raise ValueError(f"{table.name}: the upsert's parameters are not its columns")
        processors = []
        for position, name in enumerate(columns):
            process = table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processors.append((position, process))
        upsert = cls(table, str(compiled), columns, tuple(processors), key_names(table), owner)
        if upsert.sql.count(upsert._one_row) != 1:
            raise ValueError(f"{table.name}: the upsert's VALUES row was not found")
        return upsert

    def parameters(self, row: dict[str, Any]) -> list[Any]:
        """The row as the statement's positional parameters, as SQLAlchemy would bind them."""
        values = [row.get(name) for name in self.columns]
        for position, process in self.processors:
            values[position] = process(values[position])
        return values

    def text(self, rows: int) -> str:
        """The statement with `rows` VALUES rows."""
        text = self._texts.get(rows)
        if text is None:
            head, values, tail = self.sql.partition(self._one_row)
            text = self._texts[rows] = head + ", ".join([values] * rows) + tail
        return text

    @property
    def _one_row(self) -> str:
        return "(" + ", ".join(["?"] * len(self.columns)) + ")"

    async def write(self, conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> int:
        """Upsert the rows (each key once); the rows SQLite changed."""
        changed = 0
        size = max(1, MAX_PARAMETERS // len(self.columns))
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            flat: list[Any] = []
            for row in chunk:
                flat += self.parameters(row)
            changed += await _execute(conn, self.text(len(chunk)), flat)
        return changed

    async def write_guarded(
        self, conn: AsyncConnection, rows: Sequence[dict[str, Any]]
    ) -> set[Key]:
        """Upsert rows whose stored copy must have the same owner; the keys written."""
        assert self.owner is not None
        keys = [tuple(row[k] for k in self.keys) for row in rows]
        if await self.write(conn, rows) == len(rows):
            return set(keys)
        owners = await self._stored_owners(conn, keys)
        return {
            key for key, row in zip(keys, rows, strict=True) if owners.get(key) == row[self.owner]
        }

    async def _stored_owners(self, conn: AsyncConnection, keys: list[Key]) -> dict[Key, Any]:
        assert self.owner is not None
        key_columns = [self.table.c[k] for k in self.keys]
        query = select(*key_columns, self.table.c[self.owner]).where(
            tuple_(*key_columns).in_(keys)
            if len(key_columns) > 1
            else key_columns[0].in_([k[0] for k in keys])
        )
        return {tuple(r[:-1]): r[-1] for r in await conn.execute(query)}


async def _execute(conn: AsyncConnection, sql: str, parameters: list[Any]) -> int:
    """Execute on the transaction's own driver connection (aiosqlite: one hop to its thread,
    where SQLAlchemy's cursor takes three); the rows changed.

    aiosqlite raises ValueError when its connection is closed, which SQLAlchemy's dialect turns
    into an OperationalError: the store's fault, retried, never a data fault (`store_faults`).
    A text SQLite cannot encode (UnicodeError) stays the data's fault."""
    driver = (await conn.get_raw_connection()).driver_connection
    if driver is None:
        raise sqlite3.OperationalError("the SQLite connection is closed")
    try:
        cursor = await driver.execute(sql, parameters)
    except ValueError as exc:
        if isinstance(exc, UnicodeError):
            raise
        # not chained: `classify` would find the ValueError in the chain and blame the data
        raise sqlite3.OperationalError(f"the SQLite connection is unusable: {exc}") from None
    return int(cursor.rowcount)
