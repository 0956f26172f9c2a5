"""The stored conversation turns, as the review and the agents report read them.

Every read goes through `Store.read` (one snapshot, riding out connection trouble like the
writes); the conversation stage's own reads and writes are `monitor/sinks/conversations.py`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from monitor.sinks.store import Store, as_datetime, results_table, since_clause, turns_table
from monitor.windows import TimeBasis


def _turns_since(since: datetime, counted_from: TimeBasis) -> ColumnElement[bool]:
    """Turns whose trace is timestamped at or after `since`, or was scored then (a result of
    the trace written since: the turn row is written with it)."""
    if counted_from == "trace":
        return turns_table.c.timestamp >= since
    return exists().where(
        results_table.c.trace_id == turns_table.c.trace_id, since_clause(since, counted_from)
    )


async def turns_since(
    store: Store, since: datetime, *, counted_from: TimeBasis = "trace"
) -> list[dict[str, Any]]:
    """Stored conversation turns since a time: by their traces' timestamps (`counted_from`
    "trace") or by when they were scored ("scored")."""
    query = select(turns_table).where(_turns_since(since, counted_from))

    async def read(conn: AsyncConnection) -> list[dict[str, Any]]:
        return [dict(r._mapping) for r in (await conn.execute(query)).all()]

    return await store.read(read)


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

    async def read(conn: AsyncConnection) -> tuple[int, datetime | None]:
        n = (await conn.execute(count)).scalar() or 0
        last = (await conn.execute(latest)).scalar()
        return int(n), as_datetime(last)

    return await store.read(read)


async def turn_details(
    store: Store, conversation_ids: Collection[str], trace_ids: Collection[str]
) -> dict[str, dict[str, Any]]:
    """The parsed `detail` of the stored turn of each of `trace_ids` (of those conversations),
    by trace id: the constraint verdicts and outcomes the review shows."""
    if not conversation_ids:
        return {}
    query = select(turns_table.c.trace_id, turns_table.c.detail).where(
        turns_table.c.conversation_id.in_(sorted(conversation_ids))
    )

    async def read(conn: AsyncConnection) -> list[tuple[str, str | None]]:
        return [(r[0], r[1]) for r in (await conn.execute(query)).all()]

    wanted = set(trace_ids)
    details: dict[str, dict[str, Any]] = {}
    for trace_id, text in await store.read(read):
        if trace_id not in wanted:
            continue
        try:
            detail = json.loads(text or "{}")
        except ValueError:
            continue
        if isinstance(detail, dict):
            details[trace_id] = detail
    return details
