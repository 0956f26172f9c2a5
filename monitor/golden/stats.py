"""Statistics for comparing retrieval systems and annotators.

Pure functions, no I/O. Every result is a small frozen dataclass. Inputs that make a statistic
undefined (too few pairs, zero variance, an annotator who always gives the same label, ...) do
not produce NaN: the affected fields are ``None`` and ``reason`` says why. Inputs that are
simply wrong (sequences of different lengths, non-finite values) raise ``ValueError``.

Paired comparisons take per-query scores of a ``baseline`` and a ``candidate`` system on the
same queries in the same order; the difference is always ``candidate - baseline``, so a positive
mean difference means the candidate scored higher.

Modes are compared by a paired t-test at alpha = 0.05, an improvement being meaningful when
Cohen's d >= 0.3 (docs/metrics.md#comparisons). For paired samples the d is
``d_z = mean(diff) / sd(diff)`` with the sample standard deviation (``ddof=1``) -- the effect
size that belongs with the paired t-test (``t = d_z * sqrt(n)``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats  # type: ignore[import-untyped]

DEFAULT_ALPHA: Final = 0.05
DEFAULT_MIN_EFFECT: Final = 0.3

_RELATIVE_ZERO: Final = 1e-12
_BOOTSTRAP_CHUNK: Final = 1_000_000  # max query indices drawn at once (memory bound)


def _pairs(baseline: Sequence[float], candidate: Sequence[float]) -> npt.NDArray[np.float64]:
    """``candidate - baseline`` as float64, after checking lengths and finiteness."""
    if len(baseline) != len(candidate):
        raise ValueError(
            f"paired samples differ in length: {len(baseline)} baseline vs "
            f"{len(candidate)} candidate"
        )
    a = np.asarray(list(baseline), dtype=np.float64)
    b = np.asarray(list(candidate), dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("paired samples must be finite numbers")
    return b - a


def _constant(values: npt.NDArray[np.float64]) -> bool:
    """True when all values are equal up to rounding (relative 1e-12 of their magnitude)."""
    if values.size == 0:
        return True
    spread = float(np.max(values) - np.min(values))
    scale = max(1.0, float(np.max(np.abs(values))))
    return spread <= _RELATIVE_ZERO * scale


# --------------------------------------------------------------------------- t-test


@dataclass(frozen=True)
class PairedTTest:
    """Two-sided paired t-test of ``candidate - baseline`` (``scipy.stats.ttest_rel``)."""

    n: int
    mean_diff: float | None
    t_statistic: float | None
    p_value: float | None
    df: int | None
    alpha: float
    significant: bool | None
    reason: str | None = None


def paired_t_test(
    baseline: Sequence[float], candidate: Sequence[float], *, alpha: float = DEFAULT_ALPHA
) -> PairedTTest:
    """Paired t-test: ``t = mean(d) / (sd(d, ddof=1) / sqrt(n))``, ``df = n - 1``, two-sided.

    ``significant`` is ``p_value < alpha``. Fewer than two pairs, or differences that are all
    equal (zero variance: t is 0/0 or infinite), give ``None`` fields with a reason; the mean
    difference is still reported when there is at least one pair.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    diffs = _pairs(baseline, candidate)
    n = int(diffs.size)
    mean_diff = float(np.mean(diffs)) if n else None
    if n < 2:
        return PairedTTest(n, mean_diff, None, None, None, alpha, None, "need at least 2 pairs")
    if _constant(diffs):
        return PairedTTest(
            n, mean_diff, None, None, n - 1, alpha, None, "differences have zero variance"
        )
    result = _scipy_stats.ttest_rel(
        np.asarray(candidate, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    )
    t_stat = float(result.statistic)
    p_value = float(result.pvalue)
    return PairedTTest(
        n=n,
        mean_diff=mean_diff,
        t_statistic=t_stat,
        p_value=p_value,
        df=n - 1,
        alpha=alpha,
        significant=p_value < alpha,
    )


# --------------------------------------------------------------------------- Cohen's d


@dataclass(frozen=True)
class CohensD:
    """Cohen's d for paired samples, ``d_z = mean(diff) / sd(diff, ddof=1)``."""

    n: int
    d: float | None
    mean_diff: float | None
    sd_diff: float | None
    threshold: float
    meets_threshold: bool | None
    reason: str | None = None


def cohens_d_paired(
    baseline: Sequence[float], candidate: Sequence[float], *, threshold: float = DEFAULT_MIN_EFFECT
) -> CohensD:
    """Paired Cohen's d (d_z) of ``candidate - baseline``.

    ``meets_threshold`` is ``d >= threshold`` -- directional, as in "d >= 0.3 is a
    meaningful improvement"; for measures where lower is better (latency) swap the arguments.
    Fewer than two pairs or zero variance of the differences give ``d = None`` with a reason.
    """
    diffs = _pairs(baseline, candidate)
    n = int(diffs.size)
    mean_diff = float(np.mean(diffs)) if n else None
    if n < 2:
        return CohensD(n, None, mean_diff, None, threshold, None, "need at least 2 pairs")
    sd = float(np.std(diffs, ddof=1))
    if _constant(diffs):
        return CohensD(n, None, mean_diff, 0.0, threshold, None, "differences have zero variance")
    d = float(np.mean(diffs)) / sd
    return CohensD(n, d, mean_diff, sd, threshold, d >= threshold)


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class PairedComparison:
    """The default decision: improved = significant (p < alpha) and d >= min_effect, d > 0."""

    t_test: PairedTTest
    effect: CohensD
    improved: bool | None
    reason: str | None = None


def compare_paired(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> PairedComparison:
    """Paired t-test and Cohen's d together; ``improved`` is ``None`` when either is undefined."""
    t_test = paired_t_test(baseline, candidate, alpha=alpha)
    effect = cohens_d_paired(baseline, candidate, threshold=min_effect)
    if t_test.significant is None or effect.meets_threshold is None or effect.d is None:
        return PairedComparison(t_test, effect, None, t_test.reason or effect.reason)
    improved = t_test.significant and effect.meets_threshold and effect.d > 0
    return PairedComparison(t_test, effect, improved)


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class BootstrapCI:
    """Percentile bootstrap confidence interval of the mean paired difference."""

    n: int
    mean_diff: float | None
    lower: float | None
    upper: float | None
    confidence: float
    n_resamples: int
    seed: int
    reason: str | None = None


def paired_bootstrap_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapCI:
    """Paired bootstrap CI of ``mean(candidate - baseline)``: ``scipy.stats.bootstrap``'s
    percentile interval of the mean of the differences.

    Each resample draws ``n`` query indices with replacement (from
    ``numpy.random.default_rng(seed)``) and takes the mean of those differences; the interval is
    the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the resampled means
    (linear interpolation). The same seed and inputs give the same interval. Zero variance is
    not degenerate here: the interval collapses to the mean. Fewer than two pairs give ``None``
    bounds with a reason.
    """
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    diffs = _pairs(baseline, candidate)
    n = int(diffs.size)
    mean_diff = float(np.mean(diffs)) if n else None
    if n < 2:
        return BootstrapCI(
            n, mean_diff, None, None, confidence, n_resamples, seed, "need at least 2 pairs"
        )
    interval = _scipy_stats.bootstrap(
        (diffs,),
        np.mean,
        n_resamples=n_resamples,
        batch=max(1, _BOOTSTRAP_CHUNK // n),  # resamples drawn at once (memory bound)
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return BootstrapCI(
        n, mean_diff, float(interval.low), float(interval.high), confidence, n_resamples, seed
    )


# --------------------------------------------------------------------------- correlation


@dataclass(frozen=True)
class Correlation:
    """Pearson correlation with its two-sided p-value (``scipy.stats.pearsonr``)."""

    n: int
    r: float | None
    p_value: float | None
    reason: str | None = None


def pearson_correlation(x: Sequence[float], y: Sequence[float]) -> Correlation:
    """Pearson's r and the two-sided p-value of ``r != 0`` (t-test with ``n - 2`` df).

    Used for query length vs nDCG@10. Fewer than three pairs (r is then always
    +-1 and untestable) or a constant ``x`` or ``y`` give ``None`` with a reason.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} vs {len(y)}")
    xs = np.asarray(list(x), dtype=np.float64)
    ys = np.asarray(list(y), dtype=np.float64)
    if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
        raise ValueError("x and y must be finite numbers")
    n = int(xs.size)
    if n < 3:
        return Correlation(n, None, None, "need at least 3 pairs")
    if _constant(xs) or _constant(ys):
        return Correlation(n, None, None, "one of the variables is constant")
    result = _scipy_stats.pearsonr(xs, ys)
    r = max(-1.0, min(1.0, float(result.statistic)))
    return Correlation(n, r, float(result.pvalue))


# --------------------------------------------------------------------------- agreement


Weights = Literal["none", "quadratic"]


@dataclass(frozen=True)
class Agreement:
    """Cohen's kappa between two annotators, unweighted or quadratic-weighted.

    ``observed`` and ``expected`` are the (weighted) agreement proportions ``p_o`` and ``p_e``
    and ``kappa = (p_o - p_e) / (1 - p_e)``.
    """

    n: int
    weights: Weights
    kappa: float | None
    observed: float | None
    expected: float | None
    categories: tuple[Hashable, ...]
    reason: str | None = None


def _agreement(
    labels_a: Sequence[Hashable],
    labels_b: Sequence[Hashable],
    categories: Sequence[Hashable],
    weight_matrix: npt.NDArray[np.float64],
    weights: Weights,
) -> Agreement:
    n = len(labels_a)
    cats = tuple(categories)
    index = {label: i for i, label in enumerate(cats)}
    size = len(cats)
    counts = np.zeros((size, size), dtype=np.float64)
    for a, b in zip(labels_a, labels_b, strict=True):
        counts[index[a], index[b]] += 1.0
    observed_matrix = counts / n
    expected_matrix = np.outer(observed_matrix.sum(axis=1), observed_matrix.sum(axis=0))
    # weight_matrix holds disagreement weights in [0, 1] (0 on the diagonal)
    p_o = 1.0 - float(np.sum(weight_matrix * observed_matrix))
    p_e = 1.0 - float(np.sum(weight_matrix * expected_matrix))
    if 1.0 - p_e <= _RELATIVE_ZERO:
        return Agreement(
            n,
            weights,
            None,
            p_o,
            p_e,
            cats,
            "expected agreement is 1 (both annotators used a single category)",
        )
    kappa = (p_o - p_e) / (1.0 - p_e)
    return Agreement(n, weights, kappa, p_o, p_e, cats)


def _check_labels(labels_a: Sequence[Hashable], labels_b: Sequence[Hashable]) -> None:
    if len(labels_a) != len(labels_b):
        raise ValueError(f"label lists differ in length: {len(labels_a)} vs {len(labels_b)}")


def cohens_kappa(
    labels_a: Sequence[Hashable],
    labels_b: Sequence[Hashable],
    *,
    categories: Sequence[Hashable] | None = None,
) -> Agreement:
    """Unweighted Cohen's kappa: ``p_o`` = share of items labelled alike, ``p_e`` = sum over
    categories of the product of the two annotators' marginal shares.

    ``categories`` defaults to the labels seen (any hashable values); unseen extra categories do
    not change kappa. Fewer than two items, or ``p_e = 1``, give ``kappa = None`` with a reason.
    """
    _check_labels(labels_a, labels_b)
    n = len(labels_a)
    seen = list(dict.fromkeys([*labels_a, *labels_b]))
    cats: list[Hashable] = list(categories) if categories is not None else seen
    unknown = [label for label in seen if label not in cats]
    if unknown:
        raise ValueError(f"labels outside categories: {unknown!r}")
    if n < 2:
        return Agreement(n, "none", None, None, None, tuple(cats), "need at least 2 items")
    size = len(cats)
    weight_matrix = 1.0 - np.eye(size, dtype=np.float64)
    return _agreement(labels_a, labels_b, cats, weight_matrix, "none")


def quadratic_weighted_kappa(
    labels_a: Sequence[int],
    labels_b: Sequence[int],
    *,
    categories: Sequence[int] | None = None,
) -> Agreement:
    """Quadratic-weighted Cohen's kappa for ordinal integer grades.

    Disagreement weight ``w_ij = (g_i - g_j)**2 / (g_max - g_min)**2`` on the grade *values* of
    the categories, which default to every integer from the smallest to the largest grade seen
    (so a 0-vs-3 disagreement weighs 9 times a 0-vs-1 one even if grade 2 never occurs).
    ``p_o = 1 - sum w_ij O_ij``, ``p_e = 1 - sum w_ij E_ij``, ``kappa = (p_o - p_e) / (1 - p_e)``
    with O the observed and E the chance (outer product of marginals) proportion matrices.
    Fewer than two items, a single category, or ``p_e = 1`` give ``kappa = None``.
    """
    _check_labels(labels_a, labels_b)
    n = len(labels_a)
    for label in [*labels_a, *labels_b]:
        if isinstance(label, bool) or not isinstance(label, int):
            raise ValueError(f"grades must be integers, got {label!r}")
    if categories is not None:
        cats = sorted(set(categories))
        unknown = sorted({label for label in [*labels_a, *labels_b] if label not in cats})
        if unknown:
            raise ValueError(f"labels outside categories: {unknown!r}")
    elif n:
        grades = [*labels_a, *labels_b]
        cats = list(range(min(grades), max(grades) + 1))
    else:
        cats = []
    if n < 2:
        return Agreement(n, "quadratic", None, None, None, tuple(cats), "need at least 2 items")
    if len(cats) < 2:
        return Agreement(
            n, "quadratic", None, None, None, tuple(cats), "need at least 2 categories"
        )
    values = np.asarray(cats, dtype=np.float64)
    span = float(values[-1] - values[0])
    weight_matrix = (values[:, None] - values[None, :]) ** 2 / span**2
    return _agreement(labels_a, labels_b, cats, weight_matrix, "quadratic")


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MIN_EFFECT",
    "Agreement",
    "BootstrapCI",
    "CohensD",
    "Correlation",
    "PairedComparison",
    "PairedTTest",
    "cohens_d_paired",
    "cohens_kappa",
    "compare_paired",
    "paired_bootstrap_ci",
    "paired_t_test",
    "pearson_correlation",
    "quadratic_weighted_kappa",
]
