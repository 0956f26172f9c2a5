"""Golden-set suites as a service of the daemon: started beside consuming, stopped with it, and
every failure logged with what failed instead of disappearing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from monitor.command import ExitCode
from monitor.config import Settings
from monitor.config.golden import GoldenConfig, SuiteConfig
from monitor.config.judge import JudgeConfig
from monitor.daemon import Daemon, SourceSpec
from monitor.golden.metrics import GoldenMetrics
from monitor.golden.results import RunResult
from monitor.golden.schedule import GoldenScheduler
from monitor.golden.service import golden_service
from monitor.models import Trace
from tests.fixtures.golden.service import RETRIEVAL_SUITE, RunningService, retrieval_app
from tests.fixtures.golden.service import ServiceState as FakeServiceState
from tests.support.traces import RunningDaemon, encode, native_trace, wait_for


def _suite(url: str, schedule: dict[str, Any]) -> dict[str, Any]:
    return {
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
        # quality targets only: the default latency targets (p95 300 ms) would make whether a run
        # passes depend on how loaded the machine is, and these tests are about the service
        "targets": {"mrr": 0.70, "recall_5": 0.80, "ndcg_5": 0.70},
    }


@contextlib.asynccontextmanager
async def search_service() -> AsyncIterator[str]:
    """The fake retrieval service, served by the test's own event loop; yields its URL."""
    service = RunningService(retrieval_app(FakeServiceState()))
    await service.start()
    try:
        yield service.url + "/search"
    finally:
        with contextlib.suppress(Exception):
            await service.stop()


class Feed:
    """A FIFO the daemon replays (`--source file:PATH`): it runs until the writer closes it."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._writer: IO[bytes] | None = None

    async def open(self) -> None:
        # Opening a FIFO for writing waits for its reader (the daemon's file-source thread).
        self._writer = await asyncio.to_thread(open, self.path, "wb", buffering=0)

    def send(self, line: bytes) -> None:
        assert self._writer is not None
        self._writer.write(line + b"\n")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings.model_validate(
        {
            "kafka": {"format": "native"},
            "http": {"host": "127.0.0.1", "port": 0},
            "store": {"url": f"sqlite+aiosqlite:///{tmp_path / 'ragmon.db'}"},
            "shutdown": {"deadline_seconds": 10},
            "golden": {"suites": [_suite(url, {"interval_seconds": 3600, "run_on_start": True})]},
        }
    )


def _runs(daemon: Daemon, outcome: str) -> float:
    value = daemon.metrics.registry.get_sample_value(
        "ragmon_golden_runs_total", {"suite": "nightly", "outcome": outcome}
    )
    return value or 0.0


def _scored(daemon: Daemon) -> float:
    value = daemon.metrics.registry.get_sample_value(
        "ragmon_traces_processed_total", {"agent": "default", "outcome": "ok"}
    )
    return value or 0.0


async def test_the_daemon_runs_golden_suites_beside_consuming(tmp_path: Path) -> None:
    async with search_service() as search_url:
        await _run_daemon_with_golden(tmp_path, search_url)


async def _run_daemon_with_golden(tmp_path: Path, search_url: str) -> None:
    feed = Feed(tmp_path / "traces.fifo")
    daemon = Daemon(_settings(tmp_path, search_url), SourceSpec("file", str(feed.path)))
    running = RunningDaemon(daemon)
    try:
        await feed.open()
        await running.started()
        # Started before the first trace is read, explicitly: not a side effect of scoring.
        assert daemon.golden is not None and daemon.golden.scheduled_suites == ["nightly"]
        feed.send(encode(native_trace(1)))
        await wait_for(lambda: _scored(daemon) == 1, 30, "the trace")
        await wait_for(lambda: _runs(daemon, "passed") == 1, 30, "the golden run")
    finally:
        daemon.request_stop()
        feed.close()
        code = await asyncio.wait_for(running.task, 30)
    assert code == ExitCode.OK
    assert daemon.golden.running_suites == []
    # The run was saved before the store closed: the service stops first.
    with sqlite3.connect(tmp_path / "ragmon.db") as db:
        rows = db.execute("SELECT suite, outcome FROM golden_runs").fetchall()
    assert rows == [("nightly", "passed")]


class CountingProcessor:
    def __init__(self) -> None:
        self.seen: list[Trace] = []

    async def process(self, trace: Trace) -> None:
        self.seen.append(trace)


async def test_the_golden_service_does_not_depend_on_the_scoring_stage(tmp_path: Path) -> None:
    """A daemon given its own processor (no scoring stage, no store) still runs the suites."""
    async with search_service() as search_url:
        await _run_daemon_with_processor(tmp_path, search_url)


async def _run_daemon_with_processor(tmp_path: Path, search_url: str) -> None:
    feed = Feed(tmp_path / "traces.fifo")
    processor = CountingProcessor()
    daemon = Daemon(
        _settings(tmp_path, search_url), SourceSpec("file", str(feed.path)), processor=processor
    )
    running = RunningDaemon(daemon)
    try:
        await feed.open()
        await running.started()
        feed.send(encode(native_trace(2)))
        await wait_for(lambda: len(processor.seen) == 1, 30, "the trace")
        await wait_for(lambda: _runs(daemon, "passed") == 1, 30, "the golden run")
    finally:
        daemon.request_stop()
        feed.close()
        assert await asyncio.wait_for(running.task, 30) == ExitCode.OK
    assert daemon.store is None


async def test_a_service_that_cannot_start_says_why() -> None:
    url = "http://127.0.0.1:9/search"  # never called
    config = GoldenConfig.model_validate({"suites": [_suite(url, {"interval_seconds": 60})]})
    registry = CollectorRegistry()
    GoldenMetrics(registry)  # the metrics exist already: a second registration is refused
    with (
        capture_logs() as logs,
        pytest.raises(ValueError, match="Duplicated timeseries") as raised,
    ):
        async with golden_service(config, JudgeConfig(), registry=registry):
            raise AssertionError("started")
    (line,) = [entry for entry in logs if entry["event"] == "golden service did not start"]
    assert line["log_level"] == "error" and line["suites"] == ["nightly"]
    assert line["error_type"] == type(raised.value).__name__
    assert "Duplicated timeseries" in line["error"] and line["exc_info"] is raised.value


class BrokenMetrics(GoldenMetrics):
    """Metrics whose export fails once (a bug around the run, not in it)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.failures = 1

    def record(self, result: RunResult) -> None:
        if self.failures:
            self.failures -= 1
            raise KeyError("mode")
        super().record(result)


