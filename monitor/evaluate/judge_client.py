"""One chat call to the judge endpoint, with everything that can go wrong handled.

- The ``openai`` async client (``AsyncAzureOpenAI`` when ``azure_api_version`` is set) with its own
  retries off (``max_retries=0``): retries happen here, so each attempt is counted.
- Per-attempt timeout (``timeout_seconds``, enforced around the whole request).
- Retries on 429, 5xx, connection errors and timeouts, up to ``max_retries``, with full-jitter
  exponential backoff (``uniform(0, min(backoff_max, backoff_base * 2**n))``); a ``Retry-After``
  (seconds or HTTP date, or ``retry-after-ms``) on 429/5xx is honoured exactly instead. A
  Retry-After longer than ``backoff_max_seconds`` ends the call at once rather than holding a
  judge slot that long.
- Structured output: ``response_format`` json_schema (strict); when the endpoint rejects it
  (400/422), the same request is repeated with ``json_object`` and, once that is accepted, the
  endpoint is remembered as json_object-only for the client's lifetime.
- A reply that is truncated (``finish_reason == "length"``), not JSON, or not of the task's
  schema is retried once, then the call fails with ``malformed_output``.
- A :class:`~monitor.evaluate.circuit.CircuitBreaker` consulted before every attempt.

A failed call raises :class:`CallFailure` with a reason (``judge_timeout``, ``malformed_output``,
``judge_error``, ``circuit_open``) and a detail that never holds prompt text or secrets.
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
from typing import Literal, TypeVar

import httpx
import openai
import structlog
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.completion_create_params import ResponseFormat

from monitor.evaluate.circuit import CircuitBreaker, CircuitState
from monitor.evaluate.judge_config import JudgeConfig
from monitor.evaluate.judge_metrics import JudgeMetrics, RequestOutcome
from monitor.evaluate.judge_prompts import MalformedOutput, Prompt
from monitor.models import Usage

log = structlog.get_logger(__name__)

T = TypeVar("T")
FailureReason = Literal["judge_timeout", "malformed_output", "judge_error", "circuit_open"]
ResponseMode = Literal["json_schema", "json_object"]
NO_KEY = "EMPTY"  # sent when no api_key is configured (vLLM / Ollama ignore it)
OPENAI_BASE_URL = "https://api.openai.com/v1"


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


@dataclass(frozen=True)
class _FailedAttempt:
    failure: CallFailure
    outcome: RequestOutcome = "error"
    retryable: bool = False
    retry_after: float | None = None
    status: int | None = None  # HTTP status, when the endpoint answered


class JudgeClient:
    """Makes judge calls for one endpoint (one client, one circuit, one response-mode memory)."""

    def __init__(
        self,
        config: JudgeConfig,
        metrics: JudgeMetrics,
        evaluator: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.evaluator = evaluator
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.response_mode: ResponseMode = "json_schema"
        self.circuit = CircuitBreaker(
            config.circuit_failure_threshold,
            config.circuit_reset_seconds,
            clock=clock,
            on_change=self._circuit_changed,
        )
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._client = self._make_client()

    def _make_client(self) -> openai.AsyncOpenAI:
        cfg = self.config
        key = cfg.api_key.get_secret_value() if cfg.api_key is not None else NO_KEY
        headers = cfg.header_values() or None
        timeout = httpx.Timeout(cfg.timeout_seconds, connect=min(cfg.timeout_seconds, 10.0))
        if cfg.azure_api_version:
            return openai.AsyncAzureOpenAI(
                azure_endpoint=cfg.base_url or "",
                api_version=cfg.azure_api_version,
                api_key=key,
                default_headers=headers,
                timeout=timeout,
                max_retries=0,
            )
        return openai.AsyncOpenAI(
            base_url=cfg.base_url or OPENAI_BASE_URL,  # never the environment's OPENAI_BASE_URL
            api_key=key,
            default_headers=headers,
            timeout=timeout,
            max_retries=0,
        )

    def _circuit_changed(self, state: CircuitState) -> None:
        self.metrics.circuit(self.evaluator, state != "closed")
        log.warning("judge circuit breaker", state=state, evaluator=self.evaluator)

    async def aclose(self) -> None:
        await self._client.close()

    def _response_format(self, mode: ResponseMode, prompt: Prompt) -> ResponseFormat:
        if mode == "json_object":
            return {"type": "json_object"}
        return {
            "type": "json_schema",
            "json_schema": {"name": prompt.task, "schema": prompt.schema, "strict": True},
        }

    async def _request(self, prompt: Prompt, mode: ResponseMode) -> ChatCompletion:
        cfg = self.config
        system: ChatCompletionSystemMessageParam = {"role": "system", "content": prompt.system}
        user: ChatCompletionUserMessageParam = {"role": "user", "content": prompt.user}
        async with asyncio.timeout(cfg.timeout_seconds):
            return await self._client.chat.completions.create(
                model=cfg.model,
                messages=[system, user],
                temperature=0,
                seed=cfg.seed if cfg.seed is not None else openai.omit,
                response_format=self._response_format(mode, prompt),
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
        async with self._semaphore:
            return await self._complete(prompt, parse, tally, trace_id)

    async def _complete(
        self,
        prompt: Prompt,
        parse: Callable[[object], T],
        tally: TokenTally,
        trace_id: str | None,
    ) -> T:
        mode = self.response_mode
        fell_back = False
        malformed_retry_left = 1
        retries = 0
        attempts = 0
        last: CallFailure | None = None
        while True:
            self._check_circuit(prompt.task, last, attempts, trace_id)
            attempts += 1
            started = self._clock()
            settled = False
            try:
                response = await self._request(prompt, mode)
            except (TimeoutError, openai.OpenAIError) as exc:
                settled = True
                failed = self._failed_attempt(exc)
            else:
                settled = True
                self.circuit.record_success()
                self._account(response, tally)
                if fell_back and self.response_mode != "json_object":
                    self.response_mode = "json_object"
                    log.warning(
                        "judge endpoint does not support json_schema; using json_object",
                        evaluator=self.evaluator,
                    )
                try:
                    result = self._parse(response, parse)
                except MalformedOutput as exc:
                    self.metrics.request(self.evaluator, "malformed", self._clock() - started)
                    last = CallFailure("malformed_output", str(exc))
                    if malformed_retry_left > 0:
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
                    self.circuit.abandon()

            if failed.status in (400, 422) and mode == "json_schema" and not fell_back:
                self.metrics.request(self.evaluator, failed.outcome, self._clock() - started)
                mode, fell_back = "json_object", True
                log.info(
                    "judge endpoint rejected json_schema; trying json_object",
                    status=failed.status,
                    evaluator=self.evaluator,
                )
                continue
            last = failed.failure
            await self._sleep(
                self._retry_delay(failed, retries, attempts, started, prompt.task, trace_id)
            )
            retries += 1

    async def embed(
        self, texts: list[str], model: str, tally: TokenTally, trace_id: str | None = None
    ) -> list[list[float]]:
        """Embeddings of `texts` (one request), or :class:`CallFailure`.

        Same endpoint, timeout, circuit and retry policy as chat calls; no response-format
        fallback and no malformed-reply retry.
        """
        async with self._semaphore:
            retries = 0
            attempts = 0
            last: CallFailure | None = None
            while True:
                self._check_circuit("embeddings", last, attempts, trace_id)
                attempts += 1
                started = self._clock()
                settled = False
                try:
                    async with asyncio.timeout(self.config.timeout_seconds):
                        response = await self._client.embeddings.create(
                            model=model, input=texts, encoding_format="float"
                        )
                except (TimeoutError, openai.OpenAIError) as exc:
                    settled = True
                    failed = self._failed_attempt(exc)
                else:
                    settled = True
                    self.circuit.record_success()
                    self.metrics.request(self.evaluator, "ok", self._clock() - started)
                    self._account(response, tally)
                    ordered = sorted(response.data or [], key=lambda d: d.index)
                    vectors = [[float(x) for x in d.embedding] for d in ordered]
                    if len(vectors) != len(texts) or any(not v for v in vectors):
                        raise CallFailure("malformed_output", "embeddings reply is incomplete")
                    return vectors
                finally:
                    if not settled:  # cancelled mid-request: the attempt says nothing
                        self.circuit.abandon()
                last = failed.failure
                await self._sleep(
                    self._retry_delay(failed, retries, attempts, started, "embeddings", trace_id)
                )
                retries += 1

    def _check_circuit(
        self, task: str, last: CallFailure | None, attempts: int, trace_id: str | None
    ) -> None:
        """Raise (the last attempt's failure, else ``circuit_open``) while the circuit refuses."""
        if not self.circuit.allow():
            failure = last or CallFailure("circuit_open", "circuit breaker open")
            self._log_failure(task, failure, attempts, trace_id)
            raise failure

    def _failed_attempt(self, exc: TimeoutError | openai.OpenAIError) -> _FailedAttempt:
        """What a failed request means for the circuit, the metrics and retrying."""
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            self.circuit.record_failure()
            detail = f"timed out after {self.config.timeout_seconds:g} s"
            return _FailedAttempt(CallFailure("judge_timeout", detail), "timeout", retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            self.circuit.record_failure()
            return _FailedAttempt(CallFailure("judge_error", "connection error"), retryable=True)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status >= 500 or status in (401, 403, 404):
                self.circuit.record_failure()
            else:
                self.circuit.record_success()  # the endpoint answered
            label = "rate limited (HTTP 429)" if status == 429 else f"HTTP {status}"
            retryable = status == 429 or status >= 500
            return _FailedAttempt(
                CallFailure("judge_error", label),
                "rate_limited" if status == 429 else "error",
                retryable=retryable,
                retry_after=_retry_after(exc) if retryable else None,
                status=status,
            )
        self.circuit.record_failure()
        return _FailedAttempt(CallFailure("judge_error", type(exc).__name__))

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
            raise MalformedOutput("the reply was truncated (finish_reason=length)")
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
