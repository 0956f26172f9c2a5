"""The shared retry policy (monitor/retry.py): bounds, jitter, Retry-After, logging and counting.

Unit tests with an injected sleep (nothing waits); the policy through real parts is tested by
its users: the judge against a real HTTP server (test_llm_judge.py), the golden-set client
(test_golden_runner.py), the store and the Kafka producers (test_faults_*.py).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
import structlog
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from dashboards.contract import contract_metrics
from monitor.retry import (
    OPERATIONS,
    Backoff,
    FailingCalls,
    RetriesExhausted,
    RetryMetrics,
    RetryPolicy,
    parse_retry_after,
)


class Flaky(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("flaky")
        self.retry_after = retry_after


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def failing(times: int, result: str = "done", retry_after: float | None = None) -> Any:
    """An operation that raises Flaky `times` times, then returns `result`."""
    calls = [0]

    async def operation() -> str:
        calls[0] += 1
        if calls[0] <= times:
            raise Flaky(retry_after)
        return result

    operation.calls = calls  # type: ignore[attr-defined]
    return operation


def policy(sleeps: Sleeps, **overrides: Any) -> RetryPolicy:
    values: dict[str, Any] = {
        "operation": "store",
        "backoff": Backoff(initial_seconds=0.1, max_seconds=2.0),
        "retry_on": lambda exc: isinstance(exc, Flaky),
        "retry_after": lambda exc: exc.retry_after if isinstance(exc, Flaky) else None,
        "sleep": sleeps,
        "rng": random.Random(7),
    }
    values.update(overrides)
    return RetryPolicy(**values)


async def test_bounded_policy_gives_up_after_its_attempts() -> None:
    sleeps = Sleeps()
    operation = failing(10)
    with pytest.raises(RetriesExhausted) as info:
        await policy(sleeps, attempts=3).call(operation)
    assert operation.calls == [3]
    assert info.value.attempts == 3 and isinstance(info.value.last, Flaky)
    assert len(sleeps) == 2  # no wait after the last attempt


async def test_bounded_policy_returns_what_succeeds_within_its_attempts() -> None:
    sleeps = Sleeps()
    assert await policy(sleeps, attempts=3).call(failing(2, "ok")) == "ok"
    assert len(sleeps) == 2


async def test_unbounded_policy_retries_until_success_with_capped_waits() -> None:
    sleeps = Sleeps()
    operation = failing(40, "acknowledged")
    assert await policy(sleeps).call(operation) == "acknowledged"
    assert operation.calls == [41] and len(sleeps) == 40
    assert all(0.0 <= s <= 2.0 for s in sleeps)
    assert max(sleeps[10:]) > 1.0  # the cap is reached, not a wait that keeps doubling


async def test_a_failure_not_worth_retrying_propagates_at_once() -> None:
    sleeps = Sleeps()

    async def broken() -> None:
        raise ValueError("the database rejects this row")

    with pytest.raises(ValueError, match="rejects"):
        await policy(sleeps).call(broken)
    assert sleeps == []


async def test_waits_are_full_jitter_within_the_doubling_cap() -> None:
    backoff = Backoff(initial_seconds=0.5, max_seconds=30.0)
    assert [backoff.cap(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    rng = random.Random(1)
    for retry in range(8):
        draws = [backoff.draw(retry, rng) for _ in range(400)]
        cap = backoff.cap(retry)
        assert all(0.0 <= d <= cap for d in draws)
        # spread over the whole range, not a fixed step
        assert min(draws) < 0.1 * cap and max(draws) > 0.9 * cap


async def test_retry_after_is_the_least_wait() -> None:
    sleeps = Sleeps()
    await policy(sleeps, attempts=2).call(failing(1, retry_after=1.5))
    assert sleeps == [1.5]  # the backoff alone would wait at most 0.1 s


async def test_a_long_retry_after_is_cut_to_the_cap_or_ends_the_retries() -> None:
    sleeps = Sleeps()
    await policy(sleeps, attempts=2).call(failing(1, retry_after=120.0))
    assert sleeps == [2.0]

    sleeps.clear()
    operation = failing(1, retry_after=120.0)
    with pytest.raises(RetriesExhausted) as info:
        await policy(sleeps, attempts=5, give_up_on_long_retry_after=True).call(operation)
    assert operation.calls == [1] and sleeps == []
    assert info.value.attempts == 1 and info.value.retry_after == 120.0


async def test_retries_are_counted_and_logged() -> None:
    registry = CollectorRegistry()
    metrics = RetryMetrics.of(registry)
    assert RetryMetrics.of(registry) is metrics  # one counter per registry, shared
    for operation in OPERATIONS:  # every series exported from the start
        assert registry.get_sample_value("ragmon_retries_total", {"operation": operation}) == 0
    sleeps = Sleeps()
    with structlog.testing.capture_logs() as events:
        await policy(sleeps, metrics=metrics).call(failing(3), task="faithfulness")
    assert registry.get_sample_value("ragmon_retries_total", {"operation": "store"}) == 3
    assert registry.get_sample_value("ragmon_retries_total", {"operation": "judge_chat"}) == 0
    retries = [e for e in events if e["event"] == "retrying"]
    assert [e["attempt"] for e in retries] == [1, 2, 3]
    assert all(e["operation"] == "store" and e["task"] == "faithfulness" for e in retries)
    assert [e["retry_in_s"] for e in retries] == [round(s, 3) for s in sleeps]


async def test_on_retry_sees_each_failure() -> None:
    seen: list[BaseException] = []
    await policy(Sleeps(), on_retry=seen.append).call(failing(2))
    assert len(seen) == 2 and all(isinstance(e, Flaky) for e in seen)


async def test_an_operation_that_is_not_a_coroutine_function_is_awaited_too() -> None:
    sleeps = Sleeps()
    operation = failing(2)
    assert await policy(sleeps).call(lambda: operation()) == "done"
    assert operation.calls == [3]


async def test_a_call_is_registered_as_failing_while_it_retries_and_forgotten_after() -> None:
    clock = [100.0]
    calls = FailingCalls(clock=lambda: clock[0])
    seen: list[tuple[str, float, str] | None] = []

    async def sleep(seconds: float) -> None:
        oldest = calls.oldest()
        seen.append(None if oldest is None else (oldest.operation, oldest.since, oldest.error))
        clock[0] += 10

    operation = failing(2)
    assert await policy(Sleeps(), sleep=sleep, failing=calls).call(operation) == "done"
    # the first failure sets `since`; later ones keep it
    assert seen == [("store", 100.0, "Flaky: flaky"), ("store", 100.0, "Flaky: flaky")]
    assert calls.oldest() is None, "a call that succeeded is no longer failing"
    with pytest.raises(RetriesExhausted):
        await policy(Sleeps(), failing=calls, attempts=2).call(failing(5))
    assert calls.oldest() is None, "nor is one that gave up"


def test_the_counter_is_in_the_metrics_contract() -> None:
    metric = contract_metrics()["ragmon_retries_total"]
    assert metric.type == "counter" and metric.labels == {"operation"}


def test_attempts_must_allow_one_attempt() -> None:
    with pytest.raises(ValueError, match="attempts"):
        policy(Sleeps(), attempts=0)


def test_parse_retry_after_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": " 2.5 "}) == 2.5
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"Retry-After": later}, now=now) == 7.0
    earlier = format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"Retry-After": earlier}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "150", "retry-after": "9"}) == 0.15
    for unreadable in ("soon", "-1", "nan", ""):
        assert parse_retry_after({"Retry-After": unreadable}) is None
    assert parse_retry_after({}) is None


def test_parse_retry_after_reads_every_header_mapping_without_regard_to_case() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=4), usegmt=True)
    assert parse_retry_after(httpx.Headers({"RETRY-AFTER": date}), now=now) == 4.0
    assert parse_retry_after(CIMultiDict({"retry-After": "1"})) == 1.0  # aiohttp's headers
    assert parse_retry_after({"RETRY-AFTER": "1"}) == 1.0  # a plain dict


async def test_the_first_attempt_counts_as_one_of_the_bounded_attempts() -> None:
    # The first attempt runs outside tenacity: its failure must still be attempt 1 of `attempts`.
    sleeps = Sleeps()
    operation = failing(5)
    with pytest.raises(RetriesExhausted) as info:
        await policy(sleeps, attempts=1).call(operation)
    assert operation.calls == [1] and info.value.attempts == 1 and sleeps == []
    assert await policy(sleeps, attempts=2).call(failing(1, "second")) == "second"
    assert len(sleeps) == 1


async def test_a_call_that_succeeds_at_once_neither_waits_nor_registers() -> None:
    sleeps, calls, registry = Sleeps(), FailingCalls(), CollectorRegistry()
    metrics = RetryMetrics(registry)
    result = await policy(sleeps, failing=calls, metrics=metrics).call(failing(0, "at once"))
    assert result == "at once" and sleeps == [] and calls.oldest() is None
    assert registry.get_sample_value("ragmon_retries_total", {"operation": "store"}) in (None, 0)
