"""Whose fault a failed store call is: the data's (give up on that trace) or the store's (retry).

Only an error in the data may cost a trace: it is dead-lettered. Whatever else the database or
its driver raises is the store's fault and is retried until the database is back, the trace
unfinished and its offset uncommitted meanwhile: a server shutting down (`pg_ctl stop -m fast`
ends every session with SQLSTATE 57P01 admin_shutdown, then refuses connections), starting up
(57P03), crashed or stopped `-m immediate` (connection resets), failed over (a read-only
transaction, 25006, on a primary turned standby; connection refused meanwhile), out of
connections or disk (class 53), a serialization failure or deadlock (class 40), and also a
misconfiguration (a dropped table, a revoked privilege: class 42): none of those is the trace's
fault, and dead-lettering would lose every trace until someone fixes the store, where waiting
loses none (readiness fails and the retries are counted meanwhile).

The classification goes by SQLSTATE class where the driver gives one (asyncpg and psycopg say
``sqlstate``, psycopg2 ``pgcode``; SQLAlchemy's adapted errors carry it as well), else by
exception type; never by message text:

- data: SQLSTATE class 22 (data exception: a number out of range, a string too long, a NUL
  or untranslatable character), 23 (integrity constraint violation), 54 (program limit
  exceeded: a value too big to index); a value the driver cannot encode (``ValueError``,
  ``TypeError``, ``OverflowError`` raised while binding, asyncpg's client-side ``DataError``);
  SQLite's ``IntegrityError`` and ``DataError``;
- store: every other SQLSTATE; any other error of the driver or of SQLAlchemy (connection
  closed, pool timeout, ...); ``OSError`` and ``TimeoutError`` (refused, reset, timed out);
- anything else (a bug in the daemon) is neither: it is not retried.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Literal

from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError

Fault = Literal["data", "store", "other"]

DATA_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})
READ_ONLY_TRANSACTION = "25006"  # connected to a standby: the primary failed over
_DRIVER_MODULES = ("asyncpg", "psycopg", "psycopg2", "sqlite3", "aiosqlite")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what SQLAlchemy wrapped (`orig`) and the causes, each once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)
        pending += [orig if isinstance(orig, BaseException) else None, current.__cause__]


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE code of a database error, wherever in the chain a driver put it."""
    for current in _chain(exc):
        for attribute in ("sqlstate", "pgcode"):
            code = getattr(current, attribute, None)
            if isinstance(code, str) and len(code) == 5:
                return code
    return None


def classify(exc: BaseException) -> Fault:
    """Whose fault `exc`, raised by a store call, is (see the module documentation)."""
    if not isinstance(exc, Exception):
        return "other"  # cancellation, exit: never retried, never a data fault
    code = sqlstate(exc)
    if code is not None:
        return "data" if code[:2] in DATA_SQLSTATE_CLASSES else "store"
    for current in _chain(exc):
        if isinstance(current, sqlite3.IntegrityError | sqlite3.DataError):
            return "data"
        if isinstance(current, ValueError | TypeError | OverflowError):
            return "data"  # a value the driver could not bind (asyncpg's DataError too)
    if isinstance(exc, StatementError | DBAPIError | SQLAlchemyError | OSError | TimeoutError):
        return "store"
    if type(exc).__module__.split(".")[0] in _DRIVER_MODULES:
        return "store"  # a driver error SQLAlchemy did not wrap (raised while connecting)
    return "other"


def read_only(exc: BaseException) -> bool:
    """The database refused a write because it is a standby now (a failover)."""
    return sqlstate(exc) == READ_ONLY_TRANSACTION
