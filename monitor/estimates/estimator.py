"""The population estimates from their running sums: uniform-only and prediction-powered.

Pure arithmetic, the same the recording rules do in PromQL (helm/rag-monitor/templates/
_rules.tpl; docs/metrics.md, "Population estimates", has the formulas and why they hold). Two
samples of judged traces: the uniform draw (weight w = 1 / the draw's rate) and every judged
trace (w = 1 / its chance of being judged, by the draw or as a priority). For a trace t of a
sample: judge score y, tier-0 prediction f; per conversation c (the unit of the draw) M_c =
sum w, Y_c = sum w y, F_c = sum w f. Everything an estimate needs is a sum, over conversations,
of these or of their products, so it can be kept as monotone counters and added up across
replicas and windows:

- uniform-only, from the draw: R = sum Y_c / sum M_c (the traffic mean, weighted by inverse
  inclusion probability), with the cluster-robust (linearised ratio) variance
  k/(k-1) (1 - r) sum (Y_c - R M_c)^2 / (sum M_c)^2 over the k conversations drawn, where
  r = judged / sum M_c is the draw's rate ((1 - r) removes what sampling with replacement
  would add: the draw takes each conversation at most once);
- prediction-powered: the mean of f over every trace plus D = sum (Y_c - F_c) / sum M_c over
  every judged trace, the judge's correction of tier 0; its variance is that of D: the same
  cluster-robust sum over the judged sample, with nothing taken off for sampling without
  replacement: where low scores are rare the correction is a skewed sum of a few large terms,
  and that slack is what keeps the normal interval's coverage at 93-97% (taking off r times the
  draw's own sum of squared residuals, as an earlier version did, covered 88-92% there). The
  first term is the traffic's own mean prediction, known exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Literal, get_args

Term = Literal[
    "traces", "predicted", "judged", "clusters", "m", "y", "f", "mm", "yy", "ff", "ym", "fm", "yf"
]
TERMS: tuple[Term, ...] = get_args(Term)
Z95 = 1.96  # the standard normal's 97.5% quantile, as the recording rules write it


@dataclass(frozen=True, slots=True)
class Terms:
    """The running sums of one (agent, metric, quantity): traffic, then the uniform sample's.

    `traces` and `predicted`: traces in the population and the sum of their predictions;
    `judged` and `clusters`: judged traces and conversations of the uniform sample; the rest:
    sums over sampled conversations of M, Y, F and of their products (``ym`` = sum Y_c M_c).
    """

    traces: float = 0.0
    predicted: float = 0.0
    judged: float = 0.0
    clusters: float = 0.0
    m: float = 0.0
    y: float = 0.0
    f: float = 0.0
    mm: float = 0.0
    yy: float = 0.0
    ff: float = 0.0
    ym: float = 0.0
    fm: float = 0.0
    yf: float = 0.0

    @classmethod
    def of(cls, values: Mapping[str, float]) -> Terms:
        return cls(**{name: float(values.get(name, 0.0)) for name in TERMS})

    def __add__(self, other: Terms) -> Terms:
        return Terms(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Terms)))

    def __sub__(self, other: Terms) -> Terms:
        """The sums between two readings of the counters (what `increase` gives)."""
        return Terms(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(Terms)))


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float
    stderr: float

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """The (95% by default) interval, within [0, 1] where the scores are."""
        return (
            min(1.0, max(0.0, self.value - z * self.stderr)),
            min(1.0, max(0.0, self.value + z * self.stderr)),
        )


def _cluster_factor(terms: Terms) -> float | None:
    return terms.clusters / (terms.clusters - 1.0) if terms.clusters > 1.0 else None


def draw_rate(terms: Terms) -> float:
    """The draw's rate, from its sums: judged traces over their weights (its mean rate, in the
    harmonic sense, when load changed it)."""
    return terms.judged / terms.m if terms.m > 0.0 else 0.0


def uniform(terms: Terms) -> Estimate | None:
    """The uniform sample's weighted mean; None with fewer than two sampled conversations."""
    factor = _cluster_factor(terms)
    if factor is None or terms.m <= 0.0:
        return None
    ratio = terms.y / terms.m
    spread = terms.yy - 2.0 * ratio * terms.ym + ratio * ratio * terms.mm
    variance = factor * (1.0 - draw_rate(terms)) * spread
    return Estimate(ratio, math.sqrt(max(0.0, variance)) / terms.m)


def correction(terms: Terms) -> float | None:
    """D: how much the judge's scores exceed tier 0's predictions on a sample."""
    return (terms.y - terms.f) / terms.m if terms.m > 0.0 else None


def _residual_spread(terms: Terms, shift: float) -> float:
    """sum over conversations of (Y_c - F_c - shift M_c)^2."""
    residual = terms.yy - 2.0 * terms.yf + terms.ff  # sum (Y_c - F_c)^2
    cross = terms.ym - terms.fm  # sum (Y_c - F_c) M_c
    return residual - 2.0 * shift * cross + shift * shift * terms.mm


def prediction_powered(drawn: Terms, judged: Terms) -> Estimate | None:
    """Mean prediction over every trace (`drawn`'s traffic terms) plus the correction on every
    judged trace (`judged`, weighted by inverse chance of being judged); None with fewer than
    two conversations in either sample (without the draw, traffic no priority reaches would
    have no say)."""
    factor = _cluster_factor(judged)
    shift = correction(judged)
    if factor is None or shift is None or drawn.traces <= 0.0 or drawn.clusters < 2.0:
        return None
    spread = _residual_spread(judged, shift)
    value = drawn.predicted / drawn.traces + shift
    return Estimate(value, math.sqrt(max(0.0, factor * spread)) / judged.m)


@dataclass(frozen=True, slots=True)
class Observation:
    """One judged trace of the uniform sample, for computing terms in one pass."""

    cluster: str
    weight: float
    judge: float
    prediction: float


def terms_of(observations: Iterable[Observation], predictions: Iterable[float]) -> Terms:
    """The terms of a whole sample at once (`predictions`: every trace's in the population).

    The daemon keeps the same sums incrementally (monitor.estimates.recorder); this is their
    definition, used by the bench and the tests.
    """
    totals: dict[str, list[float]] = {}
    judged = 0
    for o in observations:
        judged += 1
        total = totals.setdefault(o.cluster, [0.0, 0.0, 0.0])
        total[0] += o.weight
        total[1] += o.weight * o.judge
        total[2] += o.weight * o.prediction
    every = list(predictions)
    sums: dict[str, float] = dict.fromkeys(TERMS, 0.0)
    sums["traces"] = float(len(every))
    sums["predicted"] = math.fsum(every)
    sums["judged"] = float(judged)
    sums["clusters"] = float(len(totals))
    for m, y, f in totals.values():
        sums["m"] += m
        sums["y"] += y
        sums["f"] += f
        sums["mm"] += m * m
        sums["yy"] += y * y
        sums["ff"] += f * f
        sums["ym"] += y * m
        sums["fm"] += f * m
        sums["yf"] += y * f
    return Terms.of(sums)
