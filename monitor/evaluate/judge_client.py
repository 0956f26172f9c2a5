"""One chat call (or embeddings request) to the judge endpoint, with everything that can go wrong
handled.

- The ``openai`` async client (``AsyncAzureOpenAI`` when ``azure_api_version`` is set) with its own
  retries off (``max_retries=0``): retries happen here, so each attempt is counted.
- Per-attempt timeout (``timeout_seconds``, enforced around the whole request).
- Every chat call is bounded: ``max_tokens`` (``judge.max_tokens``, else the task's budget sized
  from its output schema). A server that rejects the parameter by that name and asks for
  ``max_completion_tokens`` gets that instead, remembered.
- Structured output (``judge.response_format``): ``json_schema`` (strict); ``json_object``
  carrying the schema as ``{"type": "json_object", "schema": ...}`` (what llama.cpp's servers
  enforce); ``auto`` starts with json_schema. On a rejection that names the response format,
  whatever its status (llama_cpp.server answers 500), the same request is repeated one step
  down (json_schema -> json_object with the schema -> plain json_object) and, once a step is
  accepted, the endpoint is remembered at it for the client's lifetime.
- Failures are classified by kind, not by status alone (:func:`classify`): a prompt longer than
  the model's context fails that trace at once (``context_too_long``, the server's words kept in
  the detail); 404/501 or a refusal saying the server does not support the request (e.g.
  embeddings off; llama_cpp.server says so with a 500) fail at once and say nothing against the
  circuit; 401/403 fail at once and count against it; 429 is retried,
  honouring ``Retry-After``; 5xx, connection errors and timeouts are retried with full-jitter
  exponential backoff (``uniform(0, min(backoff_max, backoff_base * 2**n))``), up to
  ``max_retries``. A Retry-After longer than ``backoff_max_seconds`` ends the call at once
  rather than holding a judge slot that long. Any other rejection (400, 422, ...) is final.
- A reply that is not JSON or not of the task's schema is retried once, then the call fails with
  ``malformed_output``; a reply cut at the token bound (``finish_reason == "length"``) fails at
  once (at temperature 0 the same request would be cut again).
- Chat and embeddings are separate endpoints (``embedding_base_url``; llama.cpp serves them from
  separate processes), each with its own client, concurrency bound and
  :class:`~monitor.evaluate.circuit.CircuitBreaker`. While a circuit is half-open, calls wait for
  the probe's verdict instead of failing.
- Tokens of every response are counted: in the evaluation's :class:`TokenTally`, the judge
  metrics, and the shared :class:`~monitor.evaluate.token_budget.TokenBudget`.

A failed call raises :class:`CallFailure` with a reason (``judge_timeout``, ``malformed_output``,
``judge_error``, ``circuit_open``, ``context_too_long``) and a detail that never holds prompt
text or secrets.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar, cast

import httpx
import openai
import structlog
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.completion_create_params import ResponseFormat
from pydantic import SecretStr

from monitor.evaluate.circuit import CircuitBreaker, CircuitState
from monitor.evaluate.judge_config import JudgeConfig
from monitor.evaluate.judge_metrics import Endpoint, JudgeMetrics, RequestOutcome
from monitor.evaluate.judge_prompts import MalformedOutput, Prompt
from monitor.evaluate.token_budget import TokenBudget
from monitor.models import Usage

log = structlog.get_logger(__name__)

T = TypeVar("T")
FailureReason = Literal[
    "judge_timeout", "malformed_output", "judge_error", "circuit_open", "context_too_long"
]
FailureKind = Literal[
    "context_too_long",  # the prompt does not fit the model's context: final for this trace
    "unsupported",  # 404/501: the server has no such route or feature
    "auth",  # 401/403
    "rate_limited",  # 429
    "transient",  # 5xx, connection errors, timeouts
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
NO_KEY = "EMPTY"  # sent when no api_key is configured (vLLM / Ollama ignore it)
OPENAI_BASE_URL = "https://api.openai.com/v1"
CAUSE_CHARS = 200  # how much of a server's error message a detail keeps

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


@dataclass
class TokenTally:
    """Tokens reported by the responses of one evaluation (all its calls and attempts)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reported: bool = False

    def usage(self) -> Usage | None:
        if not self.reported:
            return None
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)