async def test_failures_around_a_run_are_logged_with_their_data_and_the_schedule_goes_on() -> None:
    async with search_service() as search_url:
        await _run_with_failures(search_url)


async def _run_with_failures(search_url: str) -> None:
    calls = 0

    async def runner(suite: SuiteConfig) -> RunResult:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("the runner broke")
        from monitor.golden.runner import run_suite

        return await run_suite(suite, progress=False)

    registry = CollectorRegistry()
    config = GoldenConfig.model_validate(
        {"suites": [_suite(search_url, {"interval_seconds": 0.2, "run_on_start": True})]}
    )
    with capture_logs() as logs:
        async with GoldenScheduler(config, runner=runner, metrics=BrokenMetrics(registry)):
            await wait_for(lambda: calls >= 3, 30, "three runs")
    by_event = {entry["event"]: entry for entry in logs if entry["log_level"] == "error"}
    hidden = by_event["golden run bookkeeping failed"]  # was swallowed before
    assert hidden["suite"] == "nightly" and hidden["error_type"] == "KeyError"
    assert isinstance(hidden["exc_info"], KeyError)
    failed = by_event["golden run failed"]
    assert failed["suite"] == "nightly" and failed["error_type"] == "RuntimeError"
    assert failed["error"] == "the runner broke" and isinstance(failed["exc_info"], RuntimeError)
    sample = registry.get_sample_value
    assert sample("ragmon_golden_runs_total", {"suite": "nightly", "outcome": "error"}) == 1.0
    assert sample("ragmon_golden_runs_total", {"suite": "nightly", "outcome": "passed"}) >= 1.0  # type: ignore[operator]
