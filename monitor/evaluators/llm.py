"""Tier 1: the LLM judge over an OpenAI-compatible chat endpoint.

:class:`LLMJudge` (``name = "llm"``) scores a trace with at most two chat calls, run concurrently
(see :mod:`monitor.evaluators.judge_prompts` for the prompts):

- ``faithfulness`` = supported statements / all statements, with a
  :class:`~monitor.models.StatementVerdict` per statement (statement, supported, evidence
  context id, reason);
- ``answer_relevancy`` = aspects of the question the answer addresses / all aspects, 0 when the
  answer is non-committal;
- ``context_precision`` = rank-weighted average precision of the per-chunk "useful in arriving
  at the answer" verdicts, over the first K chunks (``max_context_chunks``);
- ``context_relevancy`` = sentences of those chunks needed to answer the question / all their
  sentences.

Everything sent is redacted first (:mod:`monitor.evaluators.redaction`). A score that cannot be
computed is unmeasured (``Score(value=None, reason=...)``), never 0 and never NaN:
``no_contexts``, ``contexts_without_text`` (the trace's retrieved documents carry no text:
faithfulness and the context scores are not asked for), ``empty_answer``, ``no_question``,
``no_claims`` (the answer states nothing to check), or the call's failure: ``judge_timeout``,
``malformed_output``, ``truncated_output`` (cut at ``max_tokens`` twice), ``judge_error``,
``circuit_open``, ``context_too_long``. While the circuit breaker is open,
:meth:`LLMJudge.evaluate` returns at once with every score unmeasured ``circuit_open`` (a cached
verdict is still served) -- unless the judge was made with ``wait_for_circuit`` (offline
scoring), whose calls wait for the circuit's next probe instead.

Cache: verdicts of a fully successful evaluation are kept (TTL + LRU) under the prompt version,
the model and the SHA-256 of the redacted, truncated question + contexts + answer. A hit makes no
call; the result carries the *new* trace's ids (trace_id, conversation_id, turn, agent,
timestamp), the cached scores and statements, ``tokens`` of zero (nothing was spent) and the
lookup's latency.

Durable verdicts (`verdicts`, the store's `judge_verdicts` table in the daemon): every complete
verdict of a trace, the turn judgement included, is also written under the trace's id and the
same identity as soon as it arrives, and looked up first: a trace read again after a crash or a
rebalance gets its own earlier verdict back as it was (tokens and latency included, so its
stored result comes out the same) instead of a new call.

:meth:`LLMJudge.judge_turn` is a third, optional call type for multi-turn tracking: constraint
verdicts, newly stated and withdrawn user constraints, and outcome scores 0-10, in one call.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Self, TypeVar

import structlog
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_cache import TTLCache, cache_key
from monitor.evaluators.judge_client import CallFailure, JudgeClient
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.judge_prompts import (
    OUTCOME_METRICS,
    PROMPT_VERSION,
    JudgeInput,
    ParsedTurn,
    RelevanceVerdicts,
    TurnInput,
    faithfulness_prompt,
    parse_faithfulness,
    parse_relevance,
    parse_turn,
    relevance_prompt,
    turn_prompt,
)
from monitor.evaluators.precision import average_precision
from monitor.evaluators.redaction import Redactor
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenTally
from monitor.models import (
    Constraint,
    ConstraintVerdict,
    EvaluationResult,
    Score,
    StatementVerdict,
    Trace,
    Usage,
)
from monitor.typing import DurableVerdicts

log = structlog.get_logger(__name__)
CONTEXT_METRICS = ("faithfulness", "context_precision", "context_relevancy")

METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_relevancy")
T = TypeVar("T")
_M = TypeVar("_M", bound=BaseModel)


class TurnJudgement(BaseModel):
    """The judge's view of one conversation turn (see :meth:`LLMJudge.judge_turn`).

    On failure every verdict is ``unmeasured`` with the reason, ``outcomes`` are all None,
    nothing is added or withdrawn, and ``unmeasured_reason`` says why.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace_id: str
    verdicts: list[ConstraintVerdict] = Field(default_factory=list)
    new_constraints: list[Constraint] = Field(default_factory=list)
    withdrawn: list[str] = Field(default_factory=list)
    outcomes: dict[str, float | None] = Field(default_factory=dict)  # 0-10
    reason: str | None = None
    unmeasured_reason: str | None = None
    judge_model: str | None = None
    tokens: Usage | None = None
    latency_ms: float | None = None
    errors: list[str] = Field(default_factory=list)

    def charged_to(self, result: EvaluationResult) -> EvaluationResult:
        """`result` (the same trace's ``llm`` evaluation) with this turn judgement's tokens
        added, so the result counts every token spent judging its trace."""
        if self.tokens is None:
            return result
        if result.tokens is None:
            return result.model_copy(update={"tokens": self.tokens})
        total = Usage(
            input_tokens=(result.tokens.input_tokens or 0) + (self.tokens.input_tokens or 0),
            output_tokens=(result.tokens.output_tokens or 0) + (self.tokens.output_tokens or 0),
        )
        return result.model_copy(update={"tokens": total})


