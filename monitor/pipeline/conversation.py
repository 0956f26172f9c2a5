"""Multi-turn tracking: per-turn hallucination (H_t) and constraint drift (D_t) per conversation.

A stage of the scoring pipeline (`ScoringProcessor.process`), not an afterthought: `turn(trace)`
waits until the conversation's previous turn is done, loads the conversation (from the store
when it is not in memory) and numbers the turn; the evaluators then run on the numbered trace;
`Turn.record(result)` checks the constraints, writes the turn row and exports the per-turn
metrics before the result is stored and published, so results carry their turn. A turn's
values come from the LLM judge where the turn was judged, from tier 0 otherwise (the stored row
and the metric name the evaluator).

Turn numbers. A native trace's `turn` wins. Otherwise turns are numbered by their start (the
OTLP root span's start, `metadata.started_at`; else `timestamp`), ties broken by trace id:
turn = 1 + the number of the conversation's traces that started earlier. A trace that arrives
after later-starting turns were numbered takes its place, and those turns move up by one (their
turn rows and stored results are rewritten, and the results re-published). The numbers
therefore depend only on which traces a conversation has: not on arrival order, batching,
workers, replicas or re-delivery. What a moved turn already exported to Prometheus stays under
the bucket it had; `ragmon_conversation_turns_renumbered_total` counts such moves.

State is bounded (idle expiry, then least-recently-used eviction, both counted) and durable: the
turn rows are written before a trace is finished, and a conversation not in memory is rebuilt
from the store when it is next seen (rows numbered against the rule are repaired then), so
restarts and rebalances lose nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

import structlog
from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog
from monitor.config.conversation import ConversationConfig
from monitor.evaluators.constraints import check_constraint
from monitor.evaluators.multiturn import drift_rate, hallucination_rate, turn_bucket
from monitor.models import Constraint, ConstraintVerdict, EvaluationResult, Trace
from monitor.sinks.metrics import AgentLabels
from monitor.sinks.store import Store, conversation_state_table, results_table, turns_table

log = structlog.get_logger(__name__)

EVALUATOR_RANK = {"heuristic": 0, "ragas": 1, "llm": 2}
MAX_CARRIED_CONSTRAINTS = 20
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def start_micros(trace: Trace) -> int:
    """When the turn started, in microseconds since the epoch: `metadata.started_at` (the OTLP
    root span's start, RFC 3339) when present, else `timestamp`."""
    moment = trace.timestamp
    started = (trace.metadata or {}).get("started_at")
    if isinstance(started, str):
        try:
            parsed = datetime.fromisoformat(started)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            moment = parsed
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def turn_order_key(trace: Trace) -> tuple[int, int, str]:
    """The order in which a conversation's traces are processed: explicit turn, start, id."""
    return (trace.turn or 0, start_micros(trace), trace.trace_id)


class TurnJudge(Protocol):
    async def judge_turn(
        self, trace: Trace, constraints: list[Constraint], history: list[tuple[str, str]]
    ) -> Any: ...


class ConversationMetrics:
    def __init__(self, registry: CollectorRegistry, agent_label: AgentLabels) -> None:
        r = registry
        self.agent_label = agent_label
        self.hallucination = catalog.create(catalog.TURN_HALLUCINATION, r)
        self.drift = catalog.create(catalog.TURN_DRIFT, r)
        self.memory = catalog.create(catalog.TURN_MEMORY, r)
        self.final_memory = catalog.create(catalog.CONVERSATION_FINAL_MEMORY, r)
        self.outcomes = catalog.create(catalog.TURN_OUTCOME, r)
        self.constraint_checks = catalog.create(catalog.CONSTRAINT_CHECKS, r)
        self.active = catalog.create(catalog.CONVERSATIONS_ACTIVE, r)
        self.evicted = catalog.create(catalog.CONVERSATIONS_EVICTED, r)
        self.renumbered = catalog.create(catalog.TURNS_RENUMBERED, r)

    def count_constraint_checks(self, agent: str, verdicts: Sequence[ConstraintVerdict]) -> None:
        label = self.agent_label(agent)
        for verdict in verdicts:
            self.constraint_checks.labels(label, verdict.status).inc()


class _Conversation:
    __slots__ = (
        "agent",
        "carried",
        "dirty",
        "evaluators",
        "explicit",
        "last_memory",
        "last_seen",
        "order",
        "starts",
    )

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.order: list[tuple[int, str]] = []  # (start µs, trace id) of turns numbered by start
        self.starts: dict[str, int] = {}  # trace id -> start µs, for the same turns
        self.explicit: dict[str, int] = {}  # trace id -> turn given by the producer
        self.evaluators: dict[str, str] = {}  # trace id -> evaluator of its stored turn row
        self.carried: list[Constraint] = []  # user-stated constraints extracted by the judge
        self.last_seen = time.monotonic()
        self.last_memory: int | None = None
        self.dirty = False

    @property
    def last_turn(self) -> int:
        return max(len(self.order), max(self.explicit.values(), default=0))

    def turn_of(self, trace_id: str) -> int | None:
        if trace_id in self.explicit:
            return self.explicit[trace_id]
        start = self.starts.get(trace_id)
        if start is None:
            return None
        return bisect.bisect_left(self.order, (start, trace_id)) + 1

    def place(self, trace: Trace) -> tuple[int, bool, bool]:
        """Number the trace: (turn, whether it is new here, whether later turns moved up)."""
        if trace.turn is not None:
            new = trace.trace_id not in self.explicit
            self.explicit[trace.trace_id] = trace.turn
            return trace.turn, new, False
        known = self.turn_of(trace.trace_id)
        if known is not None:
            return known, False, False
        start = start_micros(trace)
        index = bisect.bisect_left(self.order, (start, trace.trace_id))
        self.order.insert(index, (start, trace.trace_id))
        self.starts[trace.trace_id] = start
        return index + 1, True, index < len(self.order) - 1

    def unplace(self, trace: Trace) -> None:
        """Undo a `place` whose turn was never recorded (its processing failed)."""
        if trace.turn is not None:
            self.explicit.pop(trace.trace_id, None)
            return
        start = self.starts.pop(trace.trace_id, None)
        if start is not None:
            self.order.remove((start, trace.trace_id))


class Turn:
    """One trace's turn while it is processed; the conversation waits for it to finish."""

    def __init__(
        self,
        tracker: ConversationTracker,
        conversation_id: str,
        conv: _Conversation,
        trace: Trace,
        moves_later_turns: bool,
    ) -> None:
        self.conversation_id = conversation_id
        self.trace = trace  # with its turn number
        self._tracker = tracker
        self._conv = conv
        self.moves_later_turns = moves_later_turns
        self.recorded = False

    @property
    def number(self) -> int:
        assert self.trace.turn is not None
        return self.trace.turn

    async def record(self, result: EvaluationResult, *, count: bool = True) -> Recorded:
        """Record one evaluator's result for this turn. Returns the result to emit (an `llm`
        result with the turn judge's tokens added, when the turn judge ran) and the stored
        results of other turns whose number this turn moved (already rewritten in the store),
        to re-publish. `count` False leaves the metrics alone (a re-assembled trace that was
        counted before)."""
        return await self._tracker._record(self, self._conv, result, count)


class Recorded(NamedTuple):
    result: EvaluationResult  # what to store and publish
    moved: list[EvaluationResult]  # other turns' results, renumbered


class _TurnLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class ConversationTracker:
    def __init__(
        self,
        config: ConversationConfig,
        metrics: ConversationMetrics,
        store: Store | None = None,
        judge: TurnJudge | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._store = store
        self._judge = judge
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self._locks: dict[str, _TurnLock] = {}

    def __len__(self) -> int:
        return len(self._conversations)

    @asynccontextmanager
    async def turn(self, trace: Trace) -> AsyncIterator[Turn | None]:
        """The trace's turn, once every earlier turn of its conversation is done; None for a
        trace without a conversation. Different conversations do not wait for each other."""
        conversation_id = trace.conversation_id
        if conversation_id is None:
            yield None
            return
        held = self._locks.get(conversation_id)
        if held is None:
            held = self._locks[conversation_id] = _TurnLock()
        held.users += 1
        try:
            async with held.lock:
                conv = await self._conversation(conversation_id, trace.agent)
                number, new, moves = conv.place(trace)
                numbered = (
                    trace if trace.turn == number else trace.model_copy(update={"turn": number})
                )
                turn = Turn(self, conversation_id, conv, numbered, moves)
                try:
                    yield turn
                except BaseException:
                    if new and not turn.recorded:
                        conv.unplace(trace)
                    raise
        finally:
            held.users -= 1
            if held.users == 0:
                del self._locks[conversation_id]

    async def observe(self, trace: Trace, result: EvaluationResult) -> None:
        """Number the trace's turn and record one result for it (callers holding both)."""
        async with self.turn(trace) as turn:
            if turn is not None:
                await turn.record(result)

    async def _record(
        self, turn: Turn, conv: _Conversation, result: EvaluationResult, count: bool
    ) -> Recorded:
        trace, number = turn.trace, turn.number
        previous = conv.evaluators.get(trace.trace_id)
        rank = EVALUATOR_RANK.get(result.evaluator, 0)
        if previous is not None and EVALUATOR_RANK.get(previous, 0) > rank:
            # the turn already has a judge's values; tier 0 does not overwrite them
            return Recorded(result, [])
        first_time = previous is None
        new_evaluator = previous != result.evaluator
        verdicts, outcomes, judgement = await self._constraints(conv, trace, result)
        if judgement is not None:
            result = judgement.charged_to(result)  # every token spent judging this trace
        row = self._row(trace, number, result, verdicts, outcomes, conv.starts.get(trace.trace_id))
        moved: list[EvaluationResult] = []
        if self._store is not None:
            if turn.moves_later_turns:
                moved = await self._rewrite(turn.conversation_id, conv, row)
            else:
                await self._store.save_row(turns_table, row)
        turn.moves_later_turns = False
        turn.recorded = True
        conv.evaluators[trace.trace_id] = result.evaluator
        if number >= conv.last_turn and trace.memory_tokens is not None:
            conv.last_memory = trace.memory_tokens
        conv.dirty = True
        if new_evaluator and count:
            self._export(trace, number, result.evaluator, row, verdicts, outcomes, first_time)
        return Recorded(result, moved)

    async def _conversation(self, conversation_id: str, agent: str) -> _Conversation:
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = await self._load(conversation_id, agent)
            self._conversations[conversation_id] = conv
            await self._evict_over_limit()
        else:
            self._conversations.move_to_end(conversation_id)
        conv.last_seen = time.monotonic()
        self._metrics.active.set(len(self._conversations))
        return conv

    async def _constraints(
        self, conv: _Conversation, trace: Trace, result: EvaluationResult
    ) -> tuple[list[ConstraintVerdict], dict[str, float], Any]:
        """The turn's constraint verdicts and outcome scores, and the turn judge's judgement
        (None when it did not run: no judge, or not the judge's result)."""
        explicit = list(trace.constraints or [])
        ids = {c.id for c in explicit}
        active = explicit + [c for c in conv.carried if c.id not in ids]
        verdicts = {c.id: check_constraint(c, trace.answer) for c in active}
        outcomes: dict[str, float] = {}
        judgement = None
        if self._judge is not None and result.evaluator == "llm":
            judgement = await self._judge.judge_turn(trace, active, [])
            for verdict in judgement.verdicts:
                if verdicts.get(verdict.constraint_id, verdict).status == "unmeasured":
                    verdicts[verdict.constraint_id] = verdict
            withdrawn = set(judgement.withdrawn)
            for constraint_id in withdrawn:  # withdrawn in this very turn: no longer active
                verdicts.pop(constraint_id, None)
            carried = [c for c in conv.carried if c.id not in withdrawn]
            known = {c.id for c in carried}
            for constraint in judgement.new_constraints:  # stated now: this answer owes it too
                if constraint.id not in known and constraint.id not in verdicts:
                    carried.append(constraint)
                    verdicts[constraint.id] = check_constraint(constraint, trace.answer)
            conv.carried = carried[-MAX_CARRIED_CONSTRAINTS:]
            outcomes = {k: v for k, v in judgement.outcomes.items() if v is not None}
        return list(verdicts.values()), outcomes, judgement

    def _row(
        self,
        trace: Trace,
        turn: int,
        result: EvaluationResult,
        verdicts: Sequence[ConstraintVerdict],
        outcomes: dict[str, float],
        start_us: int | None,
    ) -> dict[str, Any]:
        supported = sum(1 for s in result.statements if s.supported)
        unsupported = len(result.statements) - supported
        faithfulness = result.scores.get("faithfulness")
        hallucination: float | None
        if result.statements or (faithfulness is not None and faithfulness.reason == "refusal"):
            hallucination = hallucination_rate(supported, unsupported)
        else:
            hallucination = None  # nothing could be checked: unmeasured, not 0
        constraints = [v.model_dump() for v in verdicts]
        detail: dict[str, Any] = {
            "supported": supported,
            "unsupported": unsupported,
            "unsupported_claims": result.unsupported_claims[:10],
            "constraints": constraints,
            "outcomes": outcomes,
        }
        if start_us is not None:
            detail["start_us"] = start_us  # numbered by start: renumbered when one comes earlier
        return {
            "conversation_id": trace.conversation_id,
            "turn": turn,
            "trace_id": trace.trace_id,
            "agent": trace.agent,
            "timestamp": trace.timestamp,
            "evaluator": result.evaluator,
            "hallucination": hallucination,
            "drift": _drift(turn, constraints),
            "memory_tokens": trace.memory_tokens,
            "detail": json.dumps(detail, ensure_ascii=False),
        }

    def _export(
        self,
        trace: Trace,
        turn: int,
        evaluator: str,
        row: dict[str, Any],
        verdicts: Sequence[ConstraintVerdict],
        outcomes: dict[str, float],
        first_time: bool,
    ) -> None:
        m = self._metrics
        agent = m.agent_label(trace.agent)
        bucket = turn_bucket(turn)
        if row["hallucination"] is not None:
            m.hallucination.labels(agent, evaluator, bucket).observe(row["hallucination"])
        for name, value in outcomes.items():
            m.outcomes.labels(agent, name).observe(value)
        if not first_time:
            return  # drift, memory and constraint counts are per turn, whichever evaluator
        if row["drift"] is not None:
            m.drift.labels(agent, bucket).observe(row["drift"])
        if trace.memory_tokens is not None:
            m.memory.labels(agent).observe(trace.memory_tokens)
        m.count_constraint_checks(trace.agent, verdicts)

    async def _load(self, conversation_id: str, agent: str) -> _Conversation:
        conv = _Conversation(agent)
        if self._store is None:
            return conv
        rows = await self._store.select_rows(turns_table, conversation_id=conversation_id)
        for row in rows:
            start = _detail(row).get("start_us")
            if isinstance(start, int) and not isinstance(start, bool):
                conv.starts[row["trace_id"]] = start
            else:  # numbered by the producer (or stored before numbering by start)
                conv.explicit[row["trace_id"]] = row["turn"]
        conv.order = sorted((start, trace_id) for trace_id, start in conv.starts.items())
        misplaced = False
        for row in sorted(rows, key=lambda r: r["turn"]):
            correct = conv.turn_of(row["trace_id"])
            if correct == row["turn"] or row["trace_id"] in conv.explicit:
                conv.evaluators[row["trace_id"]] = row["evaluator"]
                if row["turn"] >= conv.last_turn:
                    conv.last_memory = row["memory_tokens"]
            else:
                misplaced = True
        if misplaced:  # a renumbering interrupted by a crash, or two writers during a rebalance
            log.warning("conversation turns renumbered on load", conversation_id=conversation_id)
            await self._rewrite(conversation_id, conv, None)
            for row in rows:
                conv.evaluators.setdefault(row["trace_id"], row["evaluator"])
        states = await self._store.select_rows(
            conversation_state_table, conversation_id=conversation_id
        )
        if states:
            saved = json.loads(states[0]["state"])
            conv.carried = [Constraint.model_validate(c) for c in saved.get("carried", [])]
        return conv

    async def _rewrite(
        self, conversation_id: str, conv: _Conversation, new_row: dict[str, Any] | None
    ) -> list[EvaluationResult]:
        """Put every stored turn numbered by start under its number (plus `new_row`), in one
        transaction; then the moved turns' results. Returns the results rewritten."""
        assert self._store is not None
        rows = await self._store.select_rows(turns_table, conversation_id=conversation_id)
        desired: dict[int, dict[str, Any]] = {}
        moved: dict[str, int] = {}
        held: set[int] = set()
        # rows already in place last, so they win over a stale copy of the same turn
        for row in sorted(rows, key=lambda r: conv.turn_of(r["trace_id"]) == r["turn"]):
            trace_id = row["trace_id"]
            if trace_id not in conv.starts:
                continue  # numbered by the producer: left alone
            held.add(row["turn"])
            correct = conv.turn_of(trace_id)
            if correct is None or (new_row is not None and trace_id == new_row["trace_id"]):
                continue
            if row["turn"] != correct:
                moved[trace_id] = correct
                row = {
                    **row,
                    "turn": correct,
                    "drift": _drift(correct, _detail(row).get("constraints", [])),
                }
            desired[correct] = row
        if new_row is not None:
            desired[new_row["turn"]] = new_row
        changed = [r for r in desired.values() if r["trace_id"] in moved or r is new_row]
        await self._store.upsert_rows(turns_table, changed)
        for stale in sorted(held - set(desired)):
            await self._store.delete_rows(turns_table, conversation_id=conversation_id, turn=stale)
        if moved:
            self._metrics.renumbered.inc(len(moved))
        return await self._renumber_results(moved)

    async def _renumber_results(self, moved: dict[str, int]) -> list[EvaluationResult]:
        if not moved or self._store is None:
            return []
        rows = await self._store.select_rows(results_table, trace_id=sorted(moved))
        updated: list[EvaluationResult] = []
        changed: list[dict[str, Any]] = []
        for row in rows:
            turn = moved[row["trace_id"]]
            if row["turn"] == turn:
                continue
            result = EvaluationResult.model_validate_json(row["result"]).model_copy(
                update={"turn": turn}
            )
            changed.append({**row, "turn": turn, "result": result.model_dump_json()})
            updated.append(result)
        await self._store.upsert_rows(results_table, changed)
        return updated

    async def _evict_over_limit(self) -> None:
        excess = len(self._conversations) - self._config.max_conversations
        if excess <= 0:
            return
        victims = []
        for conversation_id in self._conversations:  # oldest first; never one in use
            if conversation_id not in self._locks:
                victims.append(conversation_id)
                if len(victims) == excess:
                    break
        for conversation_id in victims:
            conv = self._conversations.pop(conversation_id)
            await self._persist({conversation_id: conv})
            self._metrics.evicted.labels("lru").inc()

    async def expire(self, now: float | None = None) -> int:
        """End conversations idle longer than `idle_seconds`: observe M_T, persist, drop."""
        now = time.monotonic() if now is None else now
        ended: dict[str, _Conversation] = {}
        for conversation_id, conv in list(self._conversations.items()):
            if now - conv.last_seen < self._config.idle_seconds:
                break
            if conversation_id in self._locks:
                continue  # a turn of it is being processed right now
            del self._conversations[conversation_id]
            ended[conversation_id] = conv
            if conv.last_memory is not None:
                self._metrics.final_memory.labels(self._metrics.agent_label(conv.agent)).observe(
                    conv.last_memory
                )
            self._metrics.evicted.labels("expired").inc()
        await self._persist(ended)
        self._metrics.active.set(len(self._conversations))
        return len(ended)

    async def flush(self) -> None:
        """Persist every changed conversation (revocation, shutdown)."""
        await self._persist(self._conversations)

    async def forget_all(self) -> None:
        """Persist and drop everything (partitions revoked); it reloads when seen again."""
        await self.flush()
        self._conversations.clear()
        self._metrics.active.set(0)

    async def _persist(self, conversations: dict[str, _Conversation]) -> None:
        if self._store is None:
            return
        rows = []
        for conversation_id, conv in conversations.items():
            if not conv.dirty:
                continue
            rows.append(
                {
                    "conversation_id": conversation_id,
                    "partition_key": conversation_id,
                    "agent": conv.agent,
                    "updated_at": datetime.now(UTC),
                    "state": json.dumps(
                        {"carried": [c.model_dump() for c in conv.carried]}, ensure_ascii=False
                    ),
                }
            )
            conv.dirty = False
        await self._store.upsert_rows(conversation_state_table, rows)


def _detail(row: dict[str, Any]) -> dict[str, Any]:
    try:
        detail = json.loads(row.get("detail") or "{}")
    except ValueError:
        return {}
    return detail if isinstance(detail, dict) else {}


def _drift(turn: int, constraints: Sequence[dict[str, Any]]) -> float | None:
    """D_t from a turn's constraint verdicts; None at turn 1 and when nothing was measured."""
    statuses = [c.get("status") for c in constraints if isinstance(c, dict)]
    violated, omitted = statuses.count("violated"), statuses.count("omitted")
    measured = len(statuses) - statuses.count("unmeasured")
    if turn >= 2 and (measured or not statuses):
        return drift_rate(violated, omitted, measured)
    return None
