"""Runs golden-set suites on their schedules inside the daemon (APScheduler 3, asyncio).

An async context manager (``start()`` on entry, ``stop()`` on exit); the daemon runs it through
:func:`monitor.golden.service.golden_service`, which also opens the answer judge::

    async with GoldenScheduler(settings.golden, metrics=GoldenMetrics(registry), sink=store,
                               judge=judge, base_dir=config_dir) as scheduler:
        ...

Policy:

- **Never two runs of one suite at once.** Each suite is one APScheduler job with
  ``max_instances=1``; a run time that comes while the previous run is still going is skipped
  (APScheduler logs "maximum number of running instances reached"), and :meth:`run_once`
  refuses too. Different suites may run at the same time.
- **Missed runs.** ``coalesce=True``: run times missed while the event loop was busy are run
  once, not once each. A run that would start more than ``misfire_grace_seconds`` late
  (default 300; ``null`` = however late) is skipped and the suite waits for its next time.
  Run times that passed while the daemon was down are not caught up (jobs live in memory);
  ``run_on_start: true`` runs the suite once at start-up instead.
- **Stopping.** :meth:`stop` stops scheduling at once, gives runs in progress up to
  ``stop_timeout_seconds`` to finish (their results are still exported and saved), then
  cancels the rest and waits for them to unwind. A cancelled run counts as an ``error`` run.

Every finished run is exported (:class:`~monitor.golden.metrics.GoldenMetrics`), written as a
report (``<report_dir>/<suite>/<UTC start time>.md`` and ``.json``) when a report directory is
configured, and handed to the :class:`GoldenRunSink` (the results store). A failing sink or
report write is logged (suite, error type and message, traceback) and does not stop the
schedule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import structlog
from apscheduler.schedulers.asyncio import (  # type: ignore[import-untyped]
    AsyncIOScheduler,
)
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped]

from monitor.config.golden import GoldenConfig, ScheduleConfig, SuiteConfig
from monitor.golden.answers import AnswerJudge
from monitor.golden.metrics import GoldenMetrics
from monitor.golden.report import write_report
from monitor.golden.results import RunResult
from monitor.golden.runner import error_result, run_suite
from monitor.retry import RetryMetrics

log = structlog.get_logger("monitor.golden.schedule")

SuiteRunner = Callable[[SuiteConfig], Awaitable[RunResult]]


@runtime_checkable
class GoldenRunSink(Protocol):
    """Where finished runs go (the results store). ``save`` may raise; it is logged."""

    async def save(self, run_result: RunResult) -> None: ...


def make_trigger(schedule: ScheduleConfig) -> Any:
    """The APScheduler trigger of a schedule (cron or interval)."""
    if schedule.cron is not None:
        return CronTrigger.from_crontab(schedule.cron, timezone=schedule.timezone)
    return IntervalTrigger(seconds=schedule.interval_seconds, timezone=schedule.timezone)


def report_path(report_dir: Path, result: RunResult) -> Path:
    """``<report_dir>/<suite>/<YYYYmmddTHHMMSS.mmmZ>.md`` for a run started at that UTC time."""
    started = result.started_at.astimezone(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%S") + f".{started.microsecond // 1000:03d}Z"
    return report_dir / result.suite / f"{stamp}.md"


class GoldenScheduler:
    """Schedules the configured suites (see the module docstring)."""

    def __init__(
        self,
        config: GoldenConfig,
        *,
        metrics: GoldenMetrics | None = None,
        sink: GoldenRunSink | None = None,
        judge: AnswerJudge | None = None,
        base_dir: Path | None = None,
        runner: SuiteRunner | None = None,
        stop_timeout_seconds: float = 30.0,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._sink = sink
        self._base_dir = base_dir
        self._stop_timeout = stop_timeout_seconds
        if runner is None:
            retries = RetryMetrics.of(metrics.registry) if metrics is not None else None

            async def default_runner(suite: SuiteConfig) -> RunResult:
                return await run_suite(
                    suite, judge=judge, base_dir=base_dir, progress=False, retry_metrics=retries
                )

            runner = default_runner
        self._runner = runner
        self._scheduler: Any = None
        self._running: dict[str, asyncio.Task[RunResult]] = {}
        self._stopping = False

    # ---------------------------------------------------------------- lifecycle

    @property
    def scheduled_suites(self) -> list[str]:
        return [s.name for s in self._config.suites if s.schedule is not None]

    @property
    def running_suites(self) -> list[str]:
        return [name for name, task in self._running.items() if not task.done()]

    async def start(self) -> None:
        """Publish every suite's targets and schedule the suites that have a schedule."""
        if self._scheduler is not None:
            raise RuntimeError("the golden scheduler is already started")
        self._stopping = False
        if self._metrics is not None:
            for suite in self._config.suites:
                self._metrics.init_suite(suite.name, suite.targets)
        scheduler = AsyncIOScheduler(timezone=UTC)
        for suite in self._config.suites:
            schedule = suite.schedule
            if schedule is None:
                continue
            extra: dict[str, Any] = {}
            if schedule.run_on_start:
                extra["next_run_time"] = datetime.now(UTC)
            scheduler.add_job(
                self._fire,
                make_trigger(schedule),
                args=[suite.name],
                id=suite.name,
                name=f"golden suite {suite.name}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=schedule.misfire_grace_seconds,
                replace_existing=True,
                **extra,
            )
        scheduler.start()
        self._scheduler = scheduler
        log.info("golden scheduler started", suites=self.scheduled_suites)

    async def stop(self) -> None:
        """Stop scheduling, let runs finish for ``stop_timeout_seconds``, cancel the rest."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        self._stopping = True
        if scheduler.running:
            scheduler.shutdown(wait=False)
        tasks = [task for task in self._running.values() if not task.done()]
        if tasks:
            log.info("golden scheduler waiting for runs", suites=self.running_suites)
            _, pending = await asyncio.wait(tasks, timeout=self._stop_timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning(
                    "golden runs cancelled at shutdown",
                    suites=[t.get_name() for t in pending],
                )
                await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.sleep(0)  # lets the scheduler's own shutdown callback run
        log.info("golden scheduler stopped")

    async def __aenter__(self) -> GoldenScheduler:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ---------------------------------------------------------------- runs

    async def run_once(self, name: str) -> RunResult | None:
        """Run suite ``name`` now; ``None`` when a run of it is already going."""
        suite = self._config.suite(name)
        task = self._launch(suite)
        if task is None:
            return None
        return await asyncio.shield(task)

    def _launch(self, suite: SuiteConfig) -> asyncio.Task[RunResult] | None:
        current = self._running.get(suite.name)
        if current is not None and not current.done():
            log.warning("golden run skipped: the previous run is still going", suite=suite.name)
            return None
        task = asyncio.create_task(self._execute(suite), name=suite.name)
        self._running[suite.name] = task
        return task

    async def _fire(self, name: str) -> None:
        """The APScheduler job: one run of suite ``name``."""
        if self._stopping:
            return
        suite = self._config.suite(name)
        task = self._launch(suite)
        if task is None:
            return
        try:
            # shielded: shutting the scheduler down cancels this job, not the run; stop()
            # decides about the run
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
        except Exception as exc:
            # A failing run is an error result, never an exception: this is a bug in the
            # bookkeeping around it (metrics, report, sink). Say so; the schedule goes on.
            _log_failure("golden run bookkeeping failed", suite.name, exc)

    async def _execute(self, suite: SuiteConfig) -> RunResult:
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        try:
            result = await self._runner(suite)
        except asyncio.CancelledError:
            self._publish_metrics(
                self._error(suite, "cancelled at shutdown", started, time.perf_counter() - t0)
            )
            raise
        except Exception as exc:
            _log_failure("golden run failed", suite.name, exc)
            message = f"{type(exc).__name__}: {exc}"
            result = self._error(suite, message, started, time.perf_counter() - t0)
        self._publish_metrics(result)
        await self._write_report(suite, result)
        await self._save(result)
        return result

    def _error(
        self, suite: SuiteConfig, message: str, started: datetime, duration: float
    ) -> RunResult:
        return error_result(
            suite,
            message,
            started=started,
            finished=datetime.now(UTC),
            duration_seconds=duration,
            base_dir=self._base_dir,
        )

    def _publish_metrics(self, result: RunResult) -> None:
        if self._metrics is not None:
            self._metrics.record(result)

    async def _write_report(self, suite: SuiteConfig, result: RunResult) -> None:
        directory = suite.report_dir or self._config.report_dir
        if directory is None:
            return
        if not directory.is_absolute() and self._base_dir is not None:
            directory = self._base_dir / directory
        try:
            await asyncio.to_thread(write_report, result, report_path(directory, result))
        except OSError as exc:
            _log_failure("golden report not written", suite.name, exc)

    async def _save(self, result: RunResult) -> None:
        if self._sink is None:
            return
        try:
            await self._sink.save(result)
        except Exception as exc:
            _log_failure("golden run not saved", result.suite, exc)


def _log_failure(event: str, suite: str, exc: BaseException) -> None:
    """An error line with what failed: the suite, the error's type and message, the traceback."""
    log.error(event, suite=suite, error_type=type(exc).__name__, error=str(exc), exc_info=exc)


__all__ = ["GoldenRunSink", "GoldenScheduler", "SuiteRunner", "make_trigger", "report_path"]
