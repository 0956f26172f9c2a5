"""Tests of monitor.golden.stats with hand-computed values (arithmetic in the comments).

p-values are checked where the t distribution has a closed form:
  df = 1 (Cauchy):   two-sided p = 1 - (2 / pi) * atan(|t|)
  df = 2:            two-sided p = 1 - |t| / sqrt(t^2 + 2)
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from monitor.golden.stats import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    Agreement,
    cohens_d_paired,
    cohens_kappa,
    compare_paired,
    paired_bootstrap_ci,
    paired_t_test,
    pearson_correlation,
    quadratic_weighted_kappa,
)


def _no_nan(obj: object) -> None:
    for field in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, field.name)
        if isinstance(value, float):
            assert not math.isnan(value), field.name
        elif dataclasses.is_dataclass(value):
            _no_nan(value)


# --------------------------------------------------------------------------- paired t-test


def test_paired_t_test_not_significant() -> None:
    # diffs = candidate - baseline = [1, 2, 3]; mean 2; sd (ddof=1) = sqrt(((1)^2+0+(1)^2)/2) = 1
    # t = 2 / (1 / sqrt(3)) = 2 * sqrt(3) = 3.4641016; df = 2
    # p = 1 - 3.4641016 / sqrt(12 + 2) = 1 - 3.4641016 / 3.7416574 = 0.0741799 -> not < 0.05
    result = paired_t_test([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert result.n == 3 and result.df == 2 and result.mean_diff == 2.0
    assert result.t_statistic == pytest.approx(3.4641016, abs=1e-7)
    assert result.p_value == pytest.approx(0.0741799, abs=1e-7)
    assert result.alpha == DEFAULT_ALPHA == 0.05
    assert result.significant is False
    assert result.reason is None


def test_paired_t_test_significant_and_direction() -> None:
    # diffs [1.0, 1.1, 1.2]: mean 1.1, sd 0.1, t = 1.1 / (0.1 / sqrt 3) = 11 sqrt 3 = 19.0525589
    # p = 1 - 19.0525589 / sqrt(363 + 2) = 1 - 19.0525589 / 19.1049732 = 0.0027435
    result = paired_t_test([0.0, 0.0, 0.0], [1.0, 1.1, 1.2])
    assert result.t_statistic == pytest.approx(19.0525589, abs=1e-6)
    assert result.p_value == pytest.approx(0.0027435, abs=1e-7)
    assert result.significant is True
    # swapping the systems flips the sign of t and of the mean difference, not p
    swapped = paired_t_test([1.0, 1.1, 1.2], [0.0, 0.0, 0.0])
    assert swapped.t_statistic == pytest.approx(-19.0525589, abs=1e-6)
    assert swapped.mean_diff == pytest.approx(-1.1)
    assert swapped.p_value == pytest.approx(result.p_value)


def test_paired_t_test_degenerate() -> None:
    empty = paired_t_test([], [])
    assert (empty.n, empty.mean_diff, empty.t_statistic, empty.p_value) == (0, None, None, None)
    assert empty.reason == "need at least 2 pairs"
    one = paired_t_test([0.2], [0.5])
    assert one.mean_diff == pytest.approx(0.3) and one.p_value is None and one.reason
    # all differences equal (0.1 each, up to rounding): t is undefined -> None, not inf/NaN
    flat = paired_t_test([0.1, 0.2, 0.3], [0.2, 0.3, 0.4])
    assert flat.t_statistic is None and flat.p_value is None and flat.significant is None
    assert flat.reason == "differences have zero variance"
    same = paired_t_test([0.5, 0.7], [0.5, 0.7])
    assert same.mean_diff == 0.0 and same.p_value is None
    for result in (empty, one, flat, same):
        _no_nan(result)


def test_paired_inputs_are_validated() -> None:
    with pytest.raises(ValueError, match="length"):
        paired_t_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        paired_t_test([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired_t_test([1.0, 2.0], [2.0, 3.0], alpha=1.5)


# --------------------------------------------------------------------------- Cohen's d


def test_cohens_d_paired() -> None:
    # diffs [1, 2, 3]: d = mean / sd = 2 / 1 = 2.0 >= 0.3
    result = cohens_d_paired([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert result.d == pytest.approx(2.0)
    assert result.sd_diff == pytest.approx(1.0)
    assert result.threshold == DEFAULT_MIN_EFFECT == 0.3
    assert result.meets_threshold is True


def test_cohens_d_below_threshold() -> None:
    # diffs [0.1, -0.1, 0.3, -0.1]: mean 0.05; deviations 0.05 -0.15 0.25 -0.15
    # squares .0025 .0225 .0625 .0225 = 0.11; / 3 = 0.0366667; sd = 0.1914854
    # d = 0.05 / 0.1914854 = 0.2611165 < 0.3
    result = cohens_d_paired([0.0, 0.2, 0.0, 0.2], [0.1, 0.1, 0.3, 0.1])
    assert result.mean_diff == pytest.approx(0.05)
    assert result.sd_diff == pytest.approx(0.1914854, abs=1e-7)
    assert result.d == pytest.approx(0.2611165, abs=1e-7)
    assert result.meets_threshold is False


def test_cohens_d_is_directional_and_consistent_with_t() -> None:
    # a worse candidate: d = -2, which does not meet "d >= 0.3"
    worse = cohens_d_paired([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert worse.d == pytest.approx(-2.0) and worse.meets_threshold is False
    # paired t = d * sqrt(n): 2 * sqrt(3) = 3.4641016
    t = paired_t_test([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]).t_statistic
    assert t == pytest.approx(2.0 * math.sqrt(3))


def test_cohens_d_degenerate() -> None:
    one = cohens_d_paired([1.0], [2.0])
    assert one.d is None and one.reason == "need at least 2 pairs"
    flat = cohens_d_paired([1.0, 2.0], [1.5, 2.5])
    assert flat.d is None and flat.meets_threshold is None
    assert flat.reason == "differences have zero variance"
    _no_nan(one)
    _no_nan(flat)


def test_compare_paired_seed_decision() -> None:
    # significant (p = 0.0027) and d = 1.1 / 0.1 = 11 >= 0.3 -> improved
    assert compare_paired([0.0, 0.0, 0.0], [1.0, 1.1, 1.2]).improved is True
    # d = 2 but p = 0.074 -> not improved
    assert compare_paired([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]).improved is False
    # significantly worse is not an improvement
    assert compare_paired([1.0, 1.1, 1.2], [0.0, 0.0, 0.0]).improved is False
    # undefined statistics -> undecided, with the reason
    undecided = compare_paired([0.1], [0.2])
    assert undecided.improved is None and undecided.reason == "need at least 2 pairs"


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_two_pairs_has_known_distribution() -> None:
    # diffs [0, 1]; each resample mean is 0 (prob 1/4), 0.5 (1/2) or 1 (1/4).
    # The 2.5% quantile lies in the mass at 0 and the 97.5% one in the mass at 1 -> [0, 1].
    result = paired_bootstrap_ci([0.0, 0.0], [0.0, 1.0], n_resamples=4000, seed=7)
    assert result.mean_diff == 0.5
    assert (result.lower, result.upper) == (0.0, 1.0)
    # a 40% interval: quantiles 0.30 and 0.70 both fall in the mass at 0.5
    narrow = paired_bootstrap_ci([0.0, 0.0], [0.0, 1.0], n_resamples=4000, seed=7, confidence=0.4)
    assert (narrow.lower, narrow.upper) == (0.5, 0.5)


def test_bootstrap_is_reproducible_and_brackets_the_mean() -> None:
    baseline = [0.2, 0.4, 0.1, 0.5, 0.3, 0.6, 0.2, 0.4]
    candidate = [0.3, 0.5, 0.1, 0.7, 0.2, 0.9, 0.4, 0.4]
    # diffs 0.1 0.1 0 0.2 -0.1 0.3 0.2 0 -> mean 0.8 / 8 = 0.1
    first = paired_bootstrap_ci(baseline, candidate, n_resamples=3000, seed=42)
    again = paired_bootstrap_ci(baseline, candidate, n_resamples=3000, seed=42)
    other = paired_bootstrap_ci(baseline, candidate, n_resamples=3000, seed=43)
    assert first == again
    assert (first.lower, first.upper) != (other.lower, other.upper)
    assert first.mean_diff == pytest.approx(0.1)
    assert first.lower is not None and first.upper is not None
    # the resampled means lie within [min diff, max diff] = [-0.1, 0.3]
    assert -0.1 <= first.lower < 0.1 < first.upper <= 0.3
    assert (first.n, first.n_resamples, first.seed, first.confidence) == (8, 3000, 42, 0.95)


def test_bootstrap_chunking_covers_every_resample() -> None:
    # 3000 pairs x 1000 resamples = 3e6 indices > one chunk (1e6): drawn in several chunks
    baseline = [0.0] * 3000
    candidate = [float(i % 2) for i in range(3000)]  # diffs alternate 0, 1 -> mean 0.5
    result = paired_bootstrap_ci(baseline, candidate, n_resamples=1000, seed=1)
    assert result.mean_diff == 0.5
    assert result.lower is not None and result.upper is not None
    # sd of a resample mean = 0.5 / sqrt(3000) = 0.0091; a 95% CI is about +-0.018
    assert 0.47 < result.lower < 0.5 < result.upper < 0.53


def test_bootstrap_degenerate() -> None:
    one = paired_bootstrap_ci([0.0], [1.0])
    assert one.lower is None and one.upper is None and one.reason == "need at least 2 pairs"
    # zero variance is not degenerate: the interval collapses on the mean
    flat = paired_bootstrap_ci([0.0, 0.5, 1.0], [0.5, 1.0, 1.5], n_resamples=100)
    assert (flat.lower, flat.mean_diff, flat.upper) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([0.0, 1.0], [1.0, 2.0], n_resamples=0)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([0.0, 1.0], [1.0, 2.0], confidence=1.0)
    _no_nan(one)


# --------------------------------------------------------------------------- Pearson


def test_pearson_n4() -> None:
    # x = 1 2 3 4, y = 1 3 2 4: deviations dx = -1.5 -.5 .5 1.5, dy = -1.5 .5 -.5 1.5
    # sum dx dy = 2.25 - .25 - .25 + 2.25 = 4; sum dx^2 = sum dy^2 = 5 -> r = 4 / 5 = 0.8
    # t = 0.8 sqrt(2 / 0.36) = 1.8856181; df = 2: p = 1 - 1.8856181 / sqrt(3.5555556 + 2) = 0.2
    result = pearson_correlation([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert result.n == 4
    assert result.r == pytest.approx(0.8)
    assert result.p_value == pytest.approx(0.2)


def test_pearson_n3_negative() -> None:
    # longer queries, lower nDCG: x = 1 2 3, y = 4 1 2 (mean 7/3)
    # dx = -1 0 1; dy = 5/3 -4/3 -1/3; sum dx dy = -5/3 - 1/3 = -2; sum dx^2 = 2;
    # sum dy^2 = (25 + 16 + 1) / 9 = 42/9 -> r = -2 / sqrt(2 * 42/9) = -0.6546537
    # t = r / sqrt(1 - r^2) = -0.8660254; df = 1: p = 1 - (2/pi) atan(0.8660254) = 0.5456289
    result = pearson_correlation([1.0, 2.0, 3.0], [4.0, 1.0, 2.0])
    assert result.r == pytest.approx(-0.6546537, abs=1e-7)
    assert result.p_value == pytest.approx(0.5456289, abs=1e-7)


def test_pearson_degenerate() -> None:
    short = pearson_correlation([1.0, 2.0], [2.0, 1.0])
    assert short.r is None and short.p_value is None and short.reason == "need at least 3 pairs"
    flat = pearson_correlation([1.0, 2.0, 3.0], [0.5, 0.5, 0.5])
    assert flat.r is None and flat.reason == "one of the variables is constant"
    with pytest.raises(ValueError):
        pearson_correlation([1.0, 2.0, 3.0], [1.0, 2.0])
    _no_nan(short)
    _no_nan(flat)


# --------------------------------------------------------------------------- kappa


def test_cohens_kappa_small() -> None:
    # a = 0 0 1 1, b = 0 1 1 1: agree on items 1, 3, 4 -> p_o = 3/4
    # marginals a: 0 .5, 1 .5; b: 0 .25, 1 .75 -> p_e = .5*.25 + .5*.75 = .5
    # kappa = (.75 - .5) / (1 - .5) = 0.5
    result = cohens_kappa([0, 0, 1, 1], [0, 1, 1, 1])
    assert result.observed == pytest.approx(0.75)
    assert result.expected == pytest.approx(0.5)
    assert result.kappa == pytest.approx(0.5)
    assert result.weights == "none"


def test_cohens_kappa_textbook_table() -> None:
    # 50 items: yes/yes 20, yes/no 5, no/yes 10, no/no 15
    # p_o = (20 + 15) / 50 = 0.7; A says yes 25/50 = .5, B says yes 30/50 = .6
    # p_e = .5 * .6 + .5 * .4 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    result = cohens_kappa(a, b)
    assert result.kappa == pytest.approx(0.4)
    # declaring an unused category does not change kappa
    assert cohens_kappa(a, b, categories=["yes", "no", "maybe"]).kappa == pytest.approx(0.4)
    with pytest.raises(ValueError, match="outside"):
        cohens_kappa(a, b, categories=["yes"])


def test_cohens_kappa_degenerate() -> None:
    # both annotators always say "a": p_e = 1, kappa = 0/0 -> None
    same = cohens_kappa(["a", "a", "a"], ["a", "a", "a"])
    assert same.kappa is None and same.observed == 1.0 and same.expected == 1.0
    assert same.reason is not None and "single category" in same.reason
    one = cohens_kappa([1], [1])
    assert one == Agreement(1, "none", None, None, None, (1,), "need at least 2 items")
    with pytest.raises(ValueError):
        cohens_kappa([1, 2], [1])
    _no_nan(same)


def test_quadratic_weighted_kappa() -> None:
    # a = 0 1 2 3, b = 0 1 3 3; categories 0..3, w_ij = (i - j)^2 / 9
    # observed: one disagreement (2 vs 3, w = 1/9) of 4 items -> sum wO = 1/36, p_o = 35/36
    # marginals a: 1/4 each; b: 0 1/4, 1 1/4, 2 0, 3 1/2
    # sum wE = (1/4)(1/9)[ (1/4)(0+1+4+9) + (1/4)(1+0+1+4) + (1/2)(9+4+1+0) ]
    #        = (1/36)(3.5 + 1.5 + 7) = 12/36 = 1/3 -> p_e = 2/3
    # kappa = (35/36 - 24/36) / (12/36) = 11/12 = 0.9166667
    result = quadratic_weighted_kappa([0, 1, 2, 3], [0, 1, 3, 3])
    assert result.categories == (0, 1, 2, 3)
    assert result.observed == pytest.approx(35 / 36)
    assert result.expected == pytest.approx(2 / 3)
    assert result.kappa == pytest.approx(11 / 12)
    assert result.weights == "quadratic"
    # wider declared grade range: every weight is rescaled by the same factor -> same kappa
    wider = quadratic_weighted_kappa([0, 1, 2, 3], [0, 1, 3, 3], categories=range(-1, 5))
    assert wider.kappa == pytest.approx(11 / 12)


def test_quadratic_weighted_kappa_uses_grade_distance() -> None:
    # a = 0 0 3 3, b = 0 3 0 3 (grades 1, 2 unused; categories 0..3, w(0,3) = 9/9 = 1)
    # observed: two disagreements of weight 1 -> sum wO = 2/4, p_o = 0.5
    # marginals: a and b both 0 .5, 3 .5 -> sum wE = 2 * .5 * .5 * 1 = .5, p_e = 0.5 -> kappa 0
    result = quadratic_weighted_kappa([0, 0, 3, 3], [0, 3, 0, 3])
    assert result.kappa == pytest.approx(0.0)
    # perfect agreement -> 1; perfect reversal 0 1 2 3 vs 3 2 1 0:
    # sum wO = (9 + 1 + 1 + 9) / 9 / 4 = 20/36; sum wE = (1/16)(1/9) * 40 = 10/36 -> kappa = -1
    assert quadratic_weighted_kappa([0, 1, 2, 3], [0, 1, 2, 3]).kappa == pytest.approx(1.0)
    assert quadratic_weighted_kappa([0, 1, 2, 3], [3, 2, 1, 0]).kappa == pytest.approx(-1.0)


def test_quadratic_weighted_kappa_degenerate() -> None:
    single = quadratic_weighted_kappa([2, 2], [2, 2])
    assert single.kappa is None and single.reason == "need at least 2 categories"
    # two categories declared, but everyone answers 2: p_e = 1 -> None
    stuck = quadratic_weighted_kappa([2, 2], [2, 2], categories=[1, 2])
    assert stuck.kappa is None and stuck.reason is not None
    empty = quadratic_weighted_kappa([], [])
    assert empty.kappa is None and empty.reason == "need at least 2 items"
    with pytest.raises(ValueError, match="integers"):
        quadratic_weighted_kappa([1.5, 2], [1, 2])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="outside"):
        quadratic_weighted_kappa([0, 4], [0, 1], categories=[0, 1, 2, 3])
    for result in (single, stuck, empty):
        _no_nan(result)
