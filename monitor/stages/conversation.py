"""Multi-turn tracking: per-turn hallucination (H_t) and constraint drift (D_t) per conversation.

A stage of the scoring pipeline (`ScoringProcessor.process`), not an afterthought: `turn(trace)`
waits until the conversation's previous turn is done, loads the conversation (from the store
when it is not in memory) and numbers the turn; the evaluators then run on the numbered trace;
each result is prepared (constraints checked, the turn row made) and committed with the turn row
in one step, so results carry their turn. A turn's values come from the LLM judge where the
turn was judged, from tier 0 otherwise (the stored row and the metric name the evaluator).

Turn numbers. A native trace's `turn` wins. Otherwise turns are numbered by their start (the
OTLP root span's start, `assembly.start_ns`; else `timestamp`), ties broken by trace id:
turn = 1 + the number of the conversation's traces that started earlier. A trace that arrives
after later-starting turns were numbered takes its place, and those turns move up by one (their
turn rows and stored results are rewritten in the same step, and the results re-published). The
numbers therefore depend only on which traces a conversation has: not on arrival order,
batching, workers, replicas or re-delivery. What a moved turn already exported to Prometheus
stays under the bucket it had; `ragmon_conversation_turns_renumbered_total` counts such moves.

State is bounded (idle expiry, then least-recently-used eviction, both counted) and durable:
every step is written (`monitor.sinks.conversations`, one transaction: the old numbering or the
new, never a mix) before the trace is finished, and a conversation not in memory is rebuilt from
the store when it is next seen, its turn rows and results checked together against the rule
(its next step rewrites any that disagree), so restarts, rebalances and crashes lose nothing. A
re-delivered trace keeps its turn, its judge verdicts are reused, and what did not change is
neither written nor published again.

The score stage hands over each batch first (`ConversationTracker.batch`): the batch's
conversations not in memory are read together, one query per table, and so are the stored
turns the batch will move and its traces stored before; a step takes them from memory (kept as
the steps write them) instead of reading them itself. The batch holds its conversations in
memory until it is done (neither evicted nor expired: the bound may be exceeded by the
conversations of the traces in flight). A read overtaken by what it read (the conversation
dropped, its partition revoked, a trace of it written meanwhile) is not kept; the turn then
reads for itself, as it does outside a batch. Each step is still written on its own: the
numbering a step writes is that of the traces stored before it plus its own, so a trace that
fails (a conflicting trace id, rows the database refuses) fails alone.

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import structlog
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog
from monitor.config.conversation import ConversationConfig
from monitor.evaluators.constraints import check_constraint
from monitor.evaluators.multiturn import drift_rate, hallucination_rate, turn_bucket
from monitor.faults import check_owned, current_owner, current_partitions
from monitor.metrics import AgentLabels, Children
from monitor.models import Constraint, ConstraintVerdict, EvaluationResult, Trace
from monitor.sinks.conversations import (
    ConversationStep,
    ConversationStore,
    StoredTrace,
    TraceIdConflict,
    TurnRow,
)
from monitor.sinks.store import StoredResult
from monitor.stages.conversation_state import (
    ConversationState,
    turn_order_key,
)
from monitor.typing import TurnJudge

log = structlog.get_logger(__name__)

EVALUATOR_RANK = {"heuristic": 0, "ragas": 1, "llm": 2}
MAX_CARRIED_CONSTRAINTS = 20


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
        # the children a turn updates, looked up once per label values
        self.hallucination_series = Children(self.hallucination)
        self.outcome_series = Children(self.outcomes)
        self.drift_series = Children(self.drift)
        self.memory_series = Children(self.memory)
        self.check_series = Children(self.constraint_checks)

    def count_constraint_checks(self, agent: str, verdicts: Sequence[ConstraintVerdict]) -> None:
        label = self.agent_label(agent)
        for verdict in verdicts:
            self.check_series(label, verdict.status).inc()


class Turn:
    """One trace's turn while it is processed; the conversation waits for it to finish.

    Each result of the turn is `prepare`d (the constraints checked, the turn judge asked, the
    turn row made, the stored rows and results of turns whose number moved read and
    renumbered), then `commit`ted: everything the step writes in one transaction, then the
    conversation's state in memory. What to publish is the caller's: the prepared result and
    the moved ones, before the commit (so a stored result was published).
    """

    def __init__(
        self,
        tracker: ConversationTracker,
        conversation_id: str,
        conv: ConversationState,
        trace: Trace,
        stored: StoredTrace,
    ) -> None:
        self.conversation_id = conversation_id
        self.trace = trace  # with its turn number
        self._tracker = tracker
        self._conv = conv
        self._stored = stored
        self.recorded = False

    @property
    def number(self) -> int:
        assert self.trace.turn is not None
        return self.trace.turn

    @property
    def prior(self) -> dict[str, StoredResult]:
        """The trace's stored results by evaluator (a re-delivered trace), else empty."""
        return self._stored.results

    async def prepare(self, result: EvaluationResult, *, count: bool = True) -> Step:
        """One evaluator's result for this turn, ready to publish and commit. `count` False
        leaves the metrics alone at commit (a re-assembled trace that was counted before)."""
        return await self._tracker._prepare(self, self._conv, self._stored, result, count)

    async def commit(self, step: Step, stored: StoredResult | None, *, unchanged: bool) -> None:
        """Write the step in one transaction: `stored` (the result as stored, None when there is
        no store or nothing of it changed), the turn row unless `unchanged` leaves it as
        stored, and the moved turns; then update the conversation in memory and the metrics.
        Raises `TraceIdConflict` (a data fault) when the trace is a turn of another
        conversation: nothing is written."""
        await self._tracker._commit(self, self._conv, step, stored, unchanged)

    async def record(self, result: EvaluationResult, *, count: bool = True) -> EvaluationResult:
        """Prepare and commit a result that is neither stored nor published (no store)."""
        step = await self.prepare(result, count=count)
        await self.commit(step, None, unchanged=False)
        return step.result


