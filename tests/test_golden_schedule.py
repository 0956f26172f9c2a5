"""Scheduled golden-set runs: never overlapped, clean stop, exported, saved, reported."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config.golden import GoldenConfig, SuiteConfig
from monitor.golden.metrics import GoldenMetrics
from monitor.golden.results import RunResult
from monitor.golden.schedule import GoldenRunSink, GoldenScheduler, report_path
from tests.fixtures.golden.service import (
    RETRIEVAL_SUITE,
    RunningService,
    ServiceState,
    retrieval_app,
)


def _config(
    schedule: dict[str, Any] | None, *, url: str = "http://127.0.0.1:9/s", **extra: Any
) -> GoldenConfig:
    suite: dict[str, Any] = {
        "name": "nightly",
        "dataset": str(RETRIEVAL_SUITE),
        "service": {
            "url": url,
            "response": {"doc_ids": "results[*].id"},
            "request_template": {"query": "{{query}}", "top_k": "{{top_k}}", "mode": "ideal"},
            "backoff_seconds": 0.01,
        },
        "schedule": schedule,
        "bootstrap_resamples": 200,
    }
    suite.update(extra)
    return GoldenConfig.model_validate({"suites": [suite]})


def _result(suite: SuiteConfig, outcome: str = "passed") -> RunResult:
    now = datetime.now(UTC)
    return RunResult(
        suite=suite.name,
        kind="retrieval",
        dataset=str(suite.dataset),
        started_at=now,
        finished_at=now,
        duration_seconds=0.0,
        outcome=outcome,  # type: ignore[arg-type]
        targets=dict(suite.targets),
    )


class SlowRunner:
    """A suite runner that takes ``seconds`` and records how many runs overlap."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.active = 0
        self.max_active = 0
        self.started = 0
        self.finished = 0
        self.cancelled = 0

    async def __call__(self, suite: SuiteConfig) -> RunResult:
        self.started += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1
        self.finished += 1
        return _result(suite)


class ListSink:
    def __init__(self, fail: bool = False) -> None:
        self.saved: list[RunResult] = []
        self.fail = fail

    async def save(self, run_result: RunResult) -> None:
        if self.fail:
            raise OSError("store down")
        self.saved.append(run_result)


async def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_a_slow_run_is_never_overlapped() -> None:
    runner = SlowRunner(0.3)
    sink = ListSink()
    registry = CollectorRegistry()
    scheduler = GoldenScheduler(
        _config({"interval_seconds": 0.05}),
        runner=runner,
        sink=sink,
        metrics=GoldenMetrics(registry),
    )
    async with scheduler:
        job = scheduler._scheduler.get_job("nightly")
        assert job.max_instances == 1 and job.coalesce is True
        assert job.misfire_grace_time == 300
        await asyncio.sleep(1.1)  # the interval fires ~20 times, each run takes 0.3 s
    assert runner.max_active == 1
    assert runner.started >= 2
    assert scheduler.running_suites == []
    assert len(sink.saved) == runner.finished
    assert registry.get_sample_value(
        "ragmon_golden_runs_total", {"suite": "nightly", "outcome": "passed"}
    ) == float(runner.finished)


async def test_stop_waits_for_a_run_in_progress() -> None:
    runner = SlowRunner(0.3)
    sink = ListSink()
    scheduler = GoldenScheduler(
        _config({"interval_seconds": 3600, "run_on_start": True}),
        runner=runner,
        sink=sink,
        stop_timeout_seconds=5.0,
    )
    await scheduler.start()
    await _wait_for(lambda: runner.started == 1)
    t0 = time.monotonic()
    await scheduler.stop()
    assert 0.1 < time.monotonic() - t0 < 2.0  # waited for the run, did not hang
    assert runner.finished == 1 and runner.cancelled == 0
    assert [r.outcome for r in sink.saved] == ["passed"]  # its result was still saved
    assert scheduler.running_suites == []
    await scheduler.stop()  # idempotent


async def test_stop_cancels_a_run_that_takes_too_long() -> None:
    runner = SlowRunner(30.0)
    registry = CollectorRegistry()
    sink = ListSink()
    scheduler = GoldenScheduler(
        _config({"interval_seconds": 3600, "run_on_start": True}),
        runner=runner,
        sink=sink,
        metrics=GoldenMetrics(registry),
        stop_timeout_seconds=0.1,
    )
    await scheduler.start()
    await _wait_for(lambda: runner.started == 1)
    t0 = time.monotonic()
    await scheduler.stop()
    assert time.monotonic() - t0 < 2.0
    assert runner.cancelled == 1 and runner.finished == 0
    assert scheduler.running_suites == []
    assert (
        registry.get_sample_value(
            "ragmon_golden_runs_total", {"suite": "nightly", "outcome": "error"}
        )
        == 1.0
    )
    assert sink.saved == []  # a cancelled run is not saved
    # nothing left behind on the loop
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert pending == []


