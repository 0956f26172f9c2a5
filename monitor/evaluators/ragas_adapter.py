"""The ragas adapter: the judge's reference-free metrics computed by ragas 0.4 (optional extra).

:class:`RagasEvaluator` (``name = "ragas"``) mirrors :class:`~monitor.evaluators.llm.LLMJudge`
(``async evaluate(trace) -> EvaluationResult``, ``circuit_open``, ``async aclose()``) and scores
with ``ragas.metrics.collections`` over the same OpenAI-compatible endpoint
(:class:`~monitor.config.judge.JudgeConfig`):

- ``faithfulness`` -- ``Faithfulness``, run step by step (ragas's own statement-generation and
  NLI prompts) so its verdicts are kept: one :class:`~monitor.models.StatementVerdict` per
  statement (statement, supported, ragas's reason; no evidence chunk -- ragas judges against
  the contexts joined);
- ``answer_relevancy`` -- ``AnswerRelevancy`` (``strictness`` generated questions, compared with
  the question by embeddings);
- ``context_precision`` -- ``ContextPrecisionWithoutReference`` (one call per chunk);
- ``context_utilization`` -- ``ContextUtilization``. In ragas 0.4 it is the same computation as
  ``ContextPrecisionWithoutReference`` under another name; when its ``ascore`` is the inherited
  one, the precision result is reused instead of paying for the same calls twice.

For golden sets, :meth:`RagasEvaluator.evaluate_with_reference` adds, against the trace's
``reference`` (or one passed in): ``answer_correctness`` (``AnswerCorrectness``),
``semantic_similarity`` (``SemanticSimilarity``'s cosine, computed with the *async* embeddings
in one batched request -- ragas's own ``ascore`` calls the blocking ``embed_text``) and
``context_recall`` (``ContextRecall``).

As in the judge: the same K first chunks (``max_context_chunks``, rank order when every chunk
has a rank) truncated to ``max_chars_per_chunk``; everything sent -- question, answer, chunks,
reference -- passes through :class:`~monitor.evaluators.redaction.Redactor` first. Each metric is
bounded by ``asyncio.wait_for`` (``metric_timeout_seconds``, default 4 x the request timeout);
metrics run concurrently, at most ``max_concurrency`` at a time. The openai client has an
explicit timeout and retry count (:func:`~monitor.evaluators.ragas_runtime.make_openai_clients`);
a reply that is not the expected JSON is retried once (instructor ``max_retries=1``).

A score is never 0-for-failure and never NaN: it is unmeasured with a reason -- ``no_contexts``,
``empty_answer``, ``no_question``, ``no_reference``, ``no_claims`` (no statements in the
answer), ``nan_result`` (ragas returned NaN/None/inf), ``invalid_value`` (outside [0, 1]),
``judge_timeout``, ``malformed_output``, ``judge_error``, ``circuit_open``. Cosine-based
metrics (answer relevancy, semantic similarity, answer correctness) are clamped to [0, 1]
(a negative cosine counts as no similarity).

A circuit breaker (``circuit_failure_threshold``, ``circuit_reset_seconds``) opens after
evaluations whose metrics all failed on the endpoint (timeouts, connection errors, 5xx,
401/403/404); while open, metrics that need the endpoint are unmeasured ``circuit_open`` (with
``wait_for_circuit``, offline scoring, evaluations wait for the next probe instead).

Pacing: ragas makes the calls, so the judge's adaptive concurrency and size-based deadlines do
not reach them: at most ``max_concurrency`` metrics run at once, and every request has the
fixed ``timeout_seconds`` or, when that is null, ``timeout_ceiling_seconds``.

``tokens`` on the result: prompt + completion tokens from ``usage`` of every response of the
evaluation (chat completions and embeddings, retries included).

ragas is imported lazily: without the extra, constructing :class:`RagasEvaluator` raises
:class:`~monitor.evaluators.ragas_runtime.RagasUnavailableError` naming
``pip install 'rag-monitor[ragas]'``; importing this module never needs ragas.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import openai
import pydantic
import structlog
from prometheus_client import CollectorRegistry

from monitor.config.judge import JudgeConfig
from monitor.evaluators.circuit import CircuitBreaker, CircuitState
from monitor.evaluators.judge_client import cosine_similarity
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.judge_prompts import truncate
from monitor.evaluators.ragas_runtime import (
    RAGAS_EXTRA_HINT,
    RagasModules,
    RagasUnavailableError,
    end_tally,
    load_ragas,
    make_openai_clients,
    start_tally,
)
from monitor.evaluators.redaction import Redactor
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenTally
from monitor.models import EvaluationResult, Score, StatementVerdict, Trace

__all__ = [
    "ALL_METRICS",
    "METRICS",
    "RAGAS_EXTRA_HINT",
    "REFERENCE_METRICS",
    "RagasEvaluator",
    "RagasInput",
    "RagasUnavailableError",
]

log = structlog.get_logger(__name__)

METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_utilization")
REFERENCE_METRICS = ("answer_correctness", "semantic_similarity", "context_recall")
ALL_METRICS = METRICS + REFERENCE_METRICS
_COSINE_METRICS = frozenset({"answer_relevancy", "semantic_similarity", "answer_correctness"})
MALFORMED_RETRIES = 1  # instructor re-asks once on a reply that is not the expected JSON
DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
_EPSILON = 1e-6


@dataclass(frozen=True)
class RagasInput:
    """What ragas sees of a trace: redacted, the first K chunks, each truncated."""

    question: str
    answer: str
    contexts: tuple[str, ...]
    reference: str
    contexts_without_text: bool = False

    @classmethod
    def build(
        cls,
        trace: Trace,
        redactor: Redactor,
        max_chunks: int,
        max_chars: int,
        reference: str | None = None,
    ) -> RagasInput:
        chunks = [c for c in trace.contexts if c.text.strip()]
        if chunks and all(c.rank is not None for c in chunks):
            chunks = sorted(chunks, key=lambda c: c.rank or 0)
        ref = reference if reference is not None else trace.reference
        return cls(
            question=redactor.redact(trace.query).strip(),
            answer=redactor.redact(trace.answer).strip(),
            contexts=tuple(
                truncate(redactor.redact(c.text), max_chars).strip() for c in chunks[:max_chunks]
            ),
            reference=redactor.redact(ref or "").strip(),
            contexts_without_text=bool(trace.contexts_without_text),
        )


class _Unmeasured(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Outcome:
    score: Score
    statements: list[StatementVerdict] = field(default_factory=list)
    error: str | None = None
    endpoint_failure: bool = False  # the endpoint did not answer usefully (timeout, 5xx, down)
    answered: bool = False  # the endpoint answered (whatever the content)


_Run = Callable[[], Awaitable[tuple[Any, list[StatementVerdict]]]]


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        chain.append(e)
        todo.extend([e.__cause__, e.__context__])
        last = getattr(e, "last_exception", None)  # tenacity RetryError
        if isinstance(last, BaseException):
            todo.append(last)
    return chain


def classify_failure(exc: BaseException) -> tuple[str, bool, str]:
    """(reason, endpoint failure, detail) of an exception out of a ragas metric.

    The detail names exception types and HTTP statuses only -- never prompt text, replies or
    secrets (instructor's and pydantic's messages quote the model's output).
    """
    chain = _exception_chain(exc)
    detail = " <- ".join(type(e).__name__ for e in chain[:4])
    for e in chain:
        if isinstance(e, (TimeoutError, openai.APITimeoutError)):
            return "judge_timeout", True, detail
    for e in chain:
        if isinstance(e, openai.APIStatusError):
            status = e.status_code
            endpoint = status >= 500 or status in (401, 403, 404)
            return "judge_error", endpoint, f"{detail} (HTTP {status})"
        if isinstance(e, openai.APIConnectionError):
            return "judge_error", True, detail
    for e in chain:
        if isinstance(e, (pydantic.ValidationError, json.JSONDecodeError)):
            return "malformed_output", False, detail
        name = type(e).__name__
        if name in ("InstructorRetryException", "IncompleteOutputException", "ValidationError"):
            return "malformed_output", False, detail
    return "judge_error", False, detail


def to_score(value: Any, *, clamp: bool = False) -> Score:
    """A ragas value as a Score: NaN / None / inf / non-numbers are unmeasured, never 0."""
    if value is None:
        return Score.unmeasured("nan_result")
    try:
        v = float(value)
    except (TypeError, ValueError):
        return Score.unmeasured("invalid_value")
    if math.isnan(v) or math.isinf(v):
        return Score.unmeasured("nan_result")
    if clamp:
        v = min(1.0, max(0.0, v))
    elif -_EPSILON <= v < 0.0:
        v = 0.0
    elif 1.0 < v <= 1.0 + _EPSILON:
        v = 1.0
    if not 0.0 <= v <= 1.0:
        return Score.unmeasured("invalid_value")
    return Score.of(v)


class RagasEvaluator:
    """ragas 0.4 metrics over the judge endpoint (see the module documentation)."""

    name = "ragas"

    def __init__(
        self,
        config: JudgeConfig,
        metrics: JudgeMetrics | None = None,
        *,
        embedding_model: str | None = None,
        enabled: Sequence[str] = METRICS,
        reference_metrics: Sequence[str] = REFERENCE_METRICS,
        metric_timeout_seconds: float | None = None,
        answer_relevancy_strictness: int = 3,
        budget: TokenBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait_for_circuit: bool = False,
    ) -> None:
        unknown = [m for m in (*enabled, *reference_metrics) if m not in ALL_METRICS]
        if unknown:
            raise ValueError(f"unknown ragas metrics {unknown}; known: {list(ALL_METRICS)}")
        if metric_timeout_seconds is not None and metric_timeout_seconds <= 0:
            raise ValueError("metric_timeout_seconds must be positive")
        self.ragas: RagasModules = load_ragas()  # RagasUnavailableError without the extra
        self.config = config
        self.metrics = metrics if metrics is not None else JudgeMetrics(CollectorRegistry())
        self.metrics.register_evaluator(self.name)
        self.redactor = Redactor(config.redaction)
        self.enabled = tuple(m for m in METRICS if m in enabled)
        self.reference_metrics = tuple(m for m in REFERENCE_METRICS if m in reference_metrics)
        self.metric_timeout_seconds = (
            metric_timeout_seconds
            if metric_timeout_seconds is not None
            else 4.0 * config.longest_request_seconds
        )
        self.embedding_model = embedding_model or config.embedding_model or DEFAULT_EMBEDDING_MODEL
        self._clock = clock
        self.wait_for_circuit = wait_for_circuit
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._circuit = CircuitBreaker(
            config.circuit_failure_threshold,
            config.circuit_reset_seconds,
            clock=clock,
            on_change=self._circuit_changed,
        )
        self._clients = make_openai_clients(config, self.metrics, self.name, budget)
        cols = self.ragas.collections
        llm = self.ragas.llm_factory(
            config.model,
            provider="openai",
            client=self._clients.chat,
            max_retries=MALFORMED_RETRIES,
        )
        embeddings = self.ragas.embeddings(
            client=self._clients.embeddings, model=self.embedding_model
        )
        self._m: dict[str, Any] = {
            "faithfulness": cols.Faithfulness(llm=llm),
            "answer_relevancy": cols.AnswerRelevancy(
                llm=llm, embeddings=embeddings, strictness=answer_relevancy_strictness
            ),
            "context_precision": cols.ContextPrecisionWithoutReference(llm=llm),
            "context_utilization": cols.ContextUtilization(llm=llm),
            "answer_correctness": cols.AnswerCorrectness(llm=llm, embeddings=embeddings),
            "semantic_similarity": cols.SemanticSimilarity(embeddings=embeddings),
            "context_recall": cols.ContextRecall(llm=llm),
        }
        # ragas 0.4: ContextUtilization only renames ContextPrecisionWithoutReference
        self._utilization_is_precision = (
            type(self._m["context_utilization"]).ascore
            is cols.ContextPrecisionWithoutReference.ascore
        )

    # -- the LLMJudge surface ------------------------------------------------------------------

    @property
    def circuit_open(self) -> bool:
        """True while a call now would be refused; False once a recovery probe may go."""
        return self._circuit.blocked()

    @property
    def client(self) -> openai.AsyncOpenAI:
        return self._clients.chat

    async def aclose(self) -> None:
        await self._clients.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def evaluate(self, trace: Trace) -> EvaluationResult:
        """The reference-free metrics (``enabled``) of one trace."""
        return await self._evaluate(trace, self.enabled, None)

    async def evaluate_with_reference(
        self, trace: Trace, reference: str | None = None
    ) -> EvaluationResult:
        """The reference-free metrics plus the golden-set ones against `reference` (default:
        the trace's ``reference``); without a reference those are unmeasured ``no_reference``."""
        return await self._evaluate(trace, self.enabled + self.reference_metrics, reference)

    # -----------------------------------------------------------------------------------------

    def _circuit_changed(self, state: CircuitState) -> None:
        self.metrics.circuit(self.name, state != "closed")
        log.warning("ragas circuit breaker", state=state, evaluator=self.name)

    @staticmethod
    def _precondition(metric: str, inp: RagasInput) -> str | None:
        """Why `metric` cannot be computed for `inp` without calling anything, or None."""
        needs: dict[str, tuple[str, ...]] = {
            "faithfulness": ("contexts", "answer", "question"),
            "answer_relevancy": ("question", "answer"),
            "context_precision": ("contexts", "answer", "question"),
            "context_utilization": ("contexts", "answer", "question"),
            "answer_correctness": ("reference", "answer", "question"),
            "semantic_similarity": ("reference", "answer"),
            "context_recall": ("reference", "contexts", "question"),
        }
        reasons = {
            "contexts": "no_contexts",
            "answer": "empty_answer",
            "question": "no_question",
            "reference": "no_reference",
        }
        for need in needs[metric]:
            if need == "contexts" and inp.contexts_without_text:
                return "contexts_without_text"
            if not getattr(inp, need):
                return reasons[need]
        return None

    async def _evaluate(
        self, trace: Trace, wanted: Sequence[str], reference: str | None
    ) -> EvaluationResult:
        started = self._clock()
        inp = RagasInput.build(
            trace,
            self.redactor,
            self.config.max_context_chunks,
            self.config.max_chars_per_chunk,
            reference,
        )
        scores: dict[str, Score] = {}
        runs: dict[str, _Run] = {}
        for metric in wanted:
            reason = self._precondition(metric, inp)
            if reason is not None:
                scores[metric] = Score.unmeasured(reason)
            elif (
                metric == "context_utilization"
                and self._utilization_is_precision
                and ("context_precision" in wanted)
            ):
                continue  # filled from context_precision below
            else:
                runs[metric] = self._runner(metric, inp)

        statements: list[StatementVerdict] = []
        errors: list[str] = []
        tally, token = start_tally()
        try:
            if runs and not await self._circuit.admit(wait=self.wait_for_circuit):
                for metric in runs:
                    scores[metric] = Score.unmeasured("circuit_open")
                errors.append("circuit breaker open")
            elif runs:
                outcomes = await self._run_all(runs)
                for metric, outcome in outcomes.items():
                    scores[metric] = outcome.score
                    statements.extend(outcome.statements)
                    if outcome.error:
                        errors.append(outcome.error)
        finally:
            end_tally(token)

        if "context_utilization" in wanted and "context_utilization" not in scores:
            scores["context_utilization"] = scores.get(
                "context_precision", Score.unmeasured("judge_error")
            )
        return self._result(trace, wanted, scores, statements, errors, tally, started)

    async def _run_all(self, runs: dict[str, _Run]) -> dict[str, _Outcome]:
        try:
            results = await asyncio.gather(*(self._bounded(m, run) for m, run in runs.items()))
        except BaseException:  # cancelled: the probe (if this was one) told nothing
            self._circuit.abandon()
            raise
        outcomes = dict(zip(runs, results, strict=True))
        if any(o.answered for o in results):
            self._circuit.record_success()
        elif any(o.endpoint_failure for o in results):
            self._circuit.record_failure()
        else:
            self._circuit.abandon()
        return outcomes

    async def _bounded(self, metric: str, run: _Run) -> _Outcome:
        async with self._semaphore:
            try:
                value, statements = await asyncio.wait_for(run(), self.metric_timeout_seconds)
            except _Unmeasured as unmeasured:
                return _Outcome(Score.unmeasured(unmeasured.reason), answered=True)
            except TimeoutError:
                limit = self.metric_timeout_seconds
                return _Outcome(
                    Score.unmeasured("judge_timeout"),
                    error=f"{metric}: judge_timeout (no result within {limit:g} s)",
                    endpoint_failure=True,
                )
            except Exception as exc:  # any library error: unmeasured with a reason, not a crash
                reason, endpoint, detail = classify_failure(exc)
                log.warning("ragas metric failed", metric=metric, reason=reason, detail=detail)
                return _Outcome(
                    Score.unmeasured(reason),
                    error=f"{metric}: {reason} ({detail})",
                    endpoint_failure=endpoint,
                    answered=not endpoint,
                )
        return _Outcome(to_score(value, clamp=metric in _COSINE_METRICS), statements, answered=True)

    def _runner(self, metric: str, inp: RagasInput) -> _Run:
        m = self._m[metric]
        contexts = list(inp.contexts)

        async def value_only(coro: Awaitable[Any]) -> tuple[Any, list[StatementVerdict]]:
            result = await coro
            return getattr(result, "value", None), []

        if metric == "faithfulness":
            return lambda: self._faithfulness(m, inp)
        if metric == "answer_relevancy":
            return lambda: value_only(m.ascore(user_input=inp.question, response=inp.answer))
        if metric in ("context_precision", "context_utilization"):
            return lambda: value_only(
                m.ascore(user_input=inp.question, response=inp.answer, retrieved_contexts=contexts)
            )
        if metric == "answer_correctness":
            return lambda: value_only(
                m.ascore(user_input=inp.question, response=inp.answer, reference=inp.reference)
            )
        if metric == "semantic_similarity":
            return lambda: self._semantic_similarity(m, inp)
        if metric == "context_recall":
            return lambda: value_only(
                m.ascore(
                    user_input=inp.question, retrieved_contexts=contexts, reference=inp.reference
                )
            )
        raise ValueError(f"unknown ragas metric {metric!r}")

    @staticmethod
    async def _faithfulness(m: Any, inp: RagasInput) -> tuple[Any, list[StatementVerdict]]:
        """ragas's Faithfulness pipeline, step by step, keeping its NLI verdicts."""
        if not (hasattr(m, "_create_statements") and hasattr(m, "_create_verdicts")):
            result = await m.ascore(  # a future ragas without the steps: score only
                user_input=inp.question, response=inp.answer, retrieved_contexts=list(inp.contexts)
            )
            return getattr(result, "value", None), []
        generated = [str(s) for s in await m._create_statements(inp.question, inp.answer) if s]
        if not generated:
            raise _Unmeasured("no_claims")
        verdicts = await m._create_verdicts(generated, "\n".join(inp.contexts))
        statements = [
            StatementVerdict(
                statement=str(getattr(v, "statement", "") or ""),
                supported=int(getattr(v, "verdict", 0)) == 1,
                reason=str(getattr(v, "reason", "") or "") or None,
            )
            for v in list(getattr(verdicts, "statements", None) or [])
        ]
        if not statements:
            return float("nan"), []
        return m._compute_score(verdicts), statements

    @staticmethod
    async def _semantic_similarity(m: Any, inp: RagasInput) -> tuple[Any, list[StatementVerdict]]:
        """ragas SemanticSimilarity's cosine, with the async embeddings (one batched request)."""
        vectors = await m.embeddings.aembed_texts([inp.reference, inp.answer])
        if len(vectors) != 2:
            return None, []
        value = cosine_similarity([float(x) for x in vectors[0]], [float(x) for x in vectors[1]])
        threshold = getattr(m, "threshold", None)
        if threshold and value is not None:
            value = 1.0 if value >= threshold else 0.0
        return value, []

    def _result(
        self,
        trace: Trace,
        wanted: Sequence[str],
        scores: dict[str, Score],
        statements: list[StatementVerdict],
        errors: list[str],
        tally: TokenTally,
        started: float,
    ) -> EvaluationResult:
        return EvaluationResult.of_trace(
            trace,
            self.name,
            {m: scores.get(m, Score.unmeasured("judge_error")) for m in wanted},
            statements=statements,
            judge_model=self.config.model,
            tokens=tally.usage(),
            latency_ms=(self._clock() - started) * 1000.0,
            errors=errors,
        )