def parse_retry_after(headers: httpx.Headers, now: datetime | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``retry-after`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = -1.0
        if ms >= 0 and ms == ms:
            return ms / 1000.0
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
        return max(0.0, seconds)
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return seconds


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
        return self.kind in ("rate_limited", "transient")


@dataclass
class _Endpoint:
    """One server the judge talks to: its client, concurrency bound and circuit breaker."""

    name: Endpoint
    client: openai.AsyncOpenAI
    circuit: CircuitBreaker
    slots: asyncio.Semaphore


class JudgeClient:
    """Makes judge calls for one configuration: a chat endpoint and an embeddings endpoint (the
    same server unless ``embedding_base_url`` says otherwise), each with its own circuit; the
    response mode and token parameter the chat endpoint accepts are remembered."""

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
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.evaluator = evaluator
        self.budget = budget
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.response_mode: ResponseMode = (
            "json_object" if config.response_format == "json_object" else "json_schema"
        )
        self.token_parameter: TokenParameter = "max_tokens"
        chat_client = self._make_client(config.base_url, config.api_key)
        embeddings_client = chat_client
        if config.embedding_base_url is not None:
            embeddings_client = self._make_client(
                config.embedding_base_url, config.embedding_api_key
            )
        self._chat = self._endpoint("chat", chat_client)
        self._embeddings = self._endpoint("embeddings", embeddings_client)

    @property
    def circuit(self) -> CircuitBreaker:
        """The chat endpoint's circuit breaker."""
        return self._chat.circuit

    @property
    def embeddings_circuit(self) -> CircuitBreaker:
        return self._embeddings.circuit

    def _endpoint(self, name: Endpoint, client: openai.AsyncOpenAI) -> _Endpoint:
        def changed(state: CircuitState) -> None:
            self.metrics.circuit(self.evaluator, state != "closed", name)
            log.warning(
                "judge circuit breaker", state=state, evaluator=self.evaluator, endpoint=name
            )

        circuit = CircuitBreaker(
            self.config.circuit_failure_threshold,
            self.config.circuit_reset_seconds,
            clock=self._clock,
            on_change=changed,
        )
        return _Endpoint(name, client, circuit, asyncio.Semaphore(self.config.max_concurrency))

    def _make_client(self, base_url: str | None, api_key: SecretStr | None) -> openai.AsyncOpenAI:
        cfg = self.config
        key = api_key.get_secret_value() if api_key is not None else NO_KEY
        headers = cfg.header_values() or None
        timeout = httpx.Timeout(cfg.timeout_seconds, connect=min(cfg.timeout_seconds, 10.0))
        if cfg.azure_api_version:
            return openai.AsyncAzureOpenAI(
                azure_endpoint=base_url or "",
                api_version=cfg.azure_api_version,
                api_key=key,
                default_headers=headers,
                timeout=timeout,
                max_retries=0,
            )
        return openai.AsyncOpenAI(
            base_url=base_url or OPENAI_BASE_URL,  # never the environment's OPENAI_BASE_URL
            api_key=key,
            default_headers=headers,
            timeout=timeout,
            max_retries=0,
        )

    async def aclose(self) -> None:
        await self._chat.client.close()
        if self._embeddings.client is not self._chat.client:
            await self._embeddings.client.close()

    def max_tokens(self, prompt: Prompt) -> int:
        """The reply bound sent with `prompt`: the configured one, else the task's."""
        return self.config.max_tokens or prompt.max_tokens

    @staticmethod
    def _response_format(mode: ResponseMode, prompt: Prompt) -> ResponseFormat:
        if mode == "json_object_without_schema":
            return {"type": "json_object"}
        if mode == "json_object":
            # Not in the OpenAI type: the form llama.cpp's servers (llama-server and
            # llama_cpp.server) take to constrain json_object output to a schema.
            return cast(ResponseFormat, {"type": "json_object", "schema": prompt.schema})
        return {
            "type": "json_schema",
            "json_schema": {"name": prompt.task, "schema": prompt.schema, "strict": True},
        }

    async def _request(
        self, prompt: Prompt, mode: ResponseMode, parameter: TokenParameter
    ) -> ChatCompletion:
        cfg = self.config
        system: ChatCompletionSystemMessageParam = {"role": "system", "content": prompt.system}
        user: ChatCompletionUserMessageParam = {"role": "user", "content": prompt.user}
        bound = self.max_tokens(prompt)
        async with asyncio.timeout(cfg.timeout_seconds):
            return await self._chat.client.chat.completions.create(
                model=cfg.model,
                messages=[system, user],
                temperature=0,
                seed=cfg.seed if cfg.seed is not None else openai.omit,
                response_format=self._response_format(mode, prompt),
                max_tokens=bound if parameter == "max_tokens" else openai.omit,
                max_completion_tokens=(
                    bound if parameter == "max_completion_tokens" else openai.omit
                ),
            )

    def _account(self, response: object, tally: TokenTally) -> None:
        """Tokens and cost of one response (chat completion or embeddings)."""
        usage = getattr(response, "usage", None)  # some servers send none
        if usage is None:
            return
        tin = _count(getattr(usage, "prompt_tokens", None))
        tout = _count(getattr(usage, "completion_tokens", None))
        tally.input_tokens += tin
        tally.output_tokens += tout
        tally.reported = True
        cfg = self.config
        cost = (tin * cfg.input_price_per_million + tout * cfg.output_price_per_million) / 1e6
        self.metrics.tokens(self.evaluator, tin, tout, cost)
        if self.budget is not None:
            self.budget.spend(tin + tout, self.evaluator)

    def _backoff(self, retry: int) -> float:
        cfg = self.config
        cap = min(cfg.backoff_max_seconds, cfg.backoff_base_seconds * (2**retry))
        return self._rng.uniform(0.0, cap)

    async def complete(
        self,
        prompt: Prompt,
        parse: Callable[[object], T],
        tally: TokenTally,
        trace_id: str | None = None,
    ) -> T:
        """One judge call: the parsed reply, or :class:`CallFailure`."""
        async with self._chat.slots:
            return await self._complete(prompt, parse, tally, trace_id)

    def _may_step_down(self, mode: ResponseMode) -> ResponseMode | None:
        """The next response mode to try after a rejection of `mode`, if any is allowed."""
        if self.config.response_format == "json_schema":
            return None  # asked for exactly this: a rejection is final
        return NEXT_MODE.get(mode)

    async def _complete(
        self,
        prompt: Prompt,
        parse: Callable[[object], T],
        tally: TokenTally,
        trace_id: str | None,
    ) -> T:
        mode = self.response_mode
        parameter = self.token_parameter
        malformed_retry_left = 1
        retries = 0
        attempts = 0
        last: CallFailure | None = None
        circuit = self._chat.circuit
        while True:
            await self._check_circuit(self._chat, prompt.task, last, attempts, trace_id)
            attempts += 1
            started = self._clock()
            settled = False
            try:
                response = await self._request(prompt, mode, parameter)
            except (TimeoutError, openai.OpenAIError) as exc:
                settled = True
                failed = self._failed_attempt(exc, circuit)
            else:
                settled = True
                circuit.record_success()
                self._account(response, tally)
                self._remember(mode, parameter)
                try:
                    result = self._parse(response, parse)
                except MalformedOutput as exc:
                    self.metrics.request(self.evaluator, "malformed", self._clock() - started)
                    last = CallFailure("malformed_output", str(exc))
                    if malformed_retry_left > 0 and not _truncated(response):
                        malformed_retry_left -= 1
                        log.info(
                            "judge reply malformed; retrying once",
                            task=prompt.task,
                            detail=str(exc),
                            trace_id=trace_id,
                        )
                        continue
                    self._log_failure(prompt.task, last, attempts, trace_id)
                    raise last from None
                self.metrics.request(self.evaluator, "ok", self._clock() - started)
                return result
            finally:
                if not settled:  # cancelled mid-request: the attempt says nothing
                    circuit.abandon()

            if failed.kind == "token_parameter" and parameter == "max_tokens":
                self.metrics.request(self.evaluator, failed.outcome, self._clock() - started)
                parameter = "max_completion_tokens"
                log.info("judge endpoint wants max_completion_tokens", evaluator=self.evaluator)
                continue
            step_down = self._may_step_down(mode) if failed.kind == "response_format" else None
            if step_down is not None:
                self.metrics.request(self.evaluator, failed.outcome, self._clock() - started)
                log.info(
                    "judge endpoint rejected the response format; stepping down",
                    rejected=mode,
                    next=step_down,
                    detail=failed.failure.detail,
                    evaluator=self.evaluator,
                )
                mode = step_down
                continue
            last = failed.failure
            await self._sleep(
                self._retry_delay(failed, retries, attempts, started, prompt.task, trace_id)
            )
            retries += 1

    def _remember(self, mode: ResponseMode, parameter: TokenParameter) -> None:
        """An accepted request: keep its response mode and token parameter for later calls."""
        if mode != self.response_mode:
            log.warning(
                "judge endpoint does not take the configured response format; using another",
                response_format=mode,
                evaluator=self.evaluator,
            )
            self.response_mode = mode
        self.token_parameter = parameter

    async def embed(
        self, texts: list[str], model: str, tally: TokenTally, trace_id: str | None = None
    ) -> list[list[float]]:
        """Embeddings of `texts` (one request), or :class:`CallFailure`.

        The embeddings endpoint: its own client, circuit and concurrency bound; the same
        timeout, classification and retry policy as chat calls; no malformed-reply retry.
        """
        endpoint = self._embeddings
        async with endpoint.slots:
            retries = 0
            attempts = 0
            last: CallFailure | None = None
            while True:
                await self._check_circuit(endpoint, "embeddings", last, attempts, trace_id)
                attempts += 1
                started = self._clock()
                settled = False
                try:
                    async with asyncio.timeout(self.config.timeout_seconds):
                        response = await endpoint.client.embeddings.create(
                            model=model, input=texts, encoding_format="float"
                        )
                except (TimeoutError, openai.OpenAIError) as exc:
                    settled = True
                    failed = self._failed_attempt(exc, endpoint.circuit)
                else:
                    settled = True
                    endpoint.circuit.record_success()
                    self.metrics.request(self.evaluator, "ok", self._clock() - started)
                    self._account(response, tally)
                    ordered = sorted(response.data or [], key=lambda d: d.index)
                    vectors = [_vector(d.embedding) for d in ordered]
                    if len(vectors) != len(texts) or any(not v for v in vectors):
                        raise CallFailure("malformed_output", "embeddings reply is incomplete")
                    return [v for v in vectors if v is not None]
                finally:
                    if not settled:  # cancelled mid-request: the attempt says nothing
                        endpoint.circuit.abandon()
                last = failed.failure
                await self._sleep(
                    self._retry_delay(failed, retries, attempts, started, "embeddings", trace_id)
                )
                retries += 1

    async def _check_circuit(
        self,
        endpoint: _Endpoint,
        task: str,
        last: CallFailure | None,
        attempts: int,
        trace_id: str | None,
    ) -> None:
        """Raise (the last attempt's failure, else ``circuit_open``) while the circuit refuses;
        wait for the verdict of a probe that is out."""
        if not await endpoint.circuit.admit():
            failure = last or CallFailure("circuit_open", f"{endpoint.name} circuit breaker open")
            self._log_failure(task, failure, attempts, trace_id)
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
        self, exc: TimeoutError | openai.OpenAIError, circuit: CircuitBreaker
    ) -> _FailedAttempt:
        """What a failed request means for the circuit, the metrics and retrying."""
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            circuit.record_failure()
            detail = f"timed out after {self.config.timeout_seconds:g} s"
            return _FailedAttempt(CallFailure("judge_timeout", detail), "transient", "timeout")
        if isinstance(exc, openai.APIConnectionError):
            circuit.record_failure()
            return _FailedAttempt(CallFailure("judge_error", "connection error"), "transient")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            kind = classify(exc)
            if kind in ("transient", "auth"):
                circuit.record_failure()
            else:
                circuit.record_success()  # the endpoint is up and answering
            cause = self._cause(exc)
            if kind == "context_too_long":
                failure = CallFailure("context_too_long", f"HTTP {status}: {cause}")
            elif kind == "rate_limited":
                failure = CallFailure("judge_error", "rate limited (HTTP 429)")
            elif kind == "transient":
                failure = CallFailure("judge_error", f"HTTP {status}")
            else:
                label = "endpoint not supported" if kind == "unsupported" else str(kind)
                label = label.replace("_", " ")
                failure = CallFailure("judge_error", f"{label} (HTTP {status}): {cause}")
            retryable = kind in ("rate_limited", "transient")
            return _FailedAttempt(
                failure,
                kind,
                "rate_limited" if kind == "rate_limited" else "error",
                retry_after=_retry_after(exc) if retryable else None,
            )
        circuit.record_failure()
        return _FailedAttempt(CallFailure("judge_error", type(exc).__name__), "transient")

    def _retry_delay(
        self,
        failed: _FailedAttempt,
        retries: int,
        attempts: int,
        started: float,
        task: str,
        trace_id: str | None,
    ) -> float:
        """Count the failed attempt; the wait before the next one, or raise its failure."""
        cfg = self.config
        self.metrics.request(self.evaluator, failed.outcome, self._clock() - started)
        last = failed.failure
        if not failed.retryable or retries >= cfg.max_retries:
            if failed.retryable:
                last = CallFailure(last.reason, f"{last.detail}, {attempts} attempts")
            self._log_failure(task, last, attempts, trace_id)
            raise last
        retry_after = failed.retry_after
        if retry_after is not None and retry_after > cfg.backoff_max_seconds:
            last = CallFailure(
                last.reason, f"{last.detail}, Retry-After {retry_after:g} s too long"
            )
            self._log_failure(task, last, attempts, trace_id)
            raise last
        delay = retry_after if retry_after is not None else self._backoff(retries)
        log.debug(
            "judge call retrying",
            task=task,
            detail=last.detail,
            delay_seconds=round(delay, 3),
            trace_id=trace_id,
        )
        return delay

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

    def _log_failure(
        self, task: str, failure: CallFailure, attempts: int, trace_id: str | None
    ) -> None:
        log.warning(
            "judge call failed",
            task=task,
            reason=failure.reason,
            detail=failure.detail,
            attempts=attempts,
            evaluator=self.evaluator,
            trace_id=trace_id,
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
