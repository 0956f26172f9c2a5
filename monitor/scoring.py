"""The scoring stage: tier 0 on every trace, the LLM judge on a sample, results to every sink.

A trace is finished (its offset committable) once its results are stored and published, and,
when it was sampled, once the judge has answered or given up. Judge work beyond the queue bound
is shed and counted; it never blocks consumption.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from monitor.evaluate.sampler import Sampler
from monitor.export.results import ResultsPublisher
from monitor.export.scoring_metrics import ScoringMetrics
from monitor.export.span_events import add_evaluation_events
from monitor.models import EvaluationResult, StatementVerdict, Trace
from monitor.store import Store

log = structlog.get_logger(__name__)

DEFAULT_OFFLOAD_CHARS = 50_000
"""Traces with more text than this (query, answer and contexts) are scored by tier 0 in a worker
thread: about 0.1 s of CPU at this size, which would otherwise hold the event loop (and with it
the Kafka fetcher, the probes and every other trace). Smaller ones run inline, which is cheaper
than a thread hop."""

ResultObserver = Callable[[Trace, EvaluationResult], Awaitable[None]]


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
    ) -> None:
        self._tier0 = tier0
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
        self.observers: list[ResultObserver] = []

    async def process(self, trace: Trace) -> None:
        tier0 = await self._tier0_result(trace)
        judging = self._judge_if_sampled(trace, tier0)
        await self._emit(trace, tier0)
        if judging is not None:
            judged = await judging
            if judged is not None:
                await self._emit(trace, judged)

    async def _tier0_result(self, trace: Trace) -> EvaluationResult:
        size = len(trace.query) + len(trace.answer) + sum(len(c.text) for c in trace.contexts)
        if size > self._offload_chars:
            # The GIL still serialises the work, but the loop gets its turn every switch
            # interval (5 ms) instead of waiting for the whole evaluation.
            return await asyncio.to_thread(self._tier0.evaluate, trace)
        return self._tier0.evaluate(trace)

    def _judge_if_sampled(
        self, trace: Trace, tier0: EvaluationResult
    ) -> asyncio.Task[EvaluationResult | None] | None:
        agent = self._metrics.agent_label(trace.agent)
        self._sampler.observe_queue(self._judge_depth)
        self._metrics.effective_rate.labels(agent).set(self._sampler.effective_rate(trace.agent))
        if self._judge is None:
            return None
        decision = self._sampler.decide(trace, tier0)
        if decision == "skipped":
            self._metrics.sampler_decisions.labels(agent, "skipped").inc()
            return None
        shed_reason = None
        if decision == "rate_lowered":
            shed_reason = "rate_lowered"
        elif self._judge.circuit_open:
            shed_reason = "circuit_open"
        elif not self._sampler.budget_allows():
            shed_reason = "token_budget"
        elif self._judge_depth >= self._sampler.config.queue_size:
            shed_reason = "queue_full"
        if shed_reason is not None:
            self._metrics.sampler_decisions.labels(agent, "shed").inc()
            self._metrics.sampler_shed.labels(agent, shed_reason).inc()
            return None
        self._metrics.sampler_decisions.labels(agent, decision).inc()
        self._judge_depth += 1
        self._metrics.judge_queue.set(self._judge_depth)
        return asyncio.create_task(self._run_judge(trace))

    async def _run_judge(self, trace: Trace) -> EvaluationResult | None:
        assert self._judge is not None
        try:
            async with self._judge_slots:
                result = await self._judge.evaluate(trace)
        finally:
            self._judge_depth -= 1
            self._metrics.judge_queue.set(self._judge_depth)
        return result  # its tokens were charged to the sampler's budget by the judge client

    async def _emit(self, trace: Trace, result: EvaluationResult) -> None:
        self._metrics.record(result)
        add_evaluation_events(result)
        writes = []
        if self._store is not None:
            writes.append(self._save(trace, result))
        if self._publisher is not None:
            writes.append(self._publish(result))
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
