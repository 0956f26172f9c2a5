"""The scoring stage: tier 0 on every trace, the LLM judge on a sample, results to every sink.

One path per trace: the conversation stage numbers the turn (waiting for the conversation's
earlier turns), the evaluators run on the numbered trace, and each result goes to the
conversation's turn row, the store, the results topic and the metrics. A trace is finished (its
offset committable) once its results are stored and published, and, when it was sampled, once
the judge has answered or given up. Judge work beyond the queue bound is shed and counted; it
never blocks consumption. Offline scoring (``shed_load=False``) asked for every trace to be
judged: nothing is shed for load (queue, lowered rate, open circuit) there; the token budget, a
spending cap the user set, still applies.

Traces the OTLP stage assembled carry what assembly knew in `metadata`: `incomplete_trace`
(released before it was whole: every result gets the `incomplete_trace` flag) and `revision`
(re-assembled after late spans: its results are upserted over the earlier ones, but the
metrics, which counted the trace once already, are not counted again).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol

import structlog

from monitor.evaluators.sampler import Sampler
from monitor.models import EvaluationResult, StatementVerdict, Trace
from monitor.sinks.results import ResultsPublisher
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.sinks.span_events import add_evaluation_events
from monitor.sinks.store import Store

if TYPE_CHECKING:
    from monitor.pipeline.conversation import ConversationTracker, Turn

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
    value = (trace.metadata or {}).get("revision")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def incomplete(trace: Trace) -> bool:
    return (trace.metadata or {}).get(INCOMPLETE_FLAG) is True


class SyncEvaluator(Protocol):
    name: str

    def evaluate(self, trace: Trace) -> EvaluationResult: ...


class Judge(Protocol):
    name: str

    @property
    def circuit_open(self) -> bool: ...

    async def evaluate(self, trace: Trace) -> EvaluationResult: ...


class TextRedactor(Protocol):
    def redact(self, text: str) -> str: ...


def redact_result(result: EvaluationResult, redactor: TextRedactor) -> EvaluationResult:
    """The result with statement texts and reasons passed through the redactor."""
    statements = [
        StatementVerdict(
            statement=redactor.redact(v.statement),
            supported=v.supported,
            evidence_context_id=v.evidence_context_id,
            support=v.support,
            reason=redactor.redact(v.reason) if v.reason else v.reason,
        )
        for v in result.statements
    ]
    return result.model_copy(update={"statements": statements})


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
        self._conversations = conversations
        self._on_skip = on_skip
        self.observers: list[ResultObserver] = []

    async def process(self, trace: Trace) -> None:
        count = revision(trace) == 1
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
            judging = self._judge_if_sampled(trace, tier0, count)
            await self._emit(trace, tier0, turn, count)
            if judging is not None:
                judged = await judging
                if judged is not None:
                    await self._emit(trace, self._flagged(trace, judged), turn, count)

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
        stored = await self._store.get_result(trace.trace_id, self._tier0.name)
        return stored is not None and INCOMPLETE_FLAG not in stored.flags

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
        self, trace: Trace, tier0: EvaluationResult, count: bool = True
    ) -> asyncio.Task[EvaluationResult | None] | None:
        agent = self._metrics.agent_label(trace.agent)
        self._sampler.observe_queue(self._judge_depth)
        self._metrics.effective_rate.labels(agent).set(self._sampler.effective_rate(trace.agent))
        if self._judge is None:
            return None
        decision = self._sampler.decide(trace, tier0)
        if decision == "skipped":
            if count:
                self._metrics.sampler_decisions.labels(agent, "skipped").inc()
            return None
        shed_reason = self._shed_reason(decision)
        if shed_reason is not None:
            if count:
                self._metrics.sampler_decisions.labels(agent, "shed").inc()
                self._metrics.sampler_shed.labels(agent, shed_reason).inc()
            return None
        if count:
            self._metrics.sampler_decisions.labels(agent, decision).inc()
        self._judge_depth += 1
        self._metrics.judge_queue.set(self._judge_depth)
        return asyncio.create_task(self._run_judge(trace))

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
        moved: list[EvaluationResult] = []
        if turn is not None:
            # the turn judge's tokens join the judge's result before it is stored
            result, moved = await turn.record(result, count=count)
        writes = []
        if self._store is not None:
            writes.append(self._save(trace, result))
        if self._publisher is not None:
            writes.append(self._publish(result))
            writes += [self._publish(other) for other in moved]  # their turn moved up
        if writes:
            await asyncio.gather(*writes)
        for observer in self.observers:
            await observer(trace, result)

    async def _save(self, trace: Trace, result: EvaluationResult) -> None:
        assert self._store is not None
        redactor = self._store_redactor
        query, answer = trace.query, trace.answer
        if redactor is not None:
            result = redact_result(result, redactor)
            query, answer = redactor.redact(query), redactor.redact(answer)
        try:
            await self._store.save(result, query=query, answer=answer)
        except Exception:
            self._metrics.store_writes.labels("error").inc()
            raise
        self._metrics.store_writes.labels("ok").inc()

    async def _publish(self, result: EvaluationResult) -> None:
        assert self._publisher is not None
        if self._results_redactor is not None:
            result = redact_result(result, self._results_redactor)
        try:
            await self._publisher.publish(result)
        except Exception:
            self._metrics.results_published.labels("error").inc()
            raise
        self._metrics.results_published.labels("ok").inc()
