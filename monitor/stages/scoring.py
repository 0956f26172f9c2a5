"""The scoring stage: tier 0 on every trace, the LLM judge on a sample, results to every sink.

One path per trace: the conversation stage numbers the turn (waiting for the conversation's
earlier turns), the evaluators run on the numbered trace, and each result goes to the results
topic, then to the store (with the conversation's turn row and the turns it moved, in one
step) and the metrics. A trace is finished (its offset committable) once its results are
published and stored, and, when it was sampled, once the judge has answered or given up. Judge
work beyond the queue bound is shed and counted; it never blocks consumption. Offline scoring
(``shed_load=False``) asked for every trace to be judged: nothing is shed for load (queue,
lowered rate, open circuit) there; the token budget, a spending cap the user set, still
applies. With a judge, each trace's tier-0 predictions of the judge's scores (by the calibration
of when the trace was read, not of when it is scored) are counted for the population estimates,
and a judged result carries its `selection` (why it was judged) and, from the uniform draw,
joins the estimates' sample (monitor.estimates).

Tier 0 checks the constraints a trace carries (those with a `kind`), with or without a
conversation; the judge's result carries the same verdicts. The verdicts of a trace without a
conversation are counted here (`ragmon_constraint_checks_total`), those of a conversation turn by
the conversation stage, which also checks the constraints carried from earlier turns.

Published before stored, so a stored result was published: a re-delivered trace of a
conversation (read again after a crash or a rebalance) whose result comes out the same as the
stored one (the judge's verdict is the one it gave before: `LLMJudge`'s durable verdicts) is
neither published nor written again (`ragmon_results_published_total{outcome="unchanged"}`). A
result is published again only when something in it changed (its turn, its scores).

Traces the OTLP stage assembled carry what assembly knew (`Trace.assembly`): whether they were
whole when released (if not, every result gets the `incomplete_trace` flag) and their revision
(re-assembled after late spans: its results are upserted over the earlier ones, but the
metrics, which counted the trace once already, are not counted again).

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog
from aiokafka.structs import TopicPartition

from monitor.estimates.recorder import EstimateRecorder
from monitor.evaluators.sampler import Sampler
from monitor.faults import check_owned
from monitor.models import (
    ConstraintVerdict,
    EvaluationResult,
    Selection,
    StatementVerdict,
    Trace,
)
from monitor.sinks.conversations import TraceIdConflict
from monitor.sinks.results import ResultsPublisher
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.sinks.span_events import add_evaluation_events
from monitor.sinks.store import Store, StoredResult
from monitor.stages.read_time import current_read_at
from monitor.typing import Judge, SyncEvaluator, TextRedactor

if TYPE_CHECKING:
    from monitor.stages.conversation import ConversationTracker, Turn

log = structlog.get_logger(__name__)

DEFAULT_OFFLOAD_CHARS = 50_000
"""Traces with more text than this (query, answer and contexts) are scored by tier 0 in a worker
thread: about 0.1 s of CPU at this size, which would otherwise hold the event loop (and with it
the Kafka fetcher, the probes and every other trace). Smaller ones run inline, which is cheaper
than a thread hop."""

ResultObserver = Callable[[Trace, EvaluationResult], Awaitable[None]]
INCOMPLETE_FLAG = "incomplete_trace"


def revision(trace: Trace) -> int:
    """1 for a trace seen the first time; more for a re-assembly after late spans."""
    return trace.assembly.revision if trace.assembly is not None else 1


def incomplete(trace: Trace) -> bool:
    """Released by the OTLP stage before it was whole."""
    return trace.assembly is not None and not trace.assembly.complete


async def scored_whole(store: Store, evaluator: str, trace_id: str) -> bool:
    """The store holds `evaluator`'s result of the whole trace (not of a fragment of it)."""
    stored = await store.get_result(trace_id, evaluator)
    return stored is not None and INCOMPLETE_FLAG not in stored.flags


def redact_result(result: EvaluationResult, redactor: TextRedactor) -> EvaluationResult:
    """The result with statement texts and reasons passed through the redactor (the result
    itself when nothing in it needed redacting: most results, and a copy costs more than the
    redaction)."""
    statements: list[StatementVerdict] = []
    changed = False
    for v in result.statements:
        statement = redactor.redact(v.statement)
        reason = redactor.redact(v.reason) if v.reason else v.reason
        if statement == v.statement and reason == v.reason:
            statements.append(v)
            continue
        changed = True
        statements.append(v.model_copy(update={"statement": statement, "reason": reason}))
    return result.model_copy(update={"statements": statements}) if changed else result


