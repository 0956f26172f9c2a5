"""Answer judges for generation suites: the configured judge endpoint scoring each answer.

Two implementations of :class:`~monitor.golden.answers.AnswerJudge`, chosen by
``judge.backend`` (:func:`open_answer_judge`). Both score, per case with an answer:

- against the case's ``reference`` (unmeasured ``no_reference`` without one): answer
  correctness (0.75 statement F1 + 0.25 semantic similarity), semantic similarity, context
  recall;
- reference-free golden-set measures: faithfulness, answer relevancy, context
  relevancy.

:class:`LLMAnswerJudge` (``llm``): one ``ragmon_reference`` chat call (statement verdicts
TP/FP/FN and the reference sentences' attribution to the contexts, see
:mod:`monitor.evaluators.judge_reference`) and one embeddings request for the similarity of
answer and reference (``judge.embedding_model``), plus the production judge's two calls
(:class:`~monitor.evaluators.llm.LLMJudge`) for the reference-free measures -- all on one client,
so one circuit breaker and one concurrency bound. :class:`RagasAnswerJudge` (``ragas``):
ragas's ``AnswerCorrectness``, ``SemanticSimilarity``, ``ContextRecall``, ``Faithfulness`` and
``AnswerRelevancy`` through :class:`~monitor.evaluators.ragas_adapter.RagasEvaluator` (ragas 0.4
has no context relevancy: unmeasured ``not_scored_by_ragas``).

Both redact everything sent (``judge.redaction``) and send at most ``max_context_chunks``
contexts of at most ``max_chars_per_chunk`` characters. A metric that cannot be computed is
unmeasured with its reason (``judge_timeout``, ``malformed_output``, ``no_contexts``,
``no_embedding_model``, ...), never 0. Answer correctness needs both of its parts: when the
similarity is unmeasured, so is correctness.

Token use and cost are counted in the judge metrics under ``evaluator="golden"`` (``llm``
backend) or ``evaluator="ragas"``, against the daemon's token budget (when given one), and in
each case's result (:attr:`JudgeScores.tokens`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Final

from prometheus_client import CollectorRegistry

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_client import CallFailure, cosine_similarity
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.judge_prompts import prompt_language, truncate
from monitor.evaluators.judge_reference import (
    ReferenceInput,
    ReferenceVerdicts,
    answer_correctness,
    parse_reference,
    reference_prompt,
)
from monitor.evaluators.llm import LLMJudge
from monitor.evaluators.ragas_adapter import RagasEvaluator
from monitor.evaluators.redaction import Redactor
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenTally
from monitor.golden.answers import (
    REFERENCE_FREE_METRICS,
    REFERENCE_METRICS,
    AnswerJudge,
    JudgeScores,
)
from monitor.golden.dataset import GenerationCase
from monitor.models import Context, EvaluationResult, Score, Trace, Usage

GOLDEN_EVALUATOR: Final = "golden"


def _as_trace(case: GenerationCase, answer: str, contexts: Sequence[str]) -> Trace:
    """The case as a trace, for the evaluators that score traces."""
    return Trace(
        trace_id=f"golden-{case.id}",
        timestamp=datetime.now(UTC),
        query=case.question,
        answer=answer,
        contexts=[Context(id=f"c{i}", text=text) for i, text in enumerate(contexts, 1)],
        language=case.language,
        reference=case.reference,
    )


def _with_free_scores(
    scores: JudgeScores, result: EvaluationResult, spent: Usage | None = None
) -> JudgeScores:
    """`scores` plus the reference-free measures of `result` (unmeasured with their reasons;
    ``not_scored_by_<evaluator>`` where the evaluator has no such metric), and the tokens of
    `result` and `spent` together."""
    found = {
        name: result.scores.get(name, Score.unmeasured(f"not_scored_by_{result.evaluator}"))
        for name in REFERENCE_FREE_METRICS
    }
    unmeasured = {n: s.reason or "judge_error" for n, s in found.items() if s.value is None}
    return dataclasses.replace(
        scores,
        faithfulness=found["faithfulness"].value,
        answer_relevancy=found["answer_relevancy"].value,
        context_relevancy=found["context_relevancy"].value,
        unmeasured={**scores.unmeasured, **unmeasured},
        input_tokens=_total(u.input_tokens if u else None for u in (result.tokens, spent)),
        output_tokens=_total(u.output_tokens if u else None for u in (result.tokens, spent)),
    )


def _total(counts: Iterable[int | None]) -> int | None:
    """The sum of the reported counts; None when none was reported."""
    reported = [c for c in counts if c is not None]
    return sum(reported) if reported else None


class _GoldenTraceJudge(LLMJudge):
    """The production judge's reference-free prompts, its spend counted as ``golden``."""

    name = GOLDEN_EVALUATOR


