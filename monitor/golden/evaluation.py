"""From what the service returned to per-query, per-mode and between-mode results.

Pure functions, no I/O. The runner collects one :class:`Observation` per query and mode; this
module scores them (per-query measures via :mod:`monitor.golden.ranking` with the suite's
gain and relevance threshold -- by default exponential gain, grade >= 2 relevant), averages them
per mode and per category/language/difficulty, checks targets, and compares modes
(:mod:`monitor.golden.stats`).

Failed requests are not hidden: a query whose request failed counts as an empty ranking (every
retrieval measure 0, not answered for coverage) or an empty answer, as ``missing_queries="zero"``
does for TREC runs; it is left out of the latency percentiles, which describe the requests
that succeeded.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from monitor.config.golden.measures import (
    GENERATION_MEASURES,
    from_trec_name,
    lower_is_better,
)
from monitor.golden import ranking, stats
from monitor.golden.answers import (
    JUDGE_METRICS,
    REFERENCE_METRICS,
    JudgeScores,
    admits_not_knowing,
    answer_language,
    expected_language,
    forbidden_terms_found,
    topics_covered,
)
from monitor.golden.dataset import GenerationCase, RetrievalQuery, group_label
from monitor.golden.results import (
    Comparison,
    GroupResult,
    LatencySummary,
    LengthCorrelation,
    ModeResult,
    QueryResult,
    TargetCheck,
    Verdict,
)

GROUPINGS = ("category", "language", "difficulty")


@dataclass(frozen=True)
class Observation:
    """What the service did for one query in one mode."""

    query_id: str
    doc_ids: tuple[str, ...] = ()
    answer: str | None = None
    contexts: tuple[str, ...] | None = None
    latency_ms: float | None = None
    attempts: int = 1
    error: str | None = None
    duplicates_dropped: int = 0
    judge: JudgeScores | None = None
    judge_error: str | None = None


# --------------------------------------------------------------------------- per query


def score_retrieval_query(
    query: RetrievalQuery,
    observation: Observation,
    *,
    cutoffs: Sequence[int],
    relevance_threshold: int = ranking.DEFAULT_RELEVANCE_THRESHOLD,
    gain: ranking.Gain = "exponential",
) -> QueryResult:
    """Every retrieval measure of one query (our names, see :mod:`measures`)."""
    ranked = list(observation.doc_ids) if observation.error is None else []
    trec = ranking.evaluate_query(
        ranked,
        query.judgments,
        cutoffs=cutoffs,
        relevance_threshold=relevance_threshold,
        gain=gain,
    )
    metrics: dict[str, float | None] = {from_trec_name(name): value for name, value in trec.items()}
    return QueryResult(
        query_id=query.id,
        text=query.query,
        category=query.category,
        language=query.language,
        difficulty=query.difficulty,
        metrics=metrics,
        latency_ms=observation.latency_ms if observation.error is None else None,
        attempts=observation.attempts,
        error=observation.error,
        expected=query.judgments,
        returned=ranked,
        duplicates_dropped=observation.duplicates_dropped,
    )


def score_generation_case(case: GenerationCase, observation: Observation) -> QueryResult:
    """The answer checks of one generation case; measures that do not apply are ``None``."""
    failed = observation.error is not None
    answer = "" if failed or observation.answer is None else observation.answer
    metrics: dict[str, float | None] = dict.fromkeys(GENERATION_MEASURES)
    unmeasured: dict[str, str] = {}

    forbidden = forbidden_terms_found(answer, case.must_not_contain)
    if case.must_not_contain:
        if failed:
            unmeasured["must_not_contain_rate"] = "request_failed"
        else:
            metrics["must_not_contain_rate"] = 1.0 if forbidden else 0.0
    else:
        unmeasured["must_not_contain_rate"] = "no_terms"

    missing: list[str] = []
    if case.expected_topics:
        covered, missing = topics_covered(answer, case.expected_topics)
        metrics["topic_coverage"] = len(covered) / len(case.expected_topics)
    else:
        unmeasured["topic_coverage"] = "no_topics"

    admits = admits_not_knowing(answer) if answer else False
    if case.no_context:
        metrics["no_context_pass_rate"] = 1.0 if admits else 0.0
        unmeasured["false_refusal_rate"] = "no_context_case"
    else:
        unmeasured["no_context_pass_rate"] = "not_a_no_context_case"
        if failed:
            unmeasured["false_refusal_rate"] = "request_failed"
        else:
            metrics["false_refusal_rate"] = 1.0 if admits else 0.0

    wanted = expected_language(case.language)
    got = answer_language(answer) if answer else None
    if wanted is None:
        unmeasured["language_pass_rate"] = "no_checkable_language"
    else:
        metrics["language_pass_rate"] = 1.0 if got == wanted else 0.0

    judge_reason: str | None = None
    for name in JUDGE_METRICS:
        value: float | None = None
        if observation.judge is not None:
            value = getattr(observation.judge, name)
            judge_reason = observation.judge.reason
        if value is not None and math.isfinite(value):
            metrics[name] = min(1.0, max(0.0, float(value)))
        elif observation.judge is not None and name in observation.judge.unmeasured:
            unmeasured[name] = observation.judge.unmeasured[name]
        else:
            unmeasured[name] = _judge_gap(name, case, observation, failed, answer)

    return QueryResult(
        query_id=case.id,
        text=case.question,
        category=case.category,
        language=case.language,
        difficulty=case.difficulty,
        metrics=metrics,
        latency_ms=observation.latency_ms if not failed else None,
        attempts=observation.attempts,
        error=observation.error,
        answer=None if failed else answer,
        forbidden_found=forbidden,
        topics_missing=missing,
        admits_not_knowing=None if failed else admits,
        answer_language=got,
        expected_language=wanted,
        no_context=case.no_context,
        judge_reason=judge_reason,
        judge_input_tokens=observation.judge.input_tokens if observation.judge else None,
        judge_output_tokens=observation.judge.output_tokens if observation.judge else None,
        unmeasured=unmeasured,
    )


def _judge_gap(
    name: str, case: GenerationCase, observation: Observation, failed: bool, answer: str
) -> str:
    if failed:
        return "request_failed"
    if observation.judge_error is not None:
        return "judge_error"
    if case.reference is None and name in REFERENCE_METRICS:
        return "no_reference"
    if not answer:
        return "empty_answer"
    if observation.judge is None:
        return "no_judge"
    return "not_reported"


# --------------------------------------------------------------------------- per mode


def _mean(values: Sequence[float | None]) -> tuple[float | None, int]:
    present = [v for v in values if v is not None]
    if not present:
        return None, 0
    return math.fsum(present) / len(present), len(present)


def mean_metrics(
    queries: Sequence[QueryResult],
) -> tuple[dict[str, float | None], dict[str, int]]:
    """Mean of each measure over the queries where it is not ``None``, and those counts."""
    names: list[str] = []
    for query in queries:
        names += [name for name in query.metrics if name not in names]
    means: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for name in names:
        means[name], counts[name] = _mean([q.metrics.get(name) for q in queries])
    return means, counts


def query_length(text: str) -> int:
    """Characters after NFKC and trimming (question length is measured in characters)."""
    return len(unicodedata.normalize("NFKC", text).strip())


def length_correlation(queries: Sequence[QueryResult], metric: str) -> LengthCorrelation:
    pairs = [
        (float(query_length(q.text)), value)
        for q in queries
        if (value := q.metrics.get(metric)) is not None
    ]
    result = stats.pearson_correlation([x for x, _ in pairs], [y for _, y in pairs])
    return LengthCorrelation(
        metric=metric, n=result.n, r=result.r, p_value=result.p_value, reason=result.reason
    )


def latency_summary(queries: Sequence[QueryResult]) -> LatencySummary:
    latencies = [q.latency_ms for q in queries if q.latency_ms is not None]
    result = ranking.latency_percentiles(latencies)
    mean = math.fsum(latencies) / len(latencies) if latencies else None
    return LatencySummary(
        n=result.n, p50_ms=result.p50, p95_ms=result.p95, p99_ms=result.p99, mean_ms=mean
    )


def group_results(queries: Sequence[QueryResult]) -> dict[str, dict[str, GroupResult]]:
    """Means per category, language and difficulty (only groupings some query is labelled in)."""
    out: dict[str, dict[str, GroupResult]] = {}
    for grouping in GROUPINGS:
        if not any(getattr(q, grouping) for q in queries):
            continue
        members: dict[str, list[QueryResult]] = {}
        for query in queries:
            members.setdefault(group_label(getattr(query, grouping)), []).append(query)
        out[grouping] = {}
        for label, rows in members.items():
            means, _ = mean_metrics(rows)
            out[grouping][label] = GroupResult(n=len(rows), metrics=means)
    return out


def check_targets(
    metrics: Mapping[str, float | None], targets: Mapping[str, float]
) -> list[TargetCheck]:
    """One check per target; an unmeasured measure gives ``passed=None``."""
    checks: list[TargetCheck] = []
    for name, target in targets.items():
        value = metrics.get(name)
        direction: Literal["min", "max"] = "max" if lower_is_better(name) else "min"
        passed: bool | None
        if value is None:
            passed = None
        elif direction == "max":
            passed = value <= target
        else:
            passed = value >= target
        checks.append(
            TargetCheck(metric=name, target=target, direction=direction, value=value, passed=passed)
        )
    return checks


def summarise_mode(
    label: str,
    queries: Sequence[QueryResult],
    *,
    kind: str,
    params: Mapping[str, JsonValue],
    targets: Mapping[str, float],
    description: str | None = None,
    gated: bool = True,
    length_metric: str | None = None,
    variant_of: str | None = None,
    sweep: Mapping[str, JsonValue] | None = None,
) -> ModeResult:
    """Means, coverage, latency, groups, length correlation and target checks of one mode."""
    means, counts = mean_metrics(queries)
    if kind == "retrieval":
        run = {q.query_id: q.returned for q in queries}
        coverage = ranking.result_coverage(run, [q.query_id for q in queries]) if queries else None
    else:
        answered = [1.0 if q.answer else 0.0 for q in queries]
        coverage = math.fsum(answered) / len(answered) if answered else None
    latency = latency_summary(queries)
    metrics = dict(means)
    metrics["coverage"] = coverage
    metrics["latency_p50_ms"] = latency.p50_ms
    metrics["latency_p95_ms"] = latency.p95_ms
    metrics["latency_p99_ms"] = latency.p99_ms
    counts["coverage"] = len(queries)
    for name in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms"):
        counts[name] = latency.n
    checks = check_targets(metrics, targets)
    return ModeResult(
        label=label,
        description=description,
        params=dict(params),
        variant_of=variant_of,
        sweep=dict(sweep) if sweep is not None else None,
        n_queries=len(queries),
        n_failed=sum(1 for q in queries if q.error is not None),
        metrics=metrics,
        measured=counts,
        latency=latency,
        groups=group_results(queries),
        length_correlation=length_correlation(queries, length_metric) if length_metric else None,
        targets=checks,
        gated=gated,
        passed=all(check.passed is True for check in checks),
        queries=list(queries),
    )


# --------------------------------------------------------------------------- between modes


def _verdict(metric: str, significant: bool | None, d: float | None, min_effect: float) -> Verdict:
    if significant is None or d is None:
        return "undefined"
    if not significant:
        return "no significant difference"
    oriented = -d if lower_is_better(metric) else d
    if abs(oriented) < min_effect:
        return "small effect"
    return "better" if oriented > 0 else "worse"


def compare_modes(
    baseline: ModeResult,
    candidate: ModeResult,
    metrics: Sequence[str],
    *,
    alpha: float = stats.DEFAULT_ALPHA,
    min_effect: float = stats.DEFAULT_MIN_EFFECT,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[Comparison]:
    """Paired t-test, Cohen's d and bootstrap CI of ``candidate - baseline`` per measure.

    Queries are paired by id; a query enters a measure's comparison when both modes measured it.
    The verdict (docs/metrics.md#comparisons): ``better``/``worse`` when p < alpha and
    |d| >= min_effect (direction-aware: lower latency or violation rate is better),
    ``small effect`` when significant with a smaller d, otherwise ``no significant
    difference`` (also when the two modes score the same on every query), or ``undefined``
    when the test is: fewer than two pairs, or every query differing by the same non-zero
    amount.
    """
    base_by_id = {q.query_id: q for q in baseline.queries}
    comparisons: list[Comparison] = []
    for metric in metrics:
        base_values: list[float] = []
        cand_values: list[float] = []
        for query in candidate.queries:
            other = base_by_id.get(query.query_id)
            if other is None:
                continue
            b = other.metrics.get(metric)
            c = query.metrics.get(metric)
            if b is not None and c is not None:
                base_values.append(b)
                cand_values.append(c)
        paired = stats.compare_paired(base_values, cand_values, alpha=alpha, min_effect=min_effect)
        ci = stats.paired_bootstrap_ci(
            base_values, cand_values, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
        n = len(base_values)
        verdict = _verdict(metric, paired.t_test.significant, paired.effect.d, min_effect)
        reason = paired.reason
        if n >= 2 and base_values == cand_values:
            verdict, reason = "no significant difference", "identical on every query"
        comparisons.append(
            Comparison(
                metric=metric,
                baseline=baseline.label,
                candidate=candidate.label,
                n=n,
                baseline_mean=math.fsum(base_values) / n if n else None,
                candidate_mean=math.fsum(cand_values) / n if n else None,
                mean_diff=paired.t_test.mean_diff,
                t_statistic=paired.t_test.t_statistic,
                p_value=paired.t_test.p_value,
                df=paired.t_test.df,
                cohens_d=paired.effect.d,
                ci_lower=ci.lower,
                ci_upper=ci.upper,
                confidence=confidence,
                alpha=alpha,
                significant=paired.t_test.significant,
                verdict=verdict,
                reason=reason,
            )
        )
    return comparisons


def best_mode(modes: Sequence[ModeResult], metric: str) -> ModeResult | None:
    """The mode with the highest (lowest, for lower-is-better) mean ``metric``; first on ties."""
    scored = [m for m in modes if m.metrics.get(metric) is not None]
    if not scored:
        return None
    sign = -1.0 if lower_is_better(metric) else 1.0
    best = scored[0]
    for mode in scored[1:]:
        if sign * (mode.metrics[metric] or 0.0) > sign * (best.metrics[metric] or 0.0):
            best = mode
    return best


__all__ = [
    "GROUPINGS",
    "Observation",
    "best_mode",
    "check_targets",
    "compare_modes",
    "group_results",
    "latency_summary",
    "length_correlation",
    "mean_metrics",
    "query_length",
    "score_generation_case",
    "score_retrieval_query",
    "summarise_mode",
]