class ScoringProcessor:
    def __init__(
        self,
        *,
        tier0: SyncEvaluator,
        metrics: ScoringMetrics,
        sampler: Sampler,
        judge: Judge | None = None,
        judge_concurrency: int = 4,
        store: Store | None = None,
        publisher: ResultsPublisher | None = None,
        store_redactor: TextRedactor | None = None,
        results_redactor: TextRedactor | None = None,
        offload_chars: int = DEFAULT_OFFLOAD_CHARS,
        conversations: ConversationTracker | None = None,
        on_skip: Callable[[str], None] | None = None,
        shed_load: bool = True,
        count_constraints: Callable[[str, Sequence[ConstraintVerdict]], None] | None = None,
        estimates: EstimateRecorder | None = None,
    ) -> None:
        self._tier0 = tier0
        self._shed_load = shed_load
        self._offload_chars = offload_chars
        self._metrics = metrics
        self._sampler = sampler
        self._judge = judge
        self._judge_slots = asyncio.Semaphore(judge_concurrency)
        self._judge_depth = 0
        self._store = store
        self._publisher = publisher
        self._store_redactor = store_redactor
        self._results_redactor = results_redactor
        # A stored result is then already what the results topic gets: publish it as it is.
        self._stored_is_published = store is not None and store_redactor is results_redactor
        self._conversations = conversations
        self._on_skip = on_skip
        self._count_constraint_checks = count_constraints
        self._estimates = estimates
        self.observers: list[ResultObserver] = []
        metrics.input_share.set(sampler.input_share)

    def set_input_share(self, share: float) -> None:
        """This replica's share of the input it scores (its partitions of the score stage's
        topics over all of them), which scales the sampler's floor of drawn traces an hour."""
        self._sampler.set_input_share(share)
        self._metrics.input_share.set(self._sampler.input_share)

    async def process(self, trace: Trace) -> None:
        count = revision(trace) == 1
        read_at = current_read_at()
        if read_at is None:  # not from the score stage: read now
            read_at = time.monotonic()
        if incomplete(trace) and await self._has_whole_result(trace):
            # Spans of a trace already scored whole, arriving where nobody remembers it (after a
            # rebalance): they must not overwrite the whole trace's result with a fragment's.
            log.info("fragment of a trace already scored whole; skipped", trace_id=trace.trace_id)
            if self._on_skip is not None:
                self._on_skip("otlp_late_spans")
            return
        async with self._turn(trace) as turn:
            if turn is not None:
                trace = turn.trace
            tier0 = self._flagged(trace, await self._tier0_result(trace))
            if turn is None and count:
                self._count_constraints(tier0)
            selection, judging = self._judge_if_sampled(trace, tier0, read_at, count)
            try:
                await self._emit(trace, tier0, turn, count)
                if judging is not None:
                    judged = await judging
                    if judged is not None:
                        if tier0.constraints and not judged.constraints:
                            judged = judged.model_copy(update={"constraints": tier0.constraints})
                        judged = judged.model_copy(update={"selection": selection})
                        if count and self._estimates is not None and selection is not None:
                            self._estimates.count_judged(trace, tier0, selection, judged)
                        await self._emit(trace, self._flagged(trace, judged), turn, count)
            finally:
                if judging is not None and not judging.done():
                    judging.cancel()  # the trace failed: its verdict is kept by the judge
                elif judging is not None and not judging.cancelled():
                    judging.exception()  # retrieved: the trace's own failure is what counts

    @asynccontextmanager
    async def batch(
        self, traces: Sequence[tuple[Trace, Collection[TopicPartition]]]
    ) -> AsyncIterator[None]:
        """Held while the score stage processes a batch: the conversations of its traces are
        read together and kept in memory (`ConversationTracker.batch`)."""
        if self._conversations is None:
            yield
            return
        async with self._conversations.batch(traces):
            yield

    def _count_constraints(self, result: EvaluationResult) -> None:
        if self._count_constraint_checks is not None:
            self._count_constraint_checks(result.agent, result.constraints)

    @asynccontextmanager
    async def _turn(self, trace: Trace) -> AsyncIterator[Turn | None]:
        if self._conversations is None:
            yield None
            return
        async with self._conversations.turn(trace) as turn:
            yield turn

    async def _has_whole_result(self, trace: Trace) -> bool:
        if self._store is None:
            return False
        return await scored_whole(self._store, self._tier0.name, trace.trace_id)

    @staticmethod
    def _flagged(trace: Trace, result: EvaluationResult) -> EvaluationResult:
        if not incomplete(trace) or INCOMPLETE_FLAG in result.flags:
            return result
        return result.model_copy(update={"flags": [*result.flags, INCOMPLETE_FLAG]})

    async def _tier0_result(self, trace: Trace) -> EvaluationResult:
        size = len(trace.query) + len(trace.answer) + sum(len(c.text) for c in trace.contexts)
        if size > self._offload_chars:
            # The GIL still serialises the work, but the loop gets its turn every switch
            # interval (5 ms) instead of waiting for the whole evaluation.
            return await asyncio.to_thread(self._tier0.evaluate, trace)
        return self._tier0.evaluate(trace)

    def _judge_if_sampled(
        self, trace: Trace, tier0: EvaluationResult, read_at: float, count: bool = True
    ) -> tuple[Selection | None, asyncio.Task[EvaluationResult | None] | None]:
        """The trace's selection for the judge (None without a judge) and the judge's task,
        when it is judged; its predictions for the estimates are those of when it was read
        (`read_at`, a time.monotonic() reading)."""
        agent = self._metrics.agent_label(trace.agent)
        self._sampler.observe_queue(self._judge_depth)
        if self._judge is None:
            self._metrics.rate_series(agent).set(self._sampler.effective_rate(trace.agent))
            return None, None
        choice = self._sampler.select(trace, tier0, count)
        self._metrics.rate_series(agent).set(choice.selection.inclusion_probability)
        selection, decision = choice.selection, choice.decision
        if self._estimates is not None:
            predictions = self._estimates.predict(trace, tier0, read_at)
            selection = selection.model_copy(update={"predictions": predictions})
            if count:
                self._estimates.count_traffic(trace.agent, predictions)
        if count and selection.priority is not None:
            self._metrics.sampler_priorities.labels(agent, selection.priority).inc()
        if decision in ("skipped", "priority_capped"):
            if count:
                self._metrics.sampler_decisions.labels(agent, decision).inc()
            return selection, None
        shed_reason = self._shed_reason(decision)
        if shed_reason is not None:
            if count:
                self._metrics.sampler_decisions.labels(agent, "shed").inc()
                self._metrics.sampler_shed.labels(agent, shed_reason).inc()
            return selection, None
        if count:
            self._metrics.sampler_decisions.labels(agent, decision).inc()
        self._judge_depth += 1
        self._metrics.judge_queue.set(self._judge_depth)
        return selection, asyncio.create_task(self._run_judge(trace))

    def _shed_reason(self, decision: str) -> str | None:
        """Why judge work is dropped now, or None to judge the trace."""
        assert self._judge is not None
        if not self._shed_load:
            return None if self._sampler.budget_allows() else "token_budget"
        if decision == "rate_lowered":
            return "rate_lowered"
        if self._judge.circuit_open:
            return "circuit_open"
        if not self._sampler.budget_allows():
            return "token_budget"
        if self._judge_depth >= self._sampler.config.queue_size:
            return "queue_full"
        return None

    async def _run_judge(self, trace: Trace) -> EvaluationResult | None:
        assert self._judge is not None
        try:
            async with self._judge_slots:
                check_owned()  # a trace whose partition moved is judged by its next owner
                result = await self._judge.evaluate(trace)
        finally:
            self._judge_depth -= 1
            self._metrics.judge_queue.set(self._judge_depth)
        return result  # its tokens were charged to the sampler's budget by the judge client

    async def _emit(
        self, trace: Trace, result: EvaluationResult, turn: Turn | None, count: bool = True
    ) -> None:
        if count:
            self._metrics.record(result)
        add_evaluation_events(result)
        if turn is None:
            stored = self._stored(trace, result) if self._store is not None else None
            await self._publish_all(*self._publishable([result], stored))
            if stored is not None:
                await self._save(stored)
        else:
            result = await self._emit_turn(trace, result, turn, count)
        for observer in self.observers:
            await observer(trace, result)

    async def _emit_turn(
        self, trace: Trace, result: EvaluationResult, turn: Turn, count: bool
    ) -> EvaluationResult:
        """Publish what changed, then write the conversation's step; the result emitted (an
        `llm` result with the turn judge's tokens added, when the turn judge ran)."""
        step = await turn.prepare(result, count=count)
        result = step.result
        stored = self._stored(trace, result) if self._store is not None else None
        prior = turn.prior.get(result.evaluator)
        unchanged = prior is not None and stored is not None and _same(prior, stored)
        moved = [m.result for m in step.moved_results]
        await self._publish_all(*self._publishable([] if unchanged else [result], stored, moved))
        if unchanged:
            self._metrics.published("unchanged").inc()
        try:
            await turn.commit(step, None if unchanged else stored, unchanged=unchanged)
        except TraceIdConflict:
            # Published already: publish the stored results of that trace id again, so the
            # last record of each is the conversation's that has it.
            await self._publish_all(
                await self._stored_of(trace.trace_id), redacted=self._stored_is_published
            )
            raise
        except Exception:
            if self._store is not None:
                self._metrics.written("error").inc()
            raise
        if self._store is not None:
            self._metrics.written("unchanged" if unchanged else "ok").inc()
        return result

    def _stored(self, trace: Trace, result: EvaluationResult) -> StoredResult:
        """The result as the store keeps it (redacted as configured, with the question and
        answer), scored now."""
        redactor = self._store_redactor
        query, answer = trace.query, trace.answer
        if redactor is not None:
            result = redact_result(result, redactor)
            query, answer = redactor.redact(query), redactor.redact(answer)
        return StoredResult(result, query, answer, datetime.now(UTC))

    async def _stored_of(self, trace_id: str) -> list[EvaluationResult]:
        if self._store is None:
            return []
        return [s.result for s in await self._store.stored_results([trace_id])]

    async def _save(self, stored: StoredResult) -> None:
        assert self._store is not None
        try:
            await self._store.save(stored.result, stored.query, stored.answer, stored.scored_at)
        except Exception:
            self._metrics.written("error").inc()
            raise
        self._metrics.written("ok").inc()

    def _publishable(
        self,
        fresh: list[EvaluationResult],
        stored: StoredResult | None,
        from_store: Sequence[EvaluationResult] = (),
    ) -> tuple[list[EvaluationResult], bool]:
        """The results to publish (`fresh`, then those read back from the store) and whether
        they are redacted already: when the store's redaction is the results topic's, the
        stored version stands in for the fresh result, so nothing is redacted twice."""
        if not self._stored_is_published:
            return [*fresh, *from_store], False
        published = [stored.result] if fresh and stored is not None else []
        return [*published, *from_store], True

    async def _publish_all(
        self, results: Sequence[EvaluationResult], redacted: bool = False
    ) -> None:
        """Publish, unless the trace is no longer ours (its partition was revoked)."""
        if self._publisher is None or not results:
            return
        check_owned()
        if len(results) == 1:  # nearly always: no task for it
            await self._publish(results[0], redacted)
        else:
            await asyncio.gather(*(self._publish(r, redacted) for r in results))

    async def _publish(self, result: EvaluationResult, redacted: bool) -> None:
        assert self._publisher is not None
        if self._results_redactor is not None and not redacted:
            result = redact_result(result, self._results_redactor)
        try:
            await self._publisher.publish(result)
        except Exception:
            self._metrics.published("error").inc()
            raise
        self._metrics.published("ok").inc()


def _same(stored: StoredResult, new: StoredResult) -> bool:
    """Nothing changed but how long it took and the bookkeeping of why it was judged (a
    re-delivered trace meets another calibration and load: its `selection` may differ while its
    verdicts do not): not worth storing or publishing again."""
    volatile = {"latency_ms", "selection"}
    return (stored.query, stored.answer) == (new.query, new.answer) and stored.result.model_dump(
        exclude=volatile
    ) == new.result.model_dump(exclude=volatile)
