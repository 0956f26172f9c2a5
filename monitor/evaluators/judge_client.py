"""One chat call (or embeddings request) to the judge endpoint, with everything that can go wrong
handled.

- The ``openai`` async clients of :mod:`monitor.evaluators.openai_client`, with the SDK's own
  retries off (``max_retries=0``): the SDK would retry every 5xx (llama_cpp.server's "not
  supported" is a 500), wait out any Retry-After and count one request for all its attempts.
  Retries go through :mod:`monitor.retry` instead, so each attempt is classified and counted.
- Paced to the server (:mod:`monitor.evaluators.concurrency_limit`,
  :mod:`monitor.evaluators.pace`): each endpoint lets an adaptive number of requests run at once
  (from 1 up to ``max_concurrency``), and each request's deadline follows its size -- the
  expected prompt processing and generation at the pace the server has shown, for its prompt
  and ``max_tokens``, within ``timeout_floor_seconds`` and ``timeout_ceiling_seconds``, doubled
  for each earlier timeout of the same call -- unless ``timeout_seconds`` fixes it. Waiting for
  room under the limit is not part of a deadline.
- Every chat call is bounded: ``max_tokens`` (``judge.max_tokens``, else the task's budget sized
  from its output schema). A server that rejects the parameter by that name and asks for
  ``max_completion_tokens`` gets that instead, remembered.
- Structured output (``judge.response_format``): ``json_schema`` (strict); ``json_object``
  carrying the schema as ``{"type": "json_object", "schema": ...}`` (what llama.cpp's servers
  enforce); ``auto`` starts with json_schema. On a rejection that names the response format,
  whatever its status (llama_cpp.server answers 500), the same request is repeated one step
  down (json_schema -> json_object with the schema -> plain json_object) and, once a step is
  accepted, the endpoint is remembered at it for the client's lifetime (a call that waited for
  a slot meanwhile is sent at it, as it is with the token parameter).
- Failures are classified by kind, not by status alone (:func:`classify`): a prompt longer than
  the model's context fails that trace at once (``context_too_long``, the server's words kept in
  the detail); 404/501 or a refusal saying the server does not support the request (e.g.
  embeddings off; llama_cpp.server says so with a 500) fail at once and say nothing against the
  circuit; 401/403 fail at once and count against it; 429 is retried,
  honouring ``Retry-After``; 5xx, connection errors and timeouts are retried with full-jitter
  exponential backoff (``uniform(0, min(backoff_max, backoff_base * 2**n))``, a Retry-After
  being the least wait), up to ``max_retries``, counted in ``ragmon_retries_total``
  (``judge_chat``, ``judge_embeddings``). A Retry-After longer than ``backoff_max_seconds`` ends
  the call at once rather than holding a judge slot that long. Any other rejection (400, 422,
  ...) is final.
- Congestion is not failure: a timeout, 429 or 503 halves the concurrency limit, and counts
  against the circuit only when the request ran alone (no other request of ours in flight), so
  the circuit opens on errors and on timeouts at the lowest concurrency, never on queueing we
  caused. Connection errors, other 5xx and 401/403 count whatever the concurrency.
- A reply that is not JSON or not of the task's schema is retried once with the task's bounded
  schema (:func:`~monitor.evaluators.judge_prompts.bounded_schema`: arrays capped at their
  expected length, and at least it where the parser needs every entry, ids from the labels
  shown, strings capped), then the call fails with ``malformed_output``. A reply cut at the
  token bound (``finish_reason == "length"``) is retried once with twice the room and the
  bounded schema, so a model that repeats itself is stopped by the schema; cut again, the call
  fails with ``truncated_output``. After a cut, or once a bounded reply parses, every request
  to the endpoint carries the bounded schema (calls already waiting included).
- Chat and embeddings are separate endpoints (``embedding_base_url``; llama.cpp serves them from
  separate processes), each with its own client, concurrency bound and
  :class:`~monitor.evaluators.circuit.CircuitBreaker`. While a circuit is half-open, calls wait for
  the probe's verdict instead of failing.
- Tokens of every response are counted (:class:`~monitor.evaluators.token_usage.TokenMeter`): in
  the evaluation's tally, the judge metrics, and the shared token budget.

A failed call raises :class:`CallFailure` with a reason (``judge_timeout``, ``malformed_output``,
``truncated_output``, ``judge_error``, ``circuit_open``, ``context_too_long``) and a detail that
never holds prompt text or secrets. With ``wait_for_circuit`` (offline scoring) a call finding
the circuit open waits for the next probe instead of failing
(:meth:`~monitor.evaluators.circuit.CircuitBreaker.admit`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import openai
import structlog
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.completion_create_params import ResponseFormat

from monitor.config.judge import JudgeConfig
from monitor.evaluators.circuit import CircuitBreaker, CircuitState
from monitor.evaluators.concurrency_limit import ConcurrencyLimit, Slot
from monitor.evaluators.judge_metrics import Endpoint, JudgeMetrics, RequestOutcome
from monitor.evaluators.judge_prompts import MAX_REPLY_TOKENS, MalformedOutput, Prompt
from monitor.evaluators.openai_client import openai_clients
from monitor.evaluators.pace import ServerPace
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenMeter, TokenTally
from monitor.retry import Backoff, RetriesExhausted, RetryMetrics, RetryPolicy, parse_retry_after

log = structlog.get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R")
FailureReason = Literal[
    "judge_timeout",
    "malformed_output",
    "truncated_output",
    "judge_error",
    "circuit_open",
    "context_too_long",
]
FailureKind = Literal[
    "context_too_long",  # the prompt does not fit the model's context: final for this trace
    "unsupported",  # 404/501: the server has no such route or feature
    "auth",  # 401/403
    "rate_limited",  # 429
    "transient",  # 5xx, connection errors, timeouts
    "overloaded",  # 503: the server is busy (congestion, like a timeout)
    "rejected",  # any other refusal of the request (400, 422, ...)
    "response_format",  # a refusal that names the response format: step down and repeat
    "token_parameter",  # max_tokens refused by that name: send max_completion_tokens
]
ResponseMode = Literal["json_schema", "json_object", "json_object_without_schema"]
TokenParameter = Literal["max_tokens", "max_completion_tokens"]
NEXT_MODE: dict[ResponseMode, ResponseMode] = {
    "json_schema": "json_object",
    "json_object": "json_object_without_schema",
}
MODE_ORDER: tuple[ResponseMode, ...] = ("json_schema", "json_object", "json_object_without_schema")
CAUSE_CHARS = 200  # how much of a server's error message a detail keeps
RETRYABLE: frozenset[FailureKind] = frozenset({"rate_limited", "overloaded", "transient"})

_CONTEXT_MARKERS = (
    "context_length_exceeded",  # OpenAI, llama_cpp.server (code)
    "exceed_context_size",  # llama.cpp llama-server (type)
    "exceeds the available context",  # llama-server
    "maximum context length",  # OpenAI, vLLM
    "context window",  # llama_cpp.server
    "context length",
    "prompt is too long",
    "too many tokens",
)
_FORMAT_MARKERS = ("response_format", "json_schema", "json_object", "response format")
_UNSUPPORTED_MARKERS = (
    "not_supported_error",  # llama-server
    "does not support",
    "not supported",
    "must be created with embedding",  # llama_cpp.server asked for embeddings it does not serve
)


class CallFailure(Exception):
    """A judge call that produced no usable verdict."""

    def __init__(self, reason: FailureReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: FailureReason = reason
        self.detail = detail


def _retry_after(exc: openai.APIStatusError) -> float | None:
    try:
        return parse_retry_after(exc.response.headers)
    except Exception:
        return None


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The cosine of two embeddings, unclamped; None when it is undefined (a zero or
    non-finite vector, or vectors of different lengths)."""
    if len(a) != len(b):
        return None
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    if norm == 0 or not math.isfinite(norm):
        return None
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _parse_json(content: str) -> object:
    """The reply as JSON; tolerates a Markdown code fence around it (small local models)."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`")
        if text.startswith("json"):
            text = text[4:]
    try:
        return json.loads(text)
    except ValueError:
        raise MalformedOutput("the reply is not valid JSON") from None


def _error_text(exc: openai.APIStatusError) -> str:
    """What the server said about the refusal: the error message, or the body as text."""
    body: Any = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [error.get(k) for k in ("message", "detail", "type", "code", "param")]
            text = " ".join(str(p) for p in parts if p)
            if text:
                return text
        return json.dumps(body, ensure_ascii=False, default=str)
    if body is not None:
        return str(body)
    return str(exc.message or "")


def classify(exc: openai.APIStatusError) -> FailureKind:
    """The kind of a refusal, from what the server said as much as from its status."""
    status = exc.status_code
    text = _error_text(exc).lower()
    if status == 413 or any(marker in text for marker in _CONTEXT_MARKERS):
        return "context_too_long"
    if "max_tokens" in text and "max_completion_tokens" in text:
        return "token_parameter"
    if any(marker in text for marker in _FORMAT_MARKERS):
        return "response_format"
    if status in (404, 501) or any(marker in text for marker in _UNSUPPORTED_MARKERS):
        return "unsupported"
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limited"
    if status == 503:
        return "overloaded"
    if status >= 500:
        return "transient"
    return "rejected"


@dataclass(frozen=True)
class _FailedAttempt:
    failure: CallFailure
    kind: FailureKind
    outcome: RequestOutcome = "error"
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


class _AttemptFailed(Exception):
    """A request the endpoint refused or never answered (retried when worth it)."""

    def __init__(self, failed: _FailedAttempt) -> None:
        super().__init__(failed.failure.detail)
        self.failed = failed


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, _AttemptFailed) and exc.failed.retryable


def _server_wait(exc: BaseException) -> float | None:
    return exc.failed.retry_after if isinstance(exc, _AttemptFailed) else None


@dataclass
class _Endpoint:
    """One server the judge talks to: its client, circuit breaker, retry policy, adaptive
    concurrency limit and learnt pace."""

    name: Endpoint
    client: openai.AsyncOpenAI
    circuit: CircuitBreaker
    retry: RetryPolicy
    limit: ConcurrencyLimit
    pace: ServerPace


@dataclass(frozen=True)
class _Sent:
    """What a request carried, for its deadline and for learning the server's pace."""

    prompt_chars: int
    max_tokens: int  # 0 for embeddings


