"""The judge's verdicts, kept in the store by trace, task and what the judge saw.

`LLMJudge` writes each complete verdict here as soon as it has it and looks here before asking:
a trace read again after a crash or a rebalance (its result stored or not, its earlier
processing abandoned when its partition moved) is not judged again. One row per verdict key;
the rows grow with the judged traces, like the results.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from monitor.sinks.store import Store, Upsert, verdicts_table


class StoredVerdicts:
    """The durable verdict cache of `monitor.evaluators.judge_cache.DurableVerdicts`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, key: str) -> str | None:
        async def read(conn: AsyncConnection) -> str | None:
            t = verdicts_table
            found = await conn.execute(select(t.c.verdict).where(t.c.verdict_key == key))
            value = found.scalar()
            return str(value) if value is not None else None

        return await self._store.read(read)

    async def put(self, key: str, trace_id: str, verdict: str) -> None:
        row = {
            "verdict_key": key,
            "trace_id": trace_id,
            "created_at": datetime.now(UTC),
            "verdict": verdict,
        }
        await self._store.write([Upsert(verdicts_table, row)])
