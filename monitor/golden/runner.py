"""Runs a golden-set suite against the live service: every mode, then the parameter sweeps.

:func:`run_suite` loads the suite's dataset, sends every query once per mode
through :class:`~monitor.golden.client.ServiceClient` -- at most ``service.concurrency`` at a
time, modes one after the other so they do not slow each other's latencies down -- scores the
replies (:mod:`monitor.golden.evaluation`), compares every mode with the baseline mode (paired
t-test, Cohen's d, bootstrap CI), runs the sweeps and derives recommendations.

Sweeps (a sensitivity analysis) run on ``sweep_mode`` -- by default the best mode on the primary
measure -- one parameter at a time
(``alpha`` over its values with everything else as in the mode) or as a full grid. Each variant
is compared with its base mode. Variants are reported but never gate the run.

Outcome: ``error`` when the dataset cannot be read (raised as ``GoldenDataError`` for the
caller) or when more than ``max_query_failures`` queries of a mode fail (the run stops there:
results so far are kept); ``failed`` when a target of a gated mode is missed or unmeasured;
else ``passed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import structlog
from pydantic import JsonValue

from monitor.config.golden import SuiteConfig
from monitor.golden.answers import AnswerJudge
from monitor.golden.client import ServiceClient, ServiceError, ServiceReply
from monitor.golden.dataset import (
    GenerationCase,
    GenerationSuite,
    RetrievalQuery,
    RetrievalSuite,
    load_suite,
)
from monitor.golden.evaluation import (
    Observation,
    best_mode,
    compare_modes,
    score_generation_case,
    score_retrieval_query,
    summarise_mode,
)
from monitor.golden.progress import Progress
from monitor.golden.recommend import recommend
from monitor.golden.results import Comparison, ModeResult, Outcome, QueryResult, RunResult
from monitor.retry import RetryMetrics

log = structlog.get_logger("monitor.golden")

Item = RetrievalQuery | GenerationCase


@dataclass(frozen=True)
class Variant:
    """One set of request parameters to run the suite with: a mode or a sweep variant."""

    label: str
    params: dict[str, JsonValue]
    description: str | None = None
    variant_of: str | None = None
    sweep: dict[str, JsonValue] | None = None
    gated: bool = True


@dataclass
class _Run:
    suite: SuiteConfig
    items: Sequence[Item]
    client: ServiceClient
    judge: AnswerJudge | None
    progress: bool | None
    errors: list[str] = field(default_factory=list)


def _compact(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sweep_variants(suite: SuiteConfig, base: str) -> list[Variant]:
    """The sweep's variants of mode ``base`` (one parameter at a time, or the grid)."""
    if not suite.sweeps:
        return []
    base_params = suite.mode_params(base)
    settings: list[dict[str, JsonValue]] = []
    if suite.sweep_strategy == "grid":
        names = list(suite.sweeps)
        for combo in itertools.product(*(suite.sweeps[n] for n in names)):
            settings.append(dict(zip(names, combo, strict=True)))
    else:
        for name, values in suite.sweeps.items():
            settings.extend({name: value} for value in values)
    if len(settings) > suite.max_sweep_variants:
        raise ValueError(
            f"the sweep has {len(settings)} variants, more than max_sweep_variants "
            f"({suite.max_sweep_variants})"
        )
    return [
        Variant(
            label=f"{base}[{','.join(f'{k}={_compact(v)}' for k, v in setting.items())}]",
            params={**base_params, **setting},
            variant_of=base,
            sweep=setting,
            gated=False,
        )
        for setting in settings
    ]


def _variables(
    suite: SuiteConfig, item: Item, params: dict[str, JsonValue]
) -> dict[str, JsonValue]:
    contexts: list[JsonValue] | None = None
    if isinstance(item, RetrievalQuery):
        text = item.query
    else:
        text = item.question
        if item.contexts is not None:
            contexts = [context for context in item.contexts]
    shared: dict[str, JsonValue] = dict(params)
    variables: dict[str, JsonValue] = dict(params)
    variables.update(
        {
            "query": text,
            "question": text,
            "query_id": item.id,
            "top_k": suite.effective_top_k,
            "contexts": contexts,
            "language": item.language,
            "params": shared,
        }
    )
    return variables