@dataclass(frozen=True)
class _Cached:
    scores: Mapping[str, Score]
    statements: tuple[StatementVerdict, ...]


def _ids(trace: Trace) -> dict[str, object]:
    """The fields of a result that say which trace and turn it is of."""
    return {
        "trace_id": trace.trace_id,
        "conversation_id": trace.conversation_id,
        "turn": trace.turn,
        "agent": trace.agent,
        "timestamp": trace.timestamp,
    }


def _unmeasured(reason: str) -> dict[str, Score]:
    return {m: Score.unmeasured(reason) for m in METRICS}


class LLMJudge:
    """Tier-1 evaluator: an LLM judge with statement verdicts (see the module documentation)."""

    name = "llm"

    def __init__(
        self,
        config: JudgeConfig,
        metrics: JudgeMetrics | None = None,
        *,
        budget: TokenBudget | None = None,
        verdicts: DurableVerdicts | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        wait_for_circuit: bool = False,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else JudgeMetrics(CollectorRegistry())
        self.metrics.register_evaluator(self.name)
        self.redactor = Redactor(config.redaction)
        self.cache: TTLCache[_Cached] = TTLCache(
            config.cache_ttl_seconds, config.cache_max_entries, clock=clock
        )
        self._client = JudgeClient(
            config,
            self.metrics,
            self.name,
            budget=budget,
            clock=clock,
            sleep=sleep,
            rng=rng,
            wait_for_circuit=wait_for_circuit,
        )
        self._clock = clock
        self.verdicts = verdicts  # this trace's verdicts, kept across restarts
        self._flights: dict[str, asyncio.Future[Any]] = {}  # calls out, by durable key

    @property
    def client(self) -> JudgeClient:
        return self._client

    @property
    def circuit_open(self) -> bool:
        """True while a call now would be refused; False once a recovery probe may go (calls
        made while the probe is out wait for its verdict)."""
        return self._client.circuit.blocked()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def _refused_now(self) -> bool:
        """Whether calls now would fail at once (the circuit is open and nobody waits it out)."""
        return not self._client.wait_for_circuit and self._client.circuit.blocked()

    # -----------------------------------------------------------------------------------------

    def _input(self, trace: Trace) -> tuple[JudgeInput, bool, str]:
        """What the judge sees of the trace, whether its documents lack text, and the verdict
        key (prompt version, model, hash of what is seen)."""
        inp = JudgeInput.build(
            trace,
            self.redactor,
            self.config.max_context_chunks,
            self.config.max_chars_per_chunk,
        )
        textless = bool(trace.contexts_without_text)
        if textless:  # judging the documents that have text would misjudge the answer
            inp = replace(inp, contexts=())
        fingerprint = inp.fingerprint() + ("\ncontexts_without_text" if textless else "")
        return inp, textless, cache_key(PROMPT_VERSION, self.config.model, fingerprint)

    def _durable_key(self, trace: Trace, key: str) -> str:
        """The key of the trace's own verdict (trace id and the cache key, hashed)."""
        return cache_key(f"{PROMPT_VERSION}/trace", self.config.model, f"{trace.trace_id}\n{key}")

    async def _durable(self, key: str, model: type[_M]) -> _M | None:
        if self.verdicts is None:
            return None
        stored = await self.verdicts.get(key)
        if stored is None:
            return None
        try:
            return model.model_validate_json(stored)
        except ValueError:
            return None  # written by another version: ask again

    async def evaluate(self, trace: Trace) -> EvaluationResult:
        inp, textless, key = self._input(trace)
        durable_key = self._durable_key(trace, key)
        result = await self._once(
            durable_key, lambda: self._evaluate(trace, inp, textless, key, durable_key)
        )
        return result.model_copy(update=_ids(trace))

    async def _once(self, key: str, work: Callable[[], Awaitable[_M]]) -> _M:
        """`work` once per key at a time. A trace read again while its first processing's call
        is still out (its partition moved away and back) waits for that call instead of asking
        again; the call runs on even when its caller gives up, so its verdict is kept."""
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = asyncio.ensure_future(work())
            flight.add_done_callback(lambda done: self._landed(key, done))
        result: _M = await asyncio.shield(flight)
        return result

    def _landed(self, key: str, flight: asyncio.Future[Any]) -> None:
        self._flights.pop(key, None)
        if not flight.cancelled() and flight.exception() is not None:
            log.warning("judge call failed", error=type(flight.exception()).__name__)

    async def _evaluate(
        self, trace: Trace, inp: JudgeInput, textless: bool, key: str, durable_key: str
    ) -> EvaluationResult:
        started = self._clock()
        kept = await self._durable(durable_key, EvaluationResult)
        if kept is not None:  # this trace's verdict, given before a crash or a rebalance
            self.metrics.cache(True)
            return kept.model_copy(update=_ids(trace))
        if self.cache.enabled:
            cached = self.cache.get(key)
            self.metrics.cache(cached is not None)
            if cached is not None:
                return self._result(
                    trace,
                    dict(cached.scores),
                    list(cached.statements),
                    Usage(input_tokens=0, output_tokens=0),
                    started,
                    [],
                )

        need_faith = bool(inp.contexts) and bool(inp.answer)
        need_rel = bool(inp.question and inp.answer) or bool(inp.contexts)
        if (need_faith or need_rel) and self._refused_now():
            return self._result(
                trace, _unmeasured("circuit_open"), [], None, started, ["circuit breaker open"]
            )

        tally = TokenTally()
        faith_call = self._call_faithfulness(inp, tally, trace.trace_id) if need_faith else None
        rel_call = self._call_relevance(inp, tally, trace.trace_id) if need_rel else None
        faith: list[StatementVerdict] | CallFailure | None
        rel: RelevanceVerdicts | CallFailure | None
        if faith_call is not None and rel_call is not None:
            # Half-open: one is the probe; the other waits for its verdict.
            faith, rel = await asyncio.gather(faith_call, rel_call)
        else:
            faith = await faith_call if faith_call is not None else None
            rel = await rel_call if rel_call is not None else None

        scores: dict[str, Score] = {}
        statements: list[StatementVerdict] = []
        errors: list[str] = []

        if not inp.contexts:
            scores["faithfulness"] = Score.unmeasured("no_contexts")
        elif not inp.answer:
            scores["faithfulness"] = Score.unmeasured("empty_answer")
        elif isinstance(faith, CallFailure):
            scores["faithfulness"] = Score.unmeasured(faith.reason)
            errors.append(f"faithfulness call: {faith.reason} ({faith.detail})")
        elif faith is not None:
            statements = faith
            if statements:
                supported = sum(1 for s in statements if s.supported)
                scores["faithfulness"] = Score.of(supported / len(statements))
            else:
                scores["faithfulness"] = Score.unmeasured("no_claims")

        if isinstance(rel, CallFailure):
            errors.append(f"relevance call: {rel.reason} ({rel.detail})")
        scores.update(self._relevance_scores(inp, rel))
        if textless:
            for metric in CONTEXT_METRICS:
                scores[metric] = Score.unmeasured("contexts_without_text")

        result = self._result(trace, scores, statements, tally.usage(), started, errors)
        if not errors and self.cache.enabled:
            self.cache.put(key, _Cached(scores=dict(scores), statements=tuple(statements)))
        if not errors and self.verdicts is not None:
            await self.verdicts.put(durable_key, trace.trace_id, result.model_dump_json())
        return result

    @staticmethod
    def _relevance_scores(
        inp: JudgeInput, rel: RelevanceVerdicts | CallFailure | None
    ) -> dict[str, Score]:
        failed = rel.reason if isinstance(rel, CallFailure) else None
        verdicts = rel if isinstance(rel, RelevanceVerdicts) else None
        out: dict[str, Score] = {}

        if not inp.question:
            out["answer_relevancy"] = Score.unmeasured("no_question")
        elif not inp.answer:
            out["answer_relevancy"] = Score.unmeasured("empty_answer")
        elif failed:
            out["answer_relevancy"] = Score.unmeasured(failed)
        elif verdicts is not None:
            if verdicts.noncommittal:
                out["answer_relevancy"] = Score.of(0.0)
            elif verdicts.aspects:
                out["answer_relevancy"] = Score.of(verdicts.addressed / verdicts.aspects)
            else:
                out["answer_relevancy"] = Score.unmeasured("no_aspects")

        if not inp.contexts:
            out["context_precision"] = Score.unmeasured("no_contexts")
        elif not inp.answer:
            out["context_precision"] = Score.unmeasured("empty_answer")
        elif failed:
            out["context_precision"] = Score.unmeasured(failed)
        elif verdicts is not None:
            out["context_precision"] = Score.of(average_precision(verdicts.useful))

        if not inp.contexts:
            out["context_relevancy"] = Score.unmeasured("no_contexts")
        elif not inp.question:
            out["context_relevancy"] = Score.unmeasured("no_question")
        elif failed:
            out["context_relevancy"] = Score.unmeasured(failed)
        elif verdicts is not None and verdicts.total_sentences:
            out["context_relevancy"] = Score.of(
                verdicts.relevant_sentences / verdicts.total_sentences
            )
        return out

    async def _guarded(self, call: Awaitable[T]) -> T | CallFailure:
        try:
            return await call
        except CallFailure as failure:
            return failure
        except Exception as exc:  # a bug or an unexpected library error: unmeasured, not a crash
            log.exception("judge call raised", error_type=type(exc).__name__)
            return CallFailure("judge_error", type(exc).__name__)

    async def _call_faithfulness(
        self, inp: JudgeInput, tally: TokenTally, trace_id: str
    ) -> list[StatementVerdict] | CallFailure:
        prompt = faithfulness_prompt(inp)
        return await self._guarded(
            self._client.complete(prompt, lambda d: parse_faithfulness(d, inp), tally, trace_id)
        )

    async def _call_relevance(
        self, inp: JudgeInput, tally: TokenTally, trace_id: str
    ) -> RelevanceVerdicts | CallFailure:
        prompt = relevance_prompt(inp)
        return await self._guarded(
            self._client.complete(prompt, lambda d: parse_relevance(d, inp), tally, trace_id)
        )

    def _result(
        self,
        trace: Trace,
        scores: dict[str, Score],
        statements: list[StatementVerdict],
        tokens: Usage | None,
        started: float,
        errors: list[str],
    ) -> EvaluationResult:
        for m in METRICS:  # every metric present, measured or with a reason
            scores.setdefault(m, Score.unmeasured("judge_error"))
        return EvaluationResult.of_trace(
            trace,
            self.name,
            {m: scores[m] for m in METRICS},
            statements=statements,
            judge_model=self.config.model,
            tokens=tokens,
            latency_ms=(self._clock() - started) * 1000.0,
            errors=errors,
        )

    # -----------------------------------------------------------------------------------------

    def turn_key(self, trace: Trace) -> str:
        """The durable key of this trace's turn judgement: its id and what the judge sees of its
        question and answer (the constraints it is judged against follow from the
        conversation's earlier turns)."""
        seen = "\n".join(
            (trace.trace_id, self.redactor.redact(trace.query), self.redactor.redact(trace.answer))
        )
        return cache_key(f"{PROMPT_VERSION}/turn", self.config.model, seen)

    async def judge_turn(
        self,
        trace: Trace,
        constraints: list[Constraint],
        history: list[tuple[str, str]],
    ) -> TurnJudgement:
        """Judge one conversation turn in one chat call.

        `constraints` are the active constraints to judge (pass the free-text ones; those with a
        `kind` are checked deterministically elsewhere, but may be passed too); `history` is the
        earlier (user, assistant) turns, oldest first (the last few are sent). Returns verdicts
        (satisfied / violated / omitted with a reason, in the order given), constraints the
        latest user message states (ids ``u<turn>-<n>``; kind and value when machine-checkable),
        ids of constraints it withdraws, and outcome scores 0-10 (relevance, answer_quality,
        instruction_following, coherence). On failure everything is unmeasured with the reason.
        """
        durable_key = self.turn_key(trace)
        return await self._once(
            durable_key, lambda: self._judge_turn(trace, constraints, history, durable_key)
        )

    async def _judge_turn(
        self,
        trace: Trace,
        constraints: list[Constraint],
        history: list[tuple[str, str]],
        durable_key: str,
    ) -> TurnJudgement:
        started = self._clock()
        kept = await self._durable(durable_key, TurnJudgement)
        if kept is not None:
            return kept
        inp = TurnInput.build(
            trace,
            [(c.id, c.text) for c in constraints],
            history,
            self.redactor,
            self.config.max_chars_per_chunk,
        )
        tally = TokenTally()
        parsed: ParsedTurn | CallFailure
        if self._refused_now():
            parsed = CallFailure("circuit_open", "circuit breaker open")
        else:
            parsed = await self._guarded(
                self._client.complete(
                    turn_prompt(inp), lambda d: parse_turn(d, inp), tally, trace.trace_id
                )
            )
        latency = (self._clock() - started) * 1000.0
        if isinstance(parsed, CallFailure):
            return TurnJudgement(
                trace_id=trace.trace_id,
                verdicts=[
                    ConstraintVerdict(constraint_id=c.id, status="unmeasured", reason=parsed.reason)
                    for c in constraints
                ],
                outcomes=dict.fromkeys(OUTCOME_METRICS),
                unmeasured_reason=parsed.reason,
                judge_model=self.config.model,
                tokens=tally.usage(),
                latency_ms=latency,
                errors=[f"turn call: {parsed.reason} ({parsed.detail})"],
            )
        judgement = TurnJudgement(
            trace_id=trace.trace_id,
            verdicts=list(parsed.verdicts),
            new_constraints=[
                Constraint(
                    id=self._new_id(trace, i, c.text), text=c.text, kind=c.kind, value=c.value
                )
                for i, c in enumerate(parsed.new_constraints, 1)
            ],
            withdrawn=list(parsed.withdrawn),
            outcomes={m: parsed.scores[m] for m in OUTCOME_METRICS},
            reason=parsed.reason,
            judge_model=self.config.model,
            tokens=tally.usage(),
            latency_ms=latency,
        )
        if self.verdicts is not None:
            await self.verdicts.put(durable_key, trace.trace_id, judgement.model_dump_json())
        return judgement

    @staticmethod
    def _new_id(trace: Trace, n: int, text: str) -> str:
        if trace.turn is not None:
            return f"u{trace.turn}-{n}"
        return "u-" + hashlib.sha256(f"{trace.trace_id}\n{text}".encode()).hexdigest()[:10]
