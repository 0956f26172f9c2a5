"""The conversation repository: what the conversation stage reads and writes, nothing more.

The conversation stage (`monitor/stages/conversation.py`) numbers turns and carries
constraints in memory; this is all it knows of the database. A conversation is loaded whole
(its turn rows, the turns its stored results carry, its carried constraints), the conversations
of a batch together (`load_many`: one query per table, `IN (...)` lists), and every write
about one conversation for one processing step (the trace's turn row and result, the rows and
results of turns it moved, the carried constraints) goes through `write` as one step: one
database transaction, all or nothing, so a crash leaves the old numbering or the new one, never
a mix. Steps of different conversations share transactions through the store's group commit.

Turn rows are keyed by trace id. A trace id that already has a turn row under another
conversation fails the step with `TraceIdConflict` (checked by the database, so two replicas
cannot both win) and nothing of it is written: the first conversation keeps its turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from monitor.faults import DataFault
from monitor.models import Constraint
from monitor.sinks.store import (
    KeyConflict,
    Store,
    StoredResult,
    Upsert,
    conversation_state_table,
    results_table,
    stored_results_of,
    turns_table,
)

IN_CHUNK = 500
"""Keys per `IN (...)` list: far below SQLite's (32,766) and PostgreSQL's (32,767 with asyncpg)
bound parameters per statement, and one batch of the score stage rarely holds more."""


class TraceIdConflict(DataFault):
    """The trace's id is already a turn of another conversation."""

    reason = "trace_id_conflict"


@dataclass(frozen=True)
class TurnRow:
    """One trace's turn as stored: its number, values and `detail` (verdicts, outcomes, how it
    was numbered, the turn judgement)."""

    conversation_id: str
    trace_id: str
    turn: int
    agent: str
    timestamp: datetime
    evaluator: str
    hallucination: float | None
    drift: float | None
    memory_tokens: int | None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def start_us(self) -> int | None:
        """Microseconds since the epoch the turn started, when it was numbered by its start."""
        start = self.detail.get("start_us")
        return start if isinstance(start, int) and not isinstance(start, bool) else None

    def row(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "conversation_id": self.conversation_id,
            "turn": self.turn,
            "agent": self.agent,
            "timestamp": self.timestamp,
            "evaluator": self.evaluator,
            "hallucination": self.hallucination,
            "drift": self.drift,
            "memory_tokens": self.memory_tokens,
            "detail": json.dumps(self.detail, ensure_ascii=False),
        }

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> TurnRow:
        try:
            detail = json.loads(row.get("detail") or "{}")
        except ValueError:
            detail = {}
        return cls(
            conversation_id=row["conversation_id"],
            trace_id=row["trace_id"],
            turn=row["turn"],
            agent=row["agent"],
            timestamp=row["timestamp"],
            evaluator=row["evaluator"],
            hallucination=row["hallucination"],
            drift=row["drift"],
            memory_tokens=row["memory_tokens"],
            detail=detail if isinstance(detail, dict) else {},
        )


@dataclass(frozen=True)
class StoredConversation:
    """A conversation as stored: its turn rows, the turns its traces' stored results carry
    (to check them against the rows) and its carried constraints."""

    turns: list[TurnRow]
    result_turns: dict[str, set[int | None]]
    carried: list[Constraint]


@dataclass(frozen=True)
class StoredTrace:
    """What is stored of one trace: its turn row and its results by evaluator."""

    turn: TurnRow | None = None
    results: dict[str, StoredResult] = field(default_factory=dict)


@dataclass(frozen=True)
class ConversationStep:
    """Every write of one conversation for one processing step."""

    conversation_id: str
    agent: str
    turns: Sequence[TurnRow] = ()
    results: Sequence[StoredResult] = ()
    carried: Sequence[Constraint] | None = None  # the carried constraints, when they changed

    def __bool__(self) -> bool:
        return bool(self.turns or self.results or self.carried is not None)