async def _observe(run: _Run, item: Item, params: dict[str, JsonValue]) -> Observation:
    try:
        reply: ServiceReply = await run.client.call(_variables(run.suite, item, params))
    except ServiceError as exc:
        return Observation(query_id=item.id, error=str(exc), attempts=exc.attempts)
    observation = Observation(
        query_id=item.id,
        doc_ids=reply.doc_ids,
        answer=reply.answer,
        contexts=reply.contexts,
        latency_ms=reply.latency_ms,
        attempts=reply.attempts,
        duplicates_dropped=reply.duplicates_dropped,
    )
    if isinstance(item, GenerationCase) and run.judge is not None and reply.answer:
        contexts = reply.contexts if reply.contexts is not None else tuple(item.contexts or ())
        try:
            scores = await run.judge.judge(item, reply.answer, list(contexts))
        except Exception as exc:  # a judge failure leaves the judge's measures unmeasured
            log.warning(
                "golden judge failed", suite=run.suite.name, query_id=item.id, error=str(exc)
            )
            return dataclasses.replace(observation, judge_error=str(exc))
        return dataclasses.replace(observation, judge=scores)
    return observation


def _score(run: _Run, item: Item, observation: Observation) -> QueryResult:
    if isinstance(item, RetrievalQuery):
        return score_retrieval_query(
            item,
            observation,
            cutoffs=run.suite.cutoffs,
            relevance_threshold=run.suite.relevance_threshold,
            gain=run.suite.gain,
        )
    return score_generation_case(item, observation)


async def run_variant(run: _Run, variant: Variant) -> ModeResult:
    """Every query of the suite with ``variant``'s parameters, scored and summarised."""
    suite = run.suite
    semaphore = asyncio.Semaphore(suite.service.concurrency)
    bar = Progress(f"{suite.name} {variant.label}", len(run.items), enabled=run.progress)

    async def one(item: Item) -> QueryResult:
        async with semaphore:
            observation = await _observe(run, item, variant.params)
        bar.advance()
        return _score(run, item, observation)

    try:
        results = await asyncio.gather(*(one(item) for item in run.items))
    finally:
        bar.close()
    return summarise_mode(
        variant.label,
        results,
        kind=suite.kind,
        params=variant.params,
        targets=suite.targets,
        description=variant.description,
        gated=variant.gated,
        length_metric=suite.effective_length_metric,
        variant_of=variant.variant_of,
        sweep=variant.sweep,
    )


def _too_many_failures(suite: SuiteConfig, mode: ModeResult) -> str | None:
    if mode.n_failed <= suite.max_query_failures:
        return None
    first = next((q for q in mode.queries if q.error is not None), None)
    reason = f"; first: {first.query_id}: {first.error}" if first is not None else ""
    return (
        f"mode {mode.label}: {mode.n_failed} of {mode.n_queries} queries failed "
        f"(max_query_failures {suite.max_query_failures}){reason}"
    )


def _compare(
    suite: SuiteConfig, baseline: ModeResult, others: Sequence[ModeResult]
) -> list[Comparison]:
    out: list[Comparison] = []
    for mode in others:
        if mode.label == baseline.label:
            continue
        out += compare_modes(
            baseline,
            mode,
            suite.effective_compare_metrics,
            alpha=suite.alpha,
            min_effect=suite.min_effect,
            n_resamples=suite.bootstrap_resamples,
            confidence=suite.confidence,
            seed=suite.bootstrap_seed,
        )
    return out


def _conventions(suite: SuiteConfig) -> dict[str, JsonValue]:
    return {
        "gain": suite.gain,
        "relevance_threshold": suite.relevance_threshold,
        "cutoffs": list(suite.cutoffs),
        "top_k": suite.effective_top_k,
        "alpha": suite.alpha,
        "min_effect": suite.min_effect,
        "bootstrap_resamples": suite.bootstrap_resamples,
        "confidence": suite.confidence,
        "worst_queries": suite.worst_queries,
        "failed_queries": "scored 0, excluded from latency",
        "latency": "perf_counter around the successful attempt, ms",
    }


