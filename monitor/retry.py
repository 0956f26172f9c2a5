"""One way to retry: jittered exponential backoff, logged and counted, on tenacity.

Every retry loop of the daemon is a :class:`RetryPolicy`: the dead-letter producer, the internal
topic writer, the results store, the judge (chat and embeddings) and the golden-set service
client. A policy repeats an operation while `retry_on` says its failure is worth repeating:

- The wait before retry ``n`` (from 0) is drawn from ``uniform(0, min(max, initial * 2**n))``
  ("full jitter": replicas that failed together do not come back together). A server's
  ``Retry-After`` (:func:`parse_retry_after`) is the least wait; one longer than ``max`` is
  cut to ``max``, or ends the retries at once when ``give_up_on_long_retry_after`` (the judge
  would rather fail a score than hold a slot that long).
- ``attempts`` bounds the attempts (first one included); ``None`` retries until the operation
  succeeds or `retry_on` refuses -- what at-least-once delivery needs while a broker or store is
  away: the caller's offsets stay uncommitted meanwhile.
- A failure `retry_on` refuses propagates as it is. Retries that stop on the bound (or on a long
  Retry-After) raise :class:`RetriesExhausted` carrying the last failure, so the caller can say
  how many attempts it made.
- Each retry is logged (``retrying``, with the operation, attempt and wait) and counted in
  ``ragmon_retries_total{operation}`` (:class:`RetryMetrics`).
- A policy given a :class:`FailingCalls` registers every call while it is retrying, so that
  readiness can say which write has been failing, since when and why.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import ClassVar, Literal, TypeVar

import structlog
import tenacity
from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog

log = structlog.get_logger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Operation = catalog.RetryOperation  # what is retried: the values of the counter's label
OPERATIONS = catalog.RETRY_OPERATIONS
LogLevel = Literal["debug", "info", "warning"]


class RetryMetrics:
    """``ragmon_retries_total{operation}``; one per registry (:meth:`of`)."""

    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, RetryMetrics]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.retries = catalog.create(catalog.RETRIES, registry)

    @classmethod
    def of(cls, registry: CollectorRegistry) -> RetryMetrics:
        """The retry counter of `registry`, declared on first use (every caller shares it)."""
        found = cls._by_registry.get(registry)
        if found is None:
            found = cls._by_registry[registry] = cls(registry)
        return found

    def count(self, operation: Operation) -> None:
        self.retries.labels(operation).inc()


class RetriesExhausted(Exception):
    """A retryable failure the policy stopped repeating (`last` is that failure)."""

    def __init__(self, last: BaseException, attempts: int, retry_after: float | None) -> None:
        super().__init__(f"{last} (gave up after {attempts} attempts)")
        self.last = last
        self.attempts = attempts
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Failing:
    """A call that is retrying: what it is, since when (monotonic) and its last failure."""

    operation: Operation
    since: float
    error: str


class FailingCalls:
    """The calls of some retry policies that are failing right now (not thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._calls: dict[object, Failing] = {}

    def failed(self, call: object, operation: Operation, error: BaseException) -> None:
        """`call` failed and will be tried again; the first failure of a call sets `since`."""
        known = self._calls.get(call)
        since = known.since if known is not None else self._clock()
        self._calls[call] = Failing(operation, since, f"{type(error).__name__}: {error}"[:300])

    def ended(self, call: object) -> None:
        """`call` succeeded or gave up."""
        self._calls.pop(call, None)

    def oldest(self) -> Failing | None:
        """The call failing for the longest time, if any."""
        return min(self._calls.values(), key=lambda f: f.since, default=None)


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff: retry ``n`` waits ``uniform(0, cap(n))``."""

    initial_seconds: float
    max_seconds: float

    def cap(self, retry: int) -> float:
        """The longest wait before retry `retry` (0 for the first)."""
        return min(self.max_seconds, self.initial_seconds * 2.0**retry)

    def draw(self, retry: int, rng: random.Random) -> float:
        return rng.uniform(0.0, self.cap(retry))


# A producer waiting for the broker's acknowledgement (dead letters, internal topics).
PRODUCE_BACKOFF = Backoff(initial_seconds=0.2, max_seconds=5.0)


def _never(_: BaseException) -> float | None:
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """How one operation is retried (see the module docstring)."""

    operation: Operation
    backoff: Backoff
    retry_on: Callable[[BaseException], bool]
    attempts: int | None = None
    retry_after: Callable[[BaseException], float | None] = _never
    give_up_on_long_retry_after: bool = False
    metrics: RetryMetrics | None = None
    log_level: LogLevel = "warning"
    on_retry: Callable[[BaseException], None] | None = None
    failing: FailingCalls | None = None
    sleep: Sleep = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("attempts must be at least 1 (or None: unbounded)")

    async def call(self, operation: Callable[[], Awaitable[T]], **context: object) -> T:
        """Run `operation` until it succeeds, fails for good or the policy gives up; `context`
        is added to the retry log lines."""
        # Nearly every call succeeds at once: the first attempt runs without tenacity, whose
        # set-up cost about as much as a produce (issue 26); a failure of it is handed to
        # tenacity as its first attempt's, so what follows is as if tenacity had made it.
        try:
            return await operation()
        except BaseException as failure:
            first: BaseException | None = failure
        # A new AsyncRetrying per call: tenacity keeps its per-call state on the instance.
        call = object()
        retrying = tenacity.AsyncRetrying(
            sleep=self.sleep,
            retry=tenacity.retry_if_exception(self.retry_on),
            wait=self._wait,
            stop=self._stop,
            before_sleep=lambda state: self._before_sleep(state, context, call),
            retry_error_callback=self._exhausted,
        )

        async def attempt() -> T:
            nonlocal first
            if first is not None:
                failure, first = first, None
                raise failure
            # tenacity awaits only what it sees is a coroutine function (a lambda is not)
            return await operation()

        try:
            result: T = await retrying(attempt)
        finally:
            if self.failing is not None:
                self.failing.ended(call)
        return result

    def _hint(self, state: tenacity.RetryCallState) -> float | None:
        failure = _failure(state)
        return self.retry_after(failure) if failure is not None else None

    def _wait(self, state: tenacity.RetryCallState) -> float:
        delay = self.backoff.draw(state.attempt_number - 1, self.rng)
        hint = self._hint(state)
        if hint is not None:
            delay = max(delay, hint)
        return min(delay, self.backoff.max_seconds)

    def _stop(self, state: tenacity.RetryCallState) -> bool:
        if self.attempts is not None and state.attempt_number >= self.attempts:
            return True
        if self.give_up_on_long_retry_after:
            hint = self._hint(state)
            return hint is not None and hint > self.backoff.max_seconds
        return False

    def _exhausted(self, state: tenacity.RetryCallState) -> None:
        failure = _failure(state)
        assert failure is not None  # the policy stops only after a failed attempt
        raise RetriesExhausted(failure, state.attempt_number, self._hint(state)) from failure

    def _before_sleep(
        self, state: tenacity.RetryCallState, context: Mapping[str, object], call: object
    ) -> None:
        failure = _failure(state)
        assert failure is not None
        if self.failing is not None:
            self.failing.failed(call, self.operation, failure)
        if self.metrics is not None:
            self.metrics.count(self.operation)
        if self.on_retry is not None:
            self.on_retry(failure)
        getattr(log, self.log_level)(
            "retrying",
            operation=self.operation,
            attempt=state.attempt_number,
            error=type(failure).__name__,
            detail=str(failure),
            retry_in_s=round(state.upcoming_sleep, 3),
            **context,
        )


def _failure(state: tenacity.RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None and outcome.failed else None


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds a server asks to wait: ``retry-after-ms`` (OpenAI's), else ``Retry-After`` in
    seconds or as an HTTP date (a date in the past is 0). None when absent or unreadable.
    Header names are matched without regard to case, whatever mapping holds them."""
    raw_ms = _header(headers, "retry-after-ms")
    if raw_ms:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = -1.0
        if ms >= 0 and ms == ms:
            return ms / 1000.0
    raw = _header(headers, "retry-after")
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
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return seconds


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value