@dataclass
class Step:
    """One result of a turn, prepared (see `Turn`)."""

    result: EvaluationResult  # what to store and publish: the turn judge's tokens added
    row: TurnRow | None  # the trace's turn row; None when a judge's row outranks this result
    moved: dict[str, int]  # trace id -> new turn, for every stored turn whose number moved
    moved_rows: list[TurnRow]
    moved_results: list[StoredResult]  # other turns' stored results, renumbered: re-publish
    carried: list[Constraint] | None  # the conversation's carried constraints, if they changed
    verdicts: list[ConstraintVerdict]
    outcomes: dict[str, float]
    count: bool


@dataclass(eq=False)  # each batch removes its own watch, not an equal one
class _Watch:
    """What was dropped, revoked or written while a batch read the store: none of it may come
    back from that (older) read."""

    dropped: set[str] = field(default_factory=set)
    revoked: set[TopicPartition] = field(default_factory=set)
    written: set[str] = field(default_factory=set)  # trace ids


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
        store: ConversationStore | None = None,
        judge: TurnJudge | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._store = store
        self._judge = judge
        self._conversations: OrderedDict[str, ConversationState] = OrderedDict()
        self._locks: dict[str, _TurnLock] = {}  # conversations in use: never evicted
        self._watches: list[_Watch] = []

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
        held = self._hold(conversation_id)
        try:
            async with held.lock:
                conv = await self._conversation(conversation_id, trace.agent)
                conv.partitions.update(current_partitions())
                stored = StoredTrace()
                if self._store is not None and trace.trace_id in conv.stored_turns:
                    # stored before: a re-delivery (its results decide what is new)
                    found = await self._stored_traces(conv, [trace.trace_id])
                    stored = found.get(trace.trace_id, stored)
                number, new = conv.place(trace)
                numbered = (
                    trace if trace.turn == number else trace.model_copy(update={"turn": number})
                )
                turn = Turn(self, conversation_id, conv, numbered, stored)
                try:
                    yield turn
                except BaseException:
                    if new and not turn.recorded:
                        conv.unplace(trace)
                    raise
        finally:
            self._let_go(conversation_id)

    def _hold(self, conversation_id: str) -> _TurnLock:
        """Mark the conversation in use (a turn of it, or a batch that holds one): it is
        neither evicted nor expired until `_let_go`."""
        held = self._locks.get(conversation_id)
        if held is None:
            held = self._locks[conversation_id] = _TurnLock()
        held.users += 1
        return held

    def _let_go(self, conversation_id: str) -> None:
        held = self._locks[conversation_id]
        held.users -= 1
        if held.users == 0:
            del self._locks[conversation_id]
            conv = self._conversations.get(conversation_id)
            if conv is not None:
                conv.known = None  # kept only while a batch or a turn uses it

    @asynccontextmanager
    async def batch(
        self, traces: Sequence[tuple[Trace, Collection[TopicPartition]]]
    ) -> AsyncIterator[None]:
        """Hold the conversations of a batch of traces (each with the partitions it was read
        from) in memory while the batch is processed. Those not in memory are read from the
        store together, one query per table; so are the stored turns the batch will renumber
        and its traces stored before (re-delivered), which its steps then take from memory.
        None of them is evicted or expired before the batch is done (the bound may be exceeded
        by the conversations of the traces in flight). Turns are still numbered one by one by
        `turn`, which reads a conversation itself when the batch could not (it was dropped
        meanwhile, or the read failed)."""
        groups: dict[str, list[Trace]] = {}
        partitions: dict[str, set[TopicPartition]] = {}
        for trace, read_from in traces:
            if trace.conversation_id is not None:
                groups.setdefault(trace.conversation_id, []).append(trace)
                partitions.setdefault(trace.conversation_id, set()).update(read_from)
        for conversation_id in groups:
            self._hold(conversation_id)
        try:
            if self._store is not None:
                try:
                    await self._preload(self._store, groups, partitions)
                except Exception as exc:  # each turn reads for itself, and fails alone
                    log.warning("reading a batch's conversations failed", error=repr(exc))
            yield
        finally:
            for conversation_id in groups:
                self._let_go(conversation_id)
            self._evict_over_limit()  # what the batch held beyond the bound
            self._metrics.active.set(len(self._conversations))

    async def _preload(
        self,
        store: ConversationStore,
        groups: dict[str, list[Trace]],
        partitions: dict[str, set[TopicPartition]],
    ) -> None:
        """Read the conversations of `groups` that are not in memory, then the stored traces
        their steps will need; keep what nothing dropped or wrote meanwhile."""
        missing = [c for c in groups if c not in self._conversations]
        if missing:
            with self._watching() as watch:
                stored = await store.load_many(missing)
            for conversation_id in missing:
                if (
                    conversation_id in self._conversations  # read by a turn meanwhile
                    or conversation_id in watch.dropped
                    or partitions[conversation_id] & watch.revoked
                ):
                    continue
                first = min(groups[conversation_id], key=turn_order_key)
                conv = ConversationState.of(conversation_id, first.agent, stored[conversation_id])
                conv.partitions.update(partitions[conversation_id])
                self._conversations[conversation_id] = conv
            self._evict_over_limit()
            self._metrics.active.set(len(self._conversations))
        wanted: dict[str, list[str]] = {}
        for conversation_id, batch_traces in groups.items():
            held = self._conversations.get(conversation_id)
            if held is not None:
                needed = held.needed_by(batch_traces)
                if needed:
                    wanted[conversation_id] = needed
        if not wanted:
            return
        with self._watching() as watch:
            found = await store.traces([t for ids in wanted.values() for t in ids])
        for conversation_id, ids in wanted.items():
            held = self._conversations.get(conversation_id)
            if held is None or conversation_id in watch.dropped:
                continue
            known = held.known if held.known is not None else {}
            for trace_id in ids:
                if trace_id not in watch.written:
                    known[trace_id] = found.get(trace_id, StoredTrace())
            held.known = known

    @contextmanager
    def _watching(self) -> Iterator[_Watch]:
        """What is dropped, revoked or written while a batch reads the store."""
        watch = _Watch()
        self._watches.append(watch)
        try:
            yield watch
        finally:
            self._watches.remove(watch)

    async def _stored_traces(
        self, conv: ConversationState, trace_ids: Sequence[str]
    ) -> dict[str, StoredTrace]:
        """What is stored of these traces of the conversation: from what its batch read, when
        that has them all (kept as the steps write), else from the store."""
        assert self._store is not None
        known = conv.known
        if known is not None and all(t in known for t in trace_ids):
            found = {t: known[t] for t in trace_ids}
            return {t: s for t, s in found.items() if s.turn is not None or s.results}
        return await self._store.traces(trace_ids)

    def _written(self, conv: ConversationState, step: ConversationStep) -> None:
        """Keep what the conversation's batch read as the store has it after `step`."""
        for watch in self._watches:
            watch.written.update(r.trace_id for r in step.turns)
            watch.written.update(s.result.trace_id for s in step.results)
        known = conv.known
        if known is None:
            return
        for row in step.turns:
            if row.trace_id in known:
                known[row.trace_id] = replace(known[row.trace_id], turn=row)
        for stored in step.results:
            trace_id = stored.result.trace_id
            if trace_id in known:
                results = {**known[trace_id].results, stored.evaluator: stored}
                known[trace_id] = replace(known[trace_id], results=results)

    def _dropped(self, conversation_id: str) -> None:
        del self._conversations[conversation_id]
        for watch in self._watches:
            watch.dropped.add(conversation_id)

    async def observe(self, trace: Trace, result: EvaluationResult) -> None:
        """Number the trace's turn and record one result for it (no store, no publishing)."""
        async with self.turn(trace) as turn:
            if turn is not None:
                await turn.record(result)

    async def _prepare(
        self,
        turn: Turn,
        conv: ConversationState,
        stored: StoredTrace,
        result: EvaluationResult,
        count: bool,
    ) -> Step:
        trace, number = turn.trace, turn.number
        previous = conv.evaluators.get(trace.trace_id)
        rank = EVALUATOR_RANK.get(result.evaluator, 0)
        row: TurnRow | None = None
        verdicts: list[ConstraintVerdict] = []
        outcomes: dict[str, float] = {}
        carried: list[Constraint] | None = None
        # A judge's values in the turn row are not overwritten by tier 0.
        if previous is None or EVALUATOR_RANK.get(previous, 0) <= rank:
            verdicts, outcomes, judgement, carried = await self._constraints(conv, trace, result)
            if judgement is not None:
                result = judgement.charged_to(result)  # every token spent judging this trace
            row = self._row(trace, number, result, verdicts, outcomes, conv)
        moved = {
            trace_id: correct
            for trace_id, turn_now in conv.stored_turns.items()
            if (correct := conv.turn_of(trace_id)) is not None and correct != turn_now
        }
        moved_rows: list[TurnRow] = []
        moved_results: list[StoredResult] = []
        if moved and self._store is not None:
            new = trace.trace_id not in conv.stored_turns
            found_traces = await self._stored_traces(conv, sorted({*moved, trace.trace_id}))
            owner = found_traces.get(trace.trace_id, StoredTrace()).turn
            if new and owner is not None and owner.conversation_id != turn.conversation_id:
                # the step would fail on it: say so before anything of it is published
                raise TraceIdConflict(
                    f"trace {trace.trace_id!r} is already a turn of another conversation"
                )
            for trace_id, found in found_traces.items():
                if trace_id not in moved:
                    continue
                correct = moved[trace_id]
                if found.turn is not None and not (trace_id == trace.trace_id and row):
                    drift = _drift(correct, found.turn.detail.get("constraints", []))
                    moved_rows.append(replace(found.turn, turn=correct, drift=drift))
                for evaluator, kept in found.results.items():
                    if trace_id == trace.trace_id and evaluator == result.evaluator:
                        continue  # replaced by this result
                    renumbered = kept.result.model_copy(update={"turn": correct})
                    moved_results.append(replace(kept, result=renumbered))
        return Step(
            result, row, moved, moved_rows, moved_results, carried, verdicts, outcomes, count
        )

    async def _commit(
        self,
        turn: Turn,
        conv: ConversationState,
        step: Step,
        stored: StoredResult | None,
        unchanged: bool,
    ) -> None:
        trace, number = turn.trace, turn.number
        settled = conv.stored_turns.get(trace.trace_id) == number
        rows = list(step.moved_rows)
        if step.row is not None and not (unchanged and settled):
            rows.append(step.row)
        results = list(step.moved_results) + ([stored] if stored is not None else [])
        if self._store is not None:
            write = ConversationStep(turn.conversation_id, conv.agent, rows, results, step.carried)
            if write:
                await self._store.write(write, owned=current_owner())
                self._written(conv, write)
        turn.recorded = True
        previous = conv.evaluators.get(trace.trace_id)
        if step.row is not None:
            conv.evaluators[trace.trace_id] = step.result.evaluator
            if self._store is not None:
                conv.stored_turns[trace.trace_id] = number
        for trace_id, correct in step.moved.items():
            if self._store is not None:
                conv.stored_turns[trace_id] = correct
        if step.moved:
            self._metrics.renumbered.inc(len(step.moved))
        if step.carried is not None:
            conv.carried = step.carried
        if number >= conv.last_turn and trace.memory_tokens is not None:
            conv.last_memory = trace.memory_tokens
        if step.row is not None and previous != step.result.evaluator and step.count:
            self._export(trace, number, step, first_time=previous is None)

    async def _conversation(self, conversation_id: str, agent: str) -> ConversationState:
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = await self._load(conversation_id, agent)
            self._conversations[conversation_id] = conv
            self._evict_over_limit()
        else:
            self._conversations.move_to_end(conversation_id)
        conv.last_seen = time.monotonic()
        self._metrics.active.set(len(self._conversations))
        return conv

    async def _constraints(
        self,
        conv: ConversationState,
        trace: Trace,
        result: EvaluationResult,
    ) -> tuple[list[ConstraintVerdict], dict[str, float], Any, list[Constraint] | None]:
        """The turn's constraint verdicts and outcome scores, the turn judge's judgement (None
        when it did not run: no judge, or not the judge's result), and the conversation's
        carried constraints when the judgement changed them."""
        explicit = list(trace.constraints or [])
        ids = {c.id for c in explicit}
        active = explicit + [c for c in conv.carried if c.id not in ids]
        verdicts = {c.id: check_constraint(c, trace.answer) for c in active}
        outcomes: dict[str, float] = {}
        if self._judge is None or result.evaluator != "llm":
            return list(verdicts.values()), outcomes, None, None
        check_owned()  # a trace whose partition moved is judged by its next owner
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
        carried = carried[-MAX_CARRIED_CONSTRAINTS:]
        outcomes = {k: v for k, v in judgement.outcomes.items() if v is not None}
        changed = carried if carried != conv.carried else None
        return list(verdicts.values()), outcomes, judgement, changed

    def _row(
        self,
        trace: Trace,
        turn: int,
        result: EvaluationResult,
        verdicts: Sequence[ConstraintVerdict],
        outcomes: dict[str, float],
        conv: ConversationState,
    ) -> TurnRow:
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
        start_us = conv.starts.get(trace.trace_id)
        if start_us is not None:
            detail["start_us"] = start_us  # numbered by start: renumbered when one comes earlier
        assert trace.conversation_id is not None
        return TurnRow(
            conversation_id=trace.conversation_id,
            trace_id=trace.trace_id,
            turn=turn,
            agent=trace.agent,
            timestamp=trace.timestamp,
            evaluator=result.evaluator,
            hallucination=hallucination,
            drift=_drift(turn, constraints),
            memory_tokens=trace.memory_tokens,
            detail=detail,
        )

    def _export(self, trace: Trace, turn: int, step: Step, first_time: bool) -> None:
        m = self._metrics
        assert step.row is not None
        agent = m.agent_label(trace.agent)
        bucket = turn_bucket(turn)
        evaluator = step.result.evaluator
        if step.row.hallucination is not None:
            m.hallucination_series(agent, evaluator, bucket).observe(step.row.hallucination)
        for name, value in step.outcomes.items():
            m.outcome_series(agent, name).observe(value)
        if not first_time:
            return  # drift, memory and constraint counts are per turn, whichever evaluator
        if step.row.drift is not None:
            m.drift_series(agent, bucket).observe(step.row.drift)
        if trace.memory_tokens is not None:
            m.memory_series(agent).observe(trace.memory_tokens)
        m.count_constraint_checks(trace.agent, step.verdicts)

    async def _load(self, conversation_id: str, agent: str) -> ConversationState:
        """The conversation as stored (see `ConversationState.of`)."""
        if self._store is None:
            return ConversationState(agent)
        return ConversationState.of(conversation_id, agent, await self._store.load(conversation_id))

    def _evict_over_limit(self) -> None:
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
            self._dropped(conversation_id)  # its state is in the store already
            self._metrics.evicted.labels("lru").inc()

    async def expire(self, now: float | None = None) -> int:
        """End conversations idle longer than `idle_seconds`: observe M_T, drop."""
        now = time.monotonic() if now is None else now
        ended = 0
        for conversation_id, conv in list(self._conversations.items()):
            if now - conv.last_seen < self._config.idle_seconds:
                break
            if conversation_id in self._locks:
                continue  # a turn of it is being processed right now, or a batch holds it
            self._dropped(conversation_id)
            ended += 1
            if conv.last_memory is not None:
                self._metrics.final_memory.labels(self._metrics.agent_label(conv.agent)).observe(
                    conv.last_memory
                )
            self._metrics.evicted.labels("expired").inc()
        self._metrics.active.set(len(self._conversations))
        return ended

    def forget_partitions(self, revoked: set[TopicPartition]) -> int:
        """Drop the conversations read from revoked partitions: their next turns are another
        replica's now, and if the partitions come back the store has what it wrote meanwhile.
        A conversation reloads when seen again; every step was written as it committed, so
        nothing is left to save. Returns how many were dropped."""
        for watch in self._watches:
            watch.revoked.update(revoked)
        gone = [key for key, conv in self._conversations.items() if conv.partitions & revoked]
        for conversation_id in gone:
            self._dropped(conversation_id)
        self._metrics.active.set(len(self._conversations))
        return len(gone)


def _drift(turn: int, constraints: Sequence[dict[str, Any]]) -> float | None:
    """D_t from a turn's constraint verdicts; None at turn 1 and when nothing was measured."""
    statuses = [c.get("status") for c in constraints if isinstance(c, dict)]
    violated, omitted = statuses.count("violated"), statuses.count("omitted")
    measured = len(statuses) - statuses.count("unmeasured")
    if turn >= 2 and (measured or not statuses):
        return drift_rate(violated, omitted, measured)
    return None