def _outcome(modes: Sequence[ModeResult], error: str | None) -> Outcome:
    if error is not None:
        return "error"
    if not modes:
        return "error"
    for mode in modes:
        if mode.gated and any(check.passed is not True for check in mode.targets):
            return "failed"
    return "passed"


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def run_suite(
    suite: SuiteConfig,
    *,
    judge: AnswerJudge | None = None,
    base_dir: Path | None = None,
    progress: bool | None = None,
    session: aiohttp.ClientSession | None = None,
    clock: Callable[[], datetime] = _utcnow,
    retry_metrics: RetryMetrics | None = None,
) -> RunResult:
    """Run ``suite`` (see the module docstring). ``GoldenDataError`` when the dataset is bad.

    ``base_dir`` resolves a relative dataset path (the config file's directory). ``progress``
    draws progress bars (``None``: when stderr is a terminal). ``session`` is an aiohttp session
    to use (one is created and closed otherwise). ``retry_metrics`` counts the service
    client's retries (the daemon's registry).
    """
    started = clock()
    t0 = time.perf_counter()
    dataset_path = suite.resolved_dataset(base_dir)
    data = load_suite(dataset_path, suite.kind)
    items: Sequence[Item] = (
        data.queries if isinstance(data, RetrievalSuite | GenerationSuite) else []
    )
    own_session = session is None
    if session is None:
        connector = aiohttp.TCPConnector(limit=suite.service.concurrency)
        session = aiohttp.ClientSession(connector=connector)
    try:
        client = ServiceClient(suite.service, session, kind=suite.kind, retry_metrics=retry_metrics)
        run = _Run(suite=suite, items=items, client=client, judge=judge, progress=progress)
        modes, sweeps, error = await _run_all(run)
    finally:
        if own_session:
            await session.close()

    comparisons: list[Comparison] = []
    sweep_comparisons: list[Comparison] = []
    baseline = next((m for m in modes if m.label == suite.effective_baseline), None)
    if baseline is not None:
        comparisons = _compare(suite, baseline, modes)
    if sweeps:
        base = next(m for m in modes if m.label == sweeps[0].variant_of)
        sweep_comparisons = _compare(suite, base, sweeps)
    recommendations = recommend(
        modes,
        primary_metric=suite.effective_primary_metric,
        targets=suite.targets,
        sweeps=sweeps,
        sweep_comparisons=sweep_comparisons,
        alpha=suite.alpha,
    )
    finished = clock()
    result = RunResult(
        suite=suite.name,
        kind=suite.kind,
        dataset=str(dataset_path),
        dataset_version=data.dataset.version,
        n_queries=len(items),
        started_at=started,
        finished_at=finished,
        duration_seconds=time.perf_counter() - t0,
        outcome=_outcome(modes, error),
        error=error,
        conventions=_conventions(suite),
        targets=dict(suite.targets),
        primary_metric=suite.effective_primary_metric,
        baseline_mode=suite.effective_baseline,
        judge=judge is not None,
        modes=modes,
        sweeps=sweeps,
        comparisons=comparisons,
        sweep_comparisons=sweep_comparisons,
        recommendations=recommendations,
    )
    log.info(
        "golden run finished",
        suite=suite.name,
        outcome=result.outcome,
        duration_seconds=round(result.duration_seconds, 3),
        error=error,
    )
    return result


async def _run_all(run: _Run) -> tuple[list[ModeResult], list[ModeResult], str | None]:
    suite = run.suite
    gate = set(suite.effective_gate_modes)
    modes: list[ModeResult] = []
    for label, mode in suite.modes.items():
        variant = Variant(
            label=label,
            params=suite.mode_params(label),
            description=mode.description,
            gated=label in gate,
        )
        result = await run_variant(run, variant)
        modes.append(result)
        problem = _too_many_failures(suite, result)
        if problem is not None:
            return modes, [], problem
    sweeps: list[ModeResult] = []
    if suite.sweeps:
        if suite.sweep_mode == "best":
            chosen = best_mode(modes, suite.effective_primary_metric)
            base = chosen.label if chosen is not None else modes[0].label
        else:
            base = suite.sweep_mode
        try:
            variants = sweep_variants(suite, base)
        except ValueError as exc:
            return modes, [], str(exc)
        for variant in variants:
            result = await run_variant(run, variant)
            sweeps.append(result)
            problem = _too_many_failures(suite, result)
            if problem is not None:
                return modes, sweeps, problem
    return modes, sweeps, None


def error_result(
    suite: SuiteConfig,
    error: str,
    *,
    started: datetime,
    finished: datetime,
    duration_seconds: float,
    base_dir: Path | None = None,
) -> RunResult:
    """The result of a run that could not start or crashed (``outcome="error"``)."""
    return RunResult(
        suite=suite.name,
        kind=suite.kind,
        dataset=str(suite.resolved_dataset(base_dir)),
        started_at=started,
        finished_at=finished,
        duration_seconds=duration_seconds,
        outcome="error",
        error=error,
        conventions=_conventions(suite),
        targets=dict(suite.targets),
        primary_metric=suite.effective_primary_metric,
        baseline_mode=suite.effective_baseline,
    )


__all__ = ["Variant", "error_result", "run_suite", "run_variant", "sweep_variants"]