class ConversationStore:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def load(self, conversation_id: str) -> StoredConversation:
        """The conversation's turn rows, its results' turns and its state, in one snapshot."""
        return (await self.load_many([conversation_id]))[conversation_id]

    async def load_many(self, conversation_ids: Sequence[str]) -> dict[str, StoredConversation]:
        """Several conversations as `load` reads one, in one snapshot and one query per table
        (per `IN_CHUNK` conversations). A conversation with nothing stored comes back empty."""

        async def read(conn: AsyncConnection) -> dict[str, StoredConversation]:
            turns: dict[str, list[TurnRow]] = {c: [] for c in conversation_ids}
            result_turns: dict[str, dict[str, set[int | None]]] = {c: {} for c in turns}
            states: dict[str, str] = {}
            t, s = results_table, conversation_state_table
            for chunk in chunked(list(turns)):
                for r in await conn.execute(
                    select(turns_table).where(turns_table.c.conversation_id.in_(chunk))
                ):
                    row = TurnRow.of(dict(r._mapping))
                    turns[row.conversation_id].append(row)
                for conversation_id, trace_id, turn in await conn.execute(
                    select(t.c.conversation_id, t.c.trace_id, t.c.turn).where(
                        t.c.conversation_id.in_(chunk)
                    )
                ):
                    result_turns[conversation_id].setdefault(trace_id, set()).add(turn)
                for conversation_id, state in await conn.execute(
                    select(s.c.conversation_id, s.c.state).where(s.c.conversation_id.in_(chunk))
                ):
                    states[conversation_id] = state
            return {
                c: StoredConversation(turns[c], result_turns[c], _carried(states.get(c)))
                for c in turns
            }

        return await self._store.read(read) if conversation_ids else {}

    async def traces(self, trace_ids: Sequence[str]) -> dict[str, StoredTrace]:
        """The turn rows and results of these traces (those stored), one query per table (per
        `IN_CHUNK` traces)."""

        async def read(conn: AsyncConnection) -> dict[str, StoredTrace]:
            rows: dict[str, TurnRow] = {}
            results: dict[str, dict[str, StoredResult]] = {}
            for chunk in chunked(list(dict.fromkeys(trace_ids))):
                for r in await conn.execute(
                    select(turns_table).where(turns_table.c.trace_id.in_(chunk))
                ):
                    rows[r.trace_id] = TurnRow.of(dict(r._mapping))
                for stored in await stored_results_of(conn, chunk):
                    results.setdefault(stored.result.trace_id, {})[stored.evaluator] = stored
            return {
                trace_id: StoredTrace(rows.get(trace_id), results.get(trace_id, {}))
                for trace_id in set(rows) | set(results)
            }

        return await self._store.read(read) if trace_ids else {}

    async def write(
        self, step: ConversationStep, *, owned: Callable[[], bool] | None = None
    ) -> None:
        """Write the step in one transaction (see the module documentation)."""
        upserts = [Upsert(turns_table, t.row(), owner="conversation_id") for t in step.turns]
        upserts += [stored.upsert() for stored in step.results]
        if step.carried is not None:
            state = {"carried": [c.model_dump() for c in step.carried]}
            upserts.append(
                Upsert(
                    conversation_state_table,
                    {
                        "conversation_id": step.conversation_id,
                        "partition_key": step.conversation_id,
                        "agent": step.agent,
                        "updated_at": datetime.now(UTC),
                        "state": json.dumps(state, ensure_ascii=False),
                    },
                )
            )
        try:
            await self._store.write(upserts, owned=owned)
        except KeyConflict as conflict:
            raise TraceIdConflict(
                f"trace {conflict.key[0]!r} is already a turn of another conversation "
                f"(not written under {step.conversation_id!r})"
            ) from conflict


def chunked(keys: list[str]) -> list[list[str]]:
    """`keys` in slices of at most `IN_CHUNK`, each one `IN (...)` list."""
    return [keys[i : i + IN_CHUNK] for i in range(0, len(keys), IN_CHUNK)]


def _carried(state: str | None) -> list[Constraint]:
    """The carried constraints of a stored conversation state (none when there is none)."""
    carried = json.loads(state).get("carried", []) if state else []
    return [Constraint.model_validate(c) for c in carried]