@dataclass
class _Call:
    """One judge call: its requests so far (step-downs and repeats included), its last failure."""

    endpoint: _Endpoint
    task: str
    trace_id: str | None
    attempts: int = 0
    timeouts: int = 0  # attempts that timed out: each doubles the next one's deadline
    last: CallFailure | None = None


@dataclass
class _ChatState:
    """What one chat call has learnt of the endpoint so far."""

    mode: ResponseMode
    parameter: TokenParameter
    bounded: bool
    max_tokens: int
    malformed_retry_left: int = 1
    cut_retry_left: int = 1


class JudgeClient:
    """Makes judge calls for one configuration: a chat endpoint and an embeddings endpoint (the
    same server unless ``embedding_base_url`` says otherwise), each with its own circuit,
    concurrency limit and pace; the response mode, token parameter and whether replies need
    the bounded schema are remembered for the chat endpoint."""

    def __init__(
        self,
        config: JudgeConfig,
        metrics: JudgeMetrics,
        evaluator: str,
        *,
        budget: TokenBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        wait_for_circuit: bool = False,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.evaluator = evaluator
        self.wait_for_circuit = wait_for_circuit
        self._meter = TokenMeter(config, metrics, evaluator, budget)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.response_mode: ResponseMode = (
            "json_object" if config.response_format == "json_object" else "json_schema"
        )
        self.token_parameter: TokenParameter = "max_tokens"
        self.bounded_replies = False  # set once a reply was cut and the bounded schema accepted
        self._bounded_refused = False  # the endpoint refused a bounded schema: never again
        # The SDK's retries stay off: it would retry what classify() calls final (a 500 that
        # says "not supported"), hold a slot for any Retry-After, and hide attempts from the
        # circuit and the request metrics.
        self._clients = openai_clients(config, max_retries=0)
        self._chat = self._endpoint("chat", self._clients.chat)
        self._embeddings = self._endpoint("embeddings", self._clients.embeddings)

    @property
    def circuit(self) -> CircuitBreaker:
        """The chat endpoint's circuit breaker."""
        return self._chat.circuit

    @property
    def embeddings_circuit(self) -> CircuitBreaker:
        return self._embeddings.circuit

    @property
    def concurrency_limit(self) -> ConcurrencyLimit:
        """The chat endpoint's adaptive concurrency limit."""
        return self._chat.limit

    @property
    def pace(self) -> ServerPace:
        """The chat endpoint's learnt pace."""
        return self._chat.pace

    def _endpoint(self, name: Endpoint, client: openai.AsyncOpenAI) -> _Endpoint:
        def changed(state: CircuitState) -> None:
            self.metrics.circuit(self.evaluator, state != "closed", name)
            log.warning(
                "judge circuit breaker", state=state, evaluator=self.evaluator, endpoint=name
            )

        def limit_changed(limit: int) -> None:
            self.metrics.concurrency_limit(self.evaluator, name, limit)
            log.debug(
                "judge concurrency limit", limit=limit, evaluator=self.evaluator, endpoint=name
            )

        cfg = self.config
        circuit = CircuitBreaker(
            cfg.circuit_failure_threshold,
            cfg.circuit_reset_seconds,
            clock=self._clock,
            sleep=self._sleep,
            on_change=changed,
        )
        retry = RetryPolicy(
            "judge_chat" if name == "chat" else "judge_embeddings",
            Backoff(cfg.backoff_base_seconds, cfg.backoff_max_seconds),
            retry_on=_worth_retrying,
            attempts=cfg.max_retries + 1,
            retry_after=_server_wait,
            give_up_on_long_retry_after=True,
            metrics=RetryMetrics.of(self.metrics.registry),
            log_level="debug",
            sleep=self._sleep,
            rng=self._rng,
        )
        limit = ConcurrencyLimit(cfg.max_concurrency, on_change=limit_changed)
        self.metrics.concurrency_limit(self.evaluator, name, limit.limit)
        pace = ServerPace(cfg.timeout_floor_seconds, cfg.timeout_ceiling_seconds)
        return _Endpoint(name, client, circuit, retry, limit, pace)

    async def aclose(self) -> None:
        await self._clients.aclose()

    def max_tokens(self, prompt: Prompt) -> int:
        """The reply bound sent with `prompt`: the configured one, else the task's."""
        return self.config.max_tokens or prompt.max_tokens

    def _deadline(self, call: _Call, sent: _Sent) -> float:
        if self.config.timeout_seconds is not None:
            return self.config.timeout_seconds
        return call.endpoint.pace.deadline(sent.prompt_chars, sent.max_tokens, call.timeouts)

    @staticmethod
    def _response_format(mode: ResponseMode, schema: dict[str, Any], task: str) -> ResponseFormat:
        if mode == "json_object_without_schema":
            return {"type": "json_object"}
        if mode == "json_object":
            # Not in the OpenAI type: the form llama.cpp's servers (llama-server and
            # llama_cpp.server) take to constrain json_object output to a schema.
            return cast(ResponseFormat, {"type": "json_object", "schema": schema})
        return {
            "type": "json_schema",
            "json_schema": {"name": task, "schema": schema, "strict": True},
        }

    def _request(
        self, prompt: Prompt, state: _ChatState
    ) -> Callable[[], Awaitable[ChatCompletion]]:
        cfg = self.config
        system: ChatCompletionSystemMessageParam = {"role": "system", "content": prompt.system}
        user: ChatCompletionUserMessageParam = {"role": "user", "content": prompt.user}
        bound = state.max_tokens

        def request() -> Awaitable[ChatCompletion]:
            # decided when sent: a call that waited for a slot while the endpoint was found to
            # run away is bounded too, and one that waited while the endpoint taught the
            # response mode and token parameter it takes is sent that way. Otherwise its
            # refusal of a mode it was never going to take would be read as a refusal of the
            # bounded schema, and the schema would be dropped for good.
            state.bounded = (state.bounded or self.bounded_replies) and not self._bounded_refused
            if MODE_ORDER.index(self.response_mode) > MODE_ORDER.index(state.mode):
                state.mode = self.response_mode
            if self.token_parameter == "max_completion_tokens":
                state.parameter = self.token_parameter
            parameter = state.parameter
            schema = (
                prompt.bounded_schema if state.bounded and prompt.bounded_schema else prompt.schema
            )
            body: dict[str, object] = {
                "model": cfg.model,
                "messages": [system, user],
                "temperature": 0,
                "response_format": self._response_format(state.mode, schema, prompt.task),
                parameter: bound,
            }
            if cfg.seed is not None:
                body["seed"] = cfg.seed
            # `client.post` is the SDK's documented way to send a body as it is:
            # `chat.completions.create` first walks it through its type-driven transform,
            # which for these plain dicts changes nothing and cost a fifth of the call.
            return self._chat.client.post("/chat/completions", body=body, cast_to=ChatCompletion)

        return request

    async def complete(
        self,
        prompt: Prompt,
        parse: Callable[[object], T],
        tally: TokenTally,
        trace_id: str | None = None,
    ) -> T:
        """One judge call: the parsed reply, or :class:`CallFailure`."""
        call = _Call(self._chat, prompt.task, trace_id)
        state = _ChatState(
            self.response_mode,
            self.token_parameter,
            bounded=self.bounded_replies and not self._bounded_refused,
            max_tokens=self.max_tokens(prompt),
        )
        return await self._with_retries(
            call, lambda: self._chat_attempt(call, state, prompt, parse, tally)
        )

    def _may_step_down(self, mode: ResponseMode) -> ResponseMode | None:
        """The next response mode to try after a rejection of `mode`, if any is allowed."""
        if self.config.response_format == "json_schema":
            return None  # asked for exactly this: a rejection is final
        return NEXT_MODE.get(mode)

    async def _chat_attempt(
        self,
        call: _Call,
        state: _ChatState,
        prompt: Prompt,
        parse: Callable[[object], T],
        tally: TokenTally,
    ) -> T:
        """Requests until a verdict or a failure. What the endpoint teaches (the token parameter
        it wants, a response format or bounded schema it refuses), one malformed reply and one
        reply cut at the bound are repeated here at once; failures worth waiting for are left
        to the retry policy."""
        chars = len(prompt.system) + len(prompt.user)
        while True:
            sent = _Sent(chars, state.max_tokens)
            try:
                response, started = await self._send(call, self._request(prompt, state), sent)
            except _AttemptFailed as exc:
                if self._adapt(state, exc.failed):
                    continue
                raise
            self._meter.charge(getattr(response, "usage", None), tally)
            self._remember(state)
            try:
                result = self._parse(response, parse)
            except MalformedOutput as exc:
                cut = _truncated(response)
                outcome: RequestOutcome = "truncated" if cut else "malformed"
                self.metrics.request(self.evaluator, outcome, self._clock() - started)
                if cut:
                    if self._more_room(call, state):
                        continue
                elif state.malformed_retry_left > 0:
                    # the bounded schema spells out what a reply must hold (every context once,
                    # ids from the labels shown): a server that enforces schemas must comply
                    state.malformed_retry_left -= 1
                    state.bounded = not self._bounded_refused
                    call.last = CallFailure("malformed_output", str(exc))
                    log.info(
                        "judge reply malformed; retrying once",
                        task=call.task,
                        detail=str(exc),
                        bounded_schema=state.bounded,
                        trace_id=call.trace_id,
                    )
                    continue
                call.last = (
                    CallFailure("truncated_output", f"{exc}; {state.max_tokens} tokens")
                    if cut
                    else CallFailure("malformed_output", str(exc))
                )
                self._log_failure(call, call.last)
                raise call.last from None
            self.metrics.request(self.evaluator, "ok", self._clock() - started)
            self._remember_bounded(state)
            return result

    def _more_room(self, call: _Call, state: _ChatState) -> bool:
        """After a reply cut at the bound: set up the one repeat with twice the room and the
        bounded schema (True), or say the cut is final (False)."""
        if state.cut_retry_left <= 0:
            return False
        state.cut_retry_left -= 1
        state.max_tokens = max(state.max_tokens, min(2 * state.max_tokens, 2 * MAX_REPLY_TOKENS))
        state.bounded = not self._bounded_refused
        log.info(
            "judge reply cut at the token bound; retrying once with more room",
            task=call.task,
            max_tokens=state.max_tokens,
            bounded_schema=state.bounded,
            trace_id=call.trace_id,
        )
        self._remember_bounded(state)  # the model runs away: bound every call from now on
        return True

    def _adapt(self, state: _ChatState, failed: _FailedAttempt) -> bool:
        """After a refusal that names what to change: change it (True) or not (False)."""
        if failed.kind == "token_parameter" and state.parameter == "max_tokens":
            state.parameter = "max_completion_tokens"
            log.info("judge endpoint wants max_completion_tokens", evaluator=self.evaluator)
            return True
        if failed.kind == "response_format" and state.bounded:
            # the caps of the bounded schema (maxItems, maxLength) are what it refuses
            state.bounded = False
            self._bounded_refused = True
            self.bounded_replies = False
            log.info(
                "judge endpoint refused the bounded schema; using the task's own",
                detail=failed.failure.detail,
                evaluator=self.evaluator,
            )
            return True
        step_down = self._may_step_down(state.mode) if failed.kind == "response_format" else None
        if step_down is None:
            return False
        log.info(
            "judge endpoint rejected the response format; stepping down",
            rejected=state.mode,
            next=step_down,
            detail=failed.failure.detail,
            evaluator=self.evaluator,
        )
        state.mode = step_down
        return True

    def _remember(self, state: _ChatState) -> None:
        """An accepted request: keep its response mode and token parameter for later calls."""
        if state.mode != self.response_mode:
            log.warning(
                "judge endpoint does not take the configured response format; using another",
                response_format=state.mode,
                evaluator=self.evaluator,
            )
            self.response_mode = state.mode
        self.token_parameter = state.parameter

    def _remember_bounded(self, state: _ChatState) -> None:
        """A reply cut at its bound, or a bounded reply that parsed: bound every later call's
        reply the same way (until the endpoint refuses the bounded schema)."""
        if state.bounded and not self.bounded_replies:
            log.warning(
                "judge replies run to the token bound; bounding them by the schema from now on",
                evaluator=self.evaluator,
            )
            self.bounded_replies = True

    async def embed(
        self, texts: list[str], model: str, tally: TokenTally, trace_id: str | None = None
    ) -> list[list[float]]:
        """Embeddings of `texts` (one request), or :class:`CallFailure`.

        The embeddings endpoint: its own client, circuit, concurrency limit and pace; the same
        deadlines, classification and retry policy as chat calls; no malformed-reply retry.
        """
        endpoint = self._embeddings
        call = _Call(endpoint, "embeddings", trace_id)
        sent = _Sent(sum(len(t) for t in texts), 0)

        def request() -> Awaitable[Any]:
            return endpoint.client.embeddings.create(
                model=model, input=texts, encoding_format="float"
            )

        async def attempt() -> list[list[float]]:
            response, started = await self._send(call, request, sent)
            self.metrics.request(self.evaluator, "ok", self._clock() - started)
            self._meter.charge(getattr(response, "usage", None), tally)
            ordered = sorted(response.data or [], key=lambda d: d.index)
            vectors = [_vector(d.embedding) for d in ordered]
            if len(vectors) != len(texts) or any(not v for v in vectors):
                raise CallFailure("malformed_output", "embeddings reply is incomplete")
            return [v for v in vectors if v is not None]

        return await self._with_retries(call, attempt)

    async def _with_retries(self, call: _Call, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt` under the endpoint's retry policy; a failure ends as :class:`CallFailure`
        (logged once)."""

        async def attempt_noting_failure() -> T:
            try:
                return await attempt()
            except _AttemptFailed as exc:
                call.last = exc.failed.failure
                raise

        try:
            return await call.endpoint.retry.call(
                attempt_noting_failure, task=call.task, trace_id=call.trace_id
            )
        except _AttemptFailed as exc:  # not worth retrying
            failure = exc.failed.failure
        except RetriesExhausted as exc:
            last = call.last or CallFailure("judge_error", str(exc))
            if exc.attempts > self.config.max_retries:
                failure = CallFailure(last.reason, f"{last.detail}, {call.attempts} attempts")
            else:  # the server asked for a longer wait than backoff_max_seconds
                wait = f"Retry-After {exc.retry_after or 0:g} s too long"
                failure = CallFailure(last.reason, f"{last.detail}, {wait}")
        self._log_failure(call, failure)
        raise failure

    async def _send(
        self, call: _Call, request: Callable[[], Awaitable[R]], sent: _Sent
    ) -> tuple[R, float]:
        """One request through the endpoint's circuit and concurrency limit, within its
        deadline: the response and when it was sent, or :class:`_AttemptFailed` (the failure
        counted against the circuit, the limit and in the metrics)."""
        await self._check_circuit(call)
        endpoint = call.endpoint
        async with endpoint.limit.slot() as slot:
            call.attempts += 1
            deadline = self._deadline(call, sent)
            started = self._clock()
            settled = False
            try:
                async with asyncio.timeout(deadline):
                    response = await request()
                settled = True
            except (TimeoutError, openai.OpenAIError) as exc:
                settled = True
                failed = self._failed_attempt(exc, call, slot, deadline)
                self.metrics.request(self.evaluator, failed.outcome, self._clock() - started)
                raise _AttemptFailed(failed) from None
            finally:
                if not settled:  # cancelled mid-request: the attempt says nothing
                    endpoint.circuit.abandon()
            endpoint.circuit.record_success()
            self._learn(endpoint, slot, sent, response, self._clock() - started)
        return response, started

    def _learn(
        self, endpoint: _Endpoint, slot: Slot, sent: _Sent, response: object, seconds: float
    ) -> None:
        """An accepted reply: the server's pace and the concurrency limit learn from it."""
        usage = getattr(response, "usage", None)
        prompt_tokens = _count(getattr(usage, "prompt_tokens", None))
        completion_tokens = _count(getattr(usage, "completion_tokens", None))
        if usage is None:  # no usage reported: charge the request its bound
            prompt_tokens = round(endpoint.pace.prompt_tokens(sent.prompt_chars))
            completion_tokens = sent.max_tokens
        latency = endpoint.pace.observe(
            seconds, sent.prompt_chars, prompt_tokens, completion_tokens
        )
        endpoint.limit.replied(slot, latency)
        if endpoint.name == "chat":
            self.metrics.pace(self.evaluator, endpoint.pace, endpoint.limit.slowdown)

    async def _check_circuit(self, call: _Call) -> None:
        """Raise (the last attempt's failure, else ``circuit_open``) while the circuit refuses;
        wait for the verdict of a probe that is out (and, with ``wait_for_circuit``, for the
        next probe)."""
        endpoint = call.endpoint
        if not await endpoint.circuit.admit(wait=self.wait_for_circuit):
            failure = call.last or CallFailure(
                "circuit_open", f"{endpoint.name} circuit breaker open"
            )
            self._log_failure(call, failure)
            raise failure

    def _cause(self, exc: openai.APIStatusError) -> str:
        """The server's words about a refusal, short and with every configured secret removed."""
        text = " ".join(_error_text(exc).split())
        for secret in self.config.secrets():
            text = text.replace(secret, "[secret]")
        if len(text) > CAUSE_CHARS:
            text = text[:CAUSE_CHARS].rstrip() + " …"
        return text

    def _failed_attempt(
        self,
        exc: TimeoutError | openai.OpenAIError,
        call: _Call,
        slot: Slot,
        deadline: float,
    ) -> _FailedAttempt:
        """What a failed request means for the circuit, the limit, the metrics and retrying.
        Congestion (a timeout, 429, 503) cuts the limit and counts against the circuit only
        when the request ran alone: otherwise it may be our own queueing."""
        endpoint = call.endpoint
        circuit = endpoint.circuit
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            endpoint.limit.dropped()
            call.timeouts += 1
            if slot.alone:
                circuit.record_failure()
            detail = f"timed out after {deadline:g} s"
            return _FailedAttempt(CallFailure("judge_timeout", detail), "transient", "timeout")
        if isinstance(exc, openai.APIConnectionError):
            circuit.record_failure()
            return _FailedAttempt(CallFailure("judge_error", "connection error"), "transient")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            kind = classify(exc)
            if kind in ("rate_limited", "overloaded"):
                endpoint.limit.dropped()
            if kind in ("transient", "auth") or (kind == "overloaded" and slot.alone):
                circuit.record_failure()
            elif kind != "overloaded":
                circuit.record_success()  # the endpoint is up and answering
            cause = self._cause(exc)
            if kind == "context_too_long":
                failure = CallFailure("context_too_long", f"HTTP {status}: {cause}")
            elif kind == "rate_limited":
                failure = CallFailure("judge_error", "rate limited (HTTP 429)")
            elif kind in ("transient", "overloaded"):
                failure = CallFailure("judge_error", f"HTTP {status}")
            else:
                label = "endpoint not supported" if kind == "unsupported" else str(kind)
                label = label.replace("_", " ")
                failure = CallFailure("judge_error", f"{label} (HTTP {status}): {cause}")
            retryable = kind in RETRYABLE
            return _FailedAttempt(
                failure,
                kind,
                "rate_limited" if kind == "rate_limited" else "error",
                retry_after=_retry_after(exc) if retryable else None,
            )
        circuit.record_failure()
        return _FailedAttempt(CallFailure("judge_error", type(exc).__name__), "transient")

    @staticmethod
    def _parse(response: ChatCompletion, parse: Callable[[object], T]) -> T:
        # The client does not validate responses: a non-conforming server can leave fields out.
        choices = getattr(response, "choices", None)
        if not choices:
            raise MalformedOutput("the reply has no choices")
        choice = choices[0]
        if getattr(choice, "finish_reason", None) == "length":
            raise MalformedOutput("the reply was cut at the token bound (finish_reason=length)")
        content = getattr(getattr(choice, "message", None), "content", None)
        if not isinstance(content, str) or not content.strip():
            raise MalformedOutput("the reply is empty")
        return parse(_parse_json(content))

    def _log_failure(self, call: _Call, failure: CallFailure) -> None:
        log.warning(
            "judge call failed",
            task=call.task,
            reason=failure.reason,
            detail=failure.detail,
            attempts=call.attempts,
            evaluator=self.evaluator,
            trace_id=call.trace_id,
        )


def _vector(raw: object) -> list[float] | None:
    """One embedding as floats. A server without pooling for the model (llama_cpp.server has no
    setting for it) sends one vector per token: those are mean-pooled, as llama-server's
    ``--pooling mean`` would. None when the reply is not numbers of one length."""
    if not isinstance(raw, list) or not raw:
        return None
    try:
        if all(isinstance(x, list) for x in raw):
            width = len(raw[0])
            if width == 0 or any(len(row) != width for row in raw):
                return None
            return [math.fsum(float(row[i]) for row in raw) / len(raw) for i in range(width)]
        return [float(x) for x in raw]
    except (TypeError, ValueError):
        return None


def _truncated(response: ChatCompletion) -> bool:
    choices: Any = getattr(response, "choices", None)
    return bool(choices) and getattr(choices[0], "finish_reason", None) == "length"
