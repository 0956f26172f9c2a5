"""Multi-turn tracking: per-turn hallucination (H_t) and constraint drift (D_t) per conversation.

Fed every evaluation result by the scoring stage. A turn's values come from the LLM judge where
the turn was judged, from tier 0 otherwise (the stored row and the metric name the evaluator).
Turns may arrive out of order, twice (re-delivery) or with gaps: each (conversation, turn) is
stored once by key and counted in the metrics once.

State is bounded (idle expiry, then least-recently-used eviction, both counted) and durable: the
turn rows are written before a trace is finished, and a conversation not in memory is rebuilt
from the store when it is next seen, so restarts and rebalances lose nothing. Traces of one
conversation must share a Kafka key so that one replica sees all of its turns.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import BaseModel, ConfigDict, Field

from monitor.evaluate.constraints import check_constraint
from monitor.export.metrics import AgentLabels
from monitor.models import Constraint, ConstraintVerdict, EvaluationResult, Trace
from monitor.multiturn import drift_rate, hallucination_rate, turn_bucket
from monitor.store import Store, conversation_state_table, turns_table

log = structlog.get_logger(__name__)

RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
MEMORY_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
OUTCOME_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
EVALUATOR_RANK = {"heuristic": 0, "ragas": 1, "llm": 2}
MAX_CARRIED_CONSTRAINTS = 20


class ConversationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    idle_seconds: float = Field(default=1800.0, gt=0, description="a conversation ends after this")
    max_conversations: int = Field(default=100_000, gt=0)


class TurnJudge(Protocol):
    async def judge_turn(
        self, trace: Trace, constraints: list[Constraint], history: list[tuple[str, str]]
    ) -> Any: ...


class ConversationMetrics:
    def __init__(self, registry: CollectorRegistry, agent_label: AgentLabels) -> None:
        r = registry
        self.agent_label = agent_label
        self.hallucination = Histogram(
            "ragmon_turn_hallucination_ratio",
            "H_t per turn; H_u = _sum / _count.",
            ["agent", "evaluator", "turn_bucket"],
            buckets=RATIO_BUCKETS,
            registry=r,
        )
        self.drift = Histogram(
            "ragmon_turn_drift_ratio",
            "D_t per turn (t >= 2); D_r = _sum / _count.",
            ["agent", "turn_bucket"],
            buckets=RATIO_BUCKETS,
            registry=r,
        )
        self.memory = Histogram(
            "ragmon_turn_memory_tokens",
            "M_t per turn.",
            ["agent"],
            buckets=MEMORY_BUCKETS,
            registry=r,
        )
        self.final_memory = Histogram(
            "ragmon_conversation_final_memory_tokens",
            "M_T, when a conversation ends.",
            ["agent"],
            buckets=MEMORY_BUCKETS,
            registry=r,
        )
        self.outcomes = Histogram(
            "ragmon_turn_outcome_score",
            "Outcome scores 0-10 from the LLM judge.",
            ["agent", "metric"],
            buckets=OUTCOME_BUCKETS,
            registry=r,
        )
        self.constraint_checks = Counter(
            "ragmon_constraint_checks",
            "Constraint verdicts per turn.",
            ["agent", "outcome"],
            registry=r,
        )
        self.active = Gauge(
            "ragmon_conversations_active", "Conversations held in memory.", registry=r
        )
        self.evicted = Counter(
            "ragmon_conversations_evicted",
            "Conversations dropped from memory, by reason.",
            ["reason"],
            registry=r,
        )


class _Conversation:
    __slots__ = (
        "agent",
        "carried",
        "dirty",
        "last_memory",
        "last_seen",
        "last_turn",
        "turn_of_trace",
        "turns",
    )

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.turns: dict[int, str] = {}  # turn -> evaluator of the stored row
        self.turn_of_trace: dict[str, int] = {}  # for input without turn numbers (OTLP)
        self.carried: list[Constraint] = []  # user-stated constraints extracted by the judge
        self.last_seen = time.monotonic()
        self.last_turn = 0
        self.last_memory: int | None = None
        self.dirty = False


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

    def __len__(self) -> int:
        return len(self._conversations)

    async def observe(self, trace: Trace, result: EvaluationResult) -> None:
        """Record the turn this result belongs to (the scoring stage's result observer)."""
        if trace.conversation_id is None:
            return
        conv = await self._conversation(trace.conversation_id, trace.agent)
        turn = self._turn_of(conv, trace)
        previous = conv.turns.get(turn)
        rank = EVALUATOR_RANK.get(result.evaluator, 0)
        if previous is not None and EVALUATOR_RANK.get(previous, 0) > rank:
            return  # the turn already has a judge's values; tier 0 does not overwrite them
        first_time = previous is None
        new_evaluator = previous != result.evaluator
        verdicts, outcomes = await self._constraints(conv, trace, result)
        row = self._row(trace, turn, result, verdicts, outcomes)
        if self._store is not None:
            await self._store.save_row(turns_table, row)
        conv.turns[turn] = result.evaluator
        conv.last_turn = max(conv.last_turn, turn)
        if turn == conv.last_turn and trace.memory_tokens is not None:
            conv.last_memory = trace.memory_tokens
        conv.dirty = True
        if new_evaluator:
            self._export(trace, turn, result.evaluator, row, verdicts, outcomes, first_time)

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

    def _turn_of(self, conv: _Conversation, trace: Trace) -> int:
        if trace.turn is not None:
            return trace.turn
        turn = conv.turn_of_trace.get(trace.trace_id)
        if turn is None:
            turn = conv.last_turn + 1
            conv.turn_of_trace[trace.trace_id] = turn
        return turn

    async def _constraints(
        self, conv: _Conversation, trace: Trace, result: EvaluationResult
    ) -> tuple[list[ConstraintVerdict], dict[str, float]]:
        explicit = list(trace.constraints or [])
        ids = {c.id for c in explicit}
        active = explicit + [c for c in conv.carried if c.id not in ids]
        verdicts = {c.id: check_constraint(c, trace.answer) for c in active}
        outcomes: dict[str, float] = {}
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
        return list(verdicts.values()), outcomes

    def _row(
        self,
        trace: Trace,
        turn: int,
        result: EvaluationResult,
        verdicts: Sequence[ConstraintVerdict],
        outcomes: dict[str, float],
    ) -> dict[str, Any]:
        supported = sum(1 for s in result.statements if s.supported)
        unsupported = len(result.statements) - supported
        faithfulness = result.scores.get("faithfulness")
        hallucination: float | None
        if result.statements or (faithfulness is not None and faithfulness.reason == "refusal"):
            hallucination = hallucination_rate(supported, unsupported)
        else:
            hallucination = None  # nothing could be checked: unmeasured, not 0
        counts = {
            s: sum(1 for v in verdicts if v.status == s)
            for s in ("violated", "omitted", "satisfied", "unmeasured")
        }
        measured = len(verdicts) - counts["unmeasured"]
        drift: float | None = None
        if turn >= 2 and (measured or not verdicts):
            drift = drift_rate(counts["violated"], counts["omitted"], measured)
        detail = {
            "supported": supported,
            "unsupported": unsupported,
            "unsupported_claims": result.unsupported_claims[:10],
            "constraints": [v.model_dump() for v in verdicts],
            "outcomes": outcomes,
        }
        return {
            "conversation_id": trace.conversation_id,
            "turn": turn,
            "trace_id": trace.trace_id,
            "agent": trace.agent,
            "timestamp": trace.timestamp,
            "evaluator": result.evaluator,
            "hallucination": hallucination,
            "drift": drift,
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
        for verdict in verdicts:
            m.constraint_checks.labels(agent, verdict.status).inc()

    async def _load(self, conversation_id: str, agent: str) -> _Conversation:
        conv = _Conversation(agent)
        if self._store is None:
            return conv
        for row in await self._store.select_rows(turns_table, conversation_id=conversation_id):
            conv.turns[row["turn"]] = row["evaluator"]
            conv.turn_of_trace[row["trace_id"]] = row["turn"]
            if row["turn"] >= conv.last_turn:
                conv.last_turn = row["turn"]
                conv.last_memory = row["memory_tokens"]
        states = await self._store.select_rows(
            conversation_state_table, conversation_id=conversation_id
        )
        if states:
            saved = json.loads(states[0]["state"])
            conv.carried = [Constraint.model_validate(c) for c in saved.get("carried", [])]
        return conv

    async def _evict_over_limit(self) -> None:
        while len(self._conversations) > self._config.max_conversations:
            conversation_id, conv = self._conversations.popitem(last=False)
            await self._persist({conversation_id: conv})
            self._metrics.evicted.labels("lru").inc()

    async def expire(self, now: float | None = None) -> int:
        """End conversations idle longer than `idle_seconds`: observe M_T, persist, drop."""
        now = time.monotonic() if now is None else now
        ended: dict[str, _Conversation] = {}
        while self._conversations:
            conversation_id, conv = next(iter(self._conversations.items()))
            if now - conv.last_seen < self._config.idle_seconds:
                break
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
