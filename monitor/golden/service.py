"""Scheduled golden-set runs as a service of the daemon, beside consuming traces.

The daemon enters :func:`golden_service` on its ``AsyncExitStack`` after the scoring stage (whose
store the runs are saved to and whose judge metrics and token budget the answer judge shares)
and before it starts consuming, so the service starts before the first trace is read and stops
first at shutdown, while the store is still open. Like an APScheduler 4 or arq worker, it is
started and stopped explicitly, never as a side effect of building something else::

    async with AsyncExitStack() as stack:
        stage = await build_scoring_stage(...)
        scheduler = await stack.enter_async_context(golden_service(settings.golden, ...))
        ...  # consume until stopped

A failure to start or stop is logged with the suites and the error (type, message, traceback)
and raised; a failing run is logged and exported by the scheduler and does not stop it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

from monitor.config.golden import GoldenConfig
from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.token_budget import TokenBudget
from monitor.golden.judges import open_answer_judge
from monitor.golden.metrics import GoldenMetrics
from monitor.golden.schedule import GoldenRunSink, GoldenScheduler

log = structlog.get_logger("monitor.golden.service")


@asynccontextmanager
async def golden_service(
    config: GoldenConfig,
    judge_config: JudgeConfig,
    *,
    registry: CollectorRegistry,
    sink: GoldenRunSink | None = None,
    judge_metrics: JudgeMetrics | None = None,
    token_budget: TokenBudget | None = None,
    base_dir: Path | None = None,
) -> AsyncIterator[GoldenScheduler]:
    """The started scheduler of ``config``'s suites; stopped (runs finished or cancelled) and
    its answer judge closed on exit.

    Generation answers are scored by the judge ``judge_config`` describes when it is active and
    ``config.judge_answers`` is on. ``registry`` receives the ``ragmon_golden_*`` metrics,
    ``sink`` every finished run; ``base_dir`` resolves relative dataset and report paths.
    """
    suites = [suite.name for suite in config.suites]
    stack = AsyncExitStack()
    try:
        judge = None
        if config.judge_answers:
            judge = await stack.enter_async_context(
                open_answer_judge(judge_config, judge_metrics, token_budget)
            )
        scheduler = GoldenScheduler(
            config, metrics=GoldenMetrics(registry), sink=sink, judge=judge, base_dir=base_dir
        )
        await stack.enter_async_context(scheduler)
    except BaseException as exc:
        if isinstance(exc, Exception):
            _log_failure("golden service did not start", suites, exc)
        await stack.aclose()  # what did start (the answer judge) is closed again
        raise
    try:
        yield scheduler
    finally:
        try:
            await stack.aclose()
        except Exception as exc:
            _log_failure("golden service did not stop cleanly", suites, exc)
            raise


def _log_failure(event: str, suites: list[str], exc: Exception) -> None:
    log.error(event, suites=suites, error_type=type(exc).__name__, error=str(exc), exc_info=exc)