async def test_run_once_refuses_a_second_concurrent_run() -> None:
    runner = SlowRunner(0.2)
    scheduler = GoldenScheduler(_config(None), runner=runner)
    await scheduler.start()
    first = asyncio.create_task(scheduler.run_once("nightly"))
    await _wait_for(lambda: runner.started == 1)
    assert scheduler.running_suites == ["nightly"]
    assert await scheduler.run_once("nightly") is None
    result = await first
    assert result is not None and result.outcome == "passed"
    assert runner.max_active == 1
    with pytest.raises(KeyError):
        await scheduler.run_once("absent")
    await scheduler.stop()


async def test_failures_are_recorded_and_the_schedule_goes_on(tmp_path: Path) -> None:
    calls = 0

    async def flaky(suite: SuiteConfig) -> RunResult:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return _result(suite, "failed")

    registry = CollectorRegistry()
    sink = ListSink(fail=True)  # the store is down too: logged, not raised
    config = _config({"interval_seconds": 0.05}, report_dir=str(tmp_path / "reports"))
    scheduler = GoldenScheduler(config, runner=flaky, sink=sink, metrics=GoldenMetrics(registry))
    async with scheduler:
        await _wait_for(lambda: calls >= 2)
        await asyncio.sleep(0.05)
    sample = registry.get_sample_value
    assert sample("ragmon_golden_runs_total", {"suite": "nightly", "outcome": "error"}) == 1.0
    assert sample("ragmon_golden_runs_total", {"suite": "nightly", "outcome": "failed"}) >= 1.0  # type: ignore[operator]
    assert sample("ragmon_golden_target_ratio", {"suite": "nightly", "metric": "mrr"}) == 0.7
    reports = sorted((tmp_path / "reports" / "nightly").glob("*.md"))
    assert len(reports) == calls and all(r.with_suffix(".json").exists() for r in reports)
    first = reports[0].read_text(encoding="utf-8")
    assert "- Outcome: **ERROR**" in first and "- Error: RuntimeError: boom" in first


async def test_metrics_exist_before_the_first_run() -> None:
    registry = CollectorRegistry()
    scheduler = GoldenScheduler(
        _config(None), runner=SlowRunner(0), metrics=GoldenMetrics(registry)
    )
    async with scheduler:
        assert scheduler.scheduled_suites == []
    for outcome in ("passed", "failed", "error"):
        assert (
            registry.get_sample_value(
                "ragmon_golden_runs_total", {"suite": "nightly", "outcome": outcome}
            )
            == 0.0
        )
    assert (
        registry.get_sample_value(
            "ragmon_golden_target_ratio", {"suite": "nightly", "metric": "ndcg_5"}
        )
        == 0.7
    )


async def test_cron_schedule_and_missed_run_policy() -> None:
    config = _config({"cron": "0 3 * * *", "timezone": "Asia/Tokyo", "misfire_grace_seconds": None})
    scheduler = GoldenScheduler(config, runner=SlowRunner(0))
    async with scheduler:
        job = scheduler._scheduler.get_job("nightly")
        assert job.misfire_grace_time is None and job.coalesce and job.max_instances == 1
        fire = job.next_run_time
        assert (fire.hour, fire.minute) == (3, 0) and fire.utcoffset() == timedelta(hours=9)
    assert isinstance(ListSink(), GoldenRunSink)


async def test_scheduled_run_against_the_real_service(tmp_path: Path) -> None:
    state = ServiceState()
    service = RunningService(retrieval_app(state))
    await service.start()
    try:
        config = _config(
            {"interval_seconds": 3600, "run_on_start": True},
            url=service.url + "/search",
        )
        registry = CollectorRegistry()
        sink = ListSink()
        scheduler = GoldenScheduler(
            config.model_copy(update={"report_dir": tmp_path}),
            sink=sink,
            metrics=GoldenMetrics(registry),
        )
        async with scheduler:
            await _wait_for(lambda: len(sink.saved) == 1)
        (result,) = sink.saved
        assert result.outcome == "passed" and result.modes[0].metrics["mrr"] == 1.0
        assert registry.get_sample_value(
            "ragmon_golden_metric_ratio",
            {"suite": "nightly", "mode": "default", "metric": "ndcg_5"},
        ) == pytest.approx(1.0)
        path = report_path(tmp_path, result)
        assert path.exists() and path.with_suffix(".json").exists()
        assert path.parent == tmp_path / "nightly"
    finally:
        with contextlib.suppress(Exception):
            await service.stop()