class LLMAnswerJudge:
    """Answer metrics with rag-monitor's own prompts (see the module docs)."""

    def __init__(
        self,
        config: JudgeConfig,
        metrics: JudgeMetrics | None = None,
        budget: TokenBudget | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else JudgeMetrics(CollectorRegistry())
        self.redactor = Redactor(config.redaction)
        self.trace_judge = _GoldenTraceJudge(config, self.metrics, budget=budget)
        self.client = self.trace_judge.client  # one endpoint: one circuit, one concurrency bound

    async def aclose(self) -> None:
        await self.trace_judge.aclose()

    def _input(self, trace: Trace) -> ReferenceInput:
        cfg, redact = self.config, self.redactor.redact
        shown = tuple(
            truncate(redact(c.text), cfg.max_chars_per_chunk)
            for c in [c for c in trace.contexts if c.text.strip()][: cfg.max_context_chunks]
        )
        return ReferenceInput.build(
            prompt_language(trace),
            redact(trace.query),
            redact(trace.answer),
            redact(trace.reference or ""),
            shown,
        )

    async def _verdicts(
        self, inp: ReferenceInput, tally: TokenTally, case_id: str
    ) -> ReferenceVerdicts | CallFailure:
        try:
            return await self.client.complete(
                reference_prompt(inp), lambda d: parse_reference(d, inp), tally, case_id
            )
        except CallFailure as failure:
            return failure

    async def _similarity(self, inp: ReferenceInput, tally: TokenTally, case_id: str) -> Score:
        model = self.config.embedding_model
        if model is None:
            return Score.unmeasured("no_embedding_model")
        reference = " ".join(inp.reference_sentences)
        try:
            vectors = await self.client.embed([inp.answer, reference], model, tally, case_id)
        except CallFailure as failure:
            return Score.unmeasured(failure.reason)
        value = cosine_similarity(vectors[0], vectors[1])
        if value is None:
            return Score.unmeasured("malformed_output")
        return Score.of(max(0.0, min(1.0, value)))  # a negative cosine is no similarity

    async def judge(
        self, case: GenerationCase, answer: str, contexts: Sequence[str]
    ) -> JudgeScores:
        trace = _as_trace(case, answer, contexts)
        tally = TokenTally()
        reference, evaluated = await asyncio.gather(
            self._against_reference(trace, case.id, tally), self.trace_judge.evaluate(trace)
        )
        return _with_free_scores(reference, evaluated, tally.usage())

    async def _against_reference(
        self, trace: Trace, case_id: str, tally: TokenTally
    ) -> JudgeScores:
        inp = self._input(trace)
        if not inp.reference_sentences:
            return JudgeScores(unmeasured=dict.fromkeys(REFERENCE_METRICS, "no_reference"))
        verdicts, similarity = await asyncio.gather(
            self._verdicts(inp, tally, case_id), self._similarity(inp, tally, case_id)
        )
        unmeasured: dict[str, str] = {}
        if similarity.reason is not None:
            unmeasured["semantic_similarity"] = similarity.reason
        if isinstance(verdicts, CallFailure):
            unmeasured["answer_correctness"] = verdicts.reason
            unmeasured["context_recall"] = verdicts.reason
            return JudgeScores(
                semantic_similarity=similarity.value,
                reason=f"reference judge failed: {verdicts.detail}",
                unmeasured=unmeasured,
            )
        correctness: float | None = None
        f1 = verdicts.statement_f1()
        if f1 is None:
            unmeasured["answer_correctness"] = "no_claims"
        elif similarity.value is None:
            unmeasured["answer_correctness"] = f"semantic_similarity_{similarity.reason}"
        else:
            correctness = answer_correctness(f1, similarity.value)
        recall = verdicts.context_recall()
        if recall is None:
            unmeasured["context_recall"] = "no_contexts"
        return JudgeScores(
            answer_correctness=correctness,
            semantic_similarity=similarity.value,
            context_recall=recall,
            reason=_summary(verdicts, f1),
            unmeasured=unmeasured,
        )


def _summary(verdicts: ReferenceVerdicts, f1: float | None) -> str:
    text = (
        f"TP {verdicts.true_positives}, FP {verdicts.false_positives}, "
        f"FN {verdicts.false_negatives}"
    )
    if f1 is not None:
        text += f" (statement F1 {f1:.2f})"
    wrong = [s.statement for s in verdicts.answer_statements if not s.true_positive]
    if wrong:
        text += f"; not in the reference: {wrong[0]!r}"
    if verdicts.in_contexts:
        found, total = sum(verdicts.in_contexts), len(verdicts.in_contexts)
        text += f"; {found}/{total} reference sentences in the contexts"
    return text


class RagasAnswerJudge:
    """The same metrics computed by ragas (``judge.backend: ragas``); ragas 0.4 has no context
    relevancy, so that one is unmeasured (``not_scored_by_ragas``)."""

    def __init__(self, evaluator: RagasEvaluator) -> None:
        self.evaluator = evaluator

    @classmethod
    def from_config(
        cls,
        config: JudgeConfig,
        metrics: JudgeMetrics | None = None,
        budget: TokenBudget | None = None,
    ) -> RagasAnswerJudge:
        """Only the metrics a golden case reports (no context precision or utilization)."""
        return cls(
            RagasEvaluator(
                config, metrics, enabled=("faithfulness", "answer_relevancy"), budget=budget
            )
        )

    async def aclose(self) -> None:
        await self.evaluator.aclose()

    async def judge(
        self, case: GenerationCase, answer: str, contexts: Sequence[str]
    ) -> JudgeScores:
        result = await self.evaluator.evaluate_with_reference(_as_trace(case, answer, contexts))
        found = {
            name: result.scores.get(name, Score.unmeasured("judge_error"))
            for name in REFERENCE_METRICS
        }
        reference = JudgeScores(
            answer_correctness=found["answer_correctness"].value,
            semantic_similarity=found["semantic_similarity"].value,
            context_recall=found["context_recall"].value,
            reason="; ".join(result.errors) or None,
            unmeasured={n: s.reason or "judge_error" for n, s in found.items() if s.value is None},
        )
        return _with_free_scores(reference, result)


@asynccontextmanager
async def open_answer_judge(
    config: JudgeConfig | None,
    metrics: JudgeMetrics | None = None,
    budget: TokenBudget | None = None,
) -> AsyncIterator[AnswerJudge | None]:
    """The answer judge ``config`` describes (None when the judge is not active), closed on exit.

    ``metrics``: the process's judge metrics (one :class:`JudgeMetrics` per registry); a private
    registry when omitted. ``budget``: the process's token budget, charged with every token the
    judge spends (the daemon's, shared with the sampler)."""
    if config is None or not config.active:
        yield None
        return
    judge: LLMAnswerJudge | RagasAnswerJudge
    if config.backend == "ragas":
        judge = RagasAnswerJudge.from_config(config, metrics, budget)
    else:
        judge = LLMAnswerJudge(config, metrics, budget)
    try:
        yield judge
    finally:
        await judge.aclose()


__all__ = ["GOLDEN_EVALUATOR", "LLMAnswerJudge", "RagasAnswerJudge", "open_answer_judge"]
