"""Could the prediction-powered interval be narrower? Candidate predictors on the same streams.

    python bench/estimates_candidates.py [--reps 100] [--rates 0.02,0.05,0.1] [--seed 0]
                                         [--traces 20000] [--judge-error 0.05] [--folds 5]

The streams, folds, simulated judge, real tier 0 held out by source and real sampler are those
of ``bench/estimates.py`` with the same arguments (the same seeds give the same streams: its
``uniform-only`` and ``prediction-powered`` rows are this table's ``uniform-only`` and ``now``).
On each stream, the prediction-powered estimate (monitor.estimates.estimator) with tier 0's
prediction of the share below the faithfulness threshold made otherwise. Every fitted predictor
learns, as the daemon's calibration does, on the training stream built from the other folds
(its window full), cross-fitted by conversation folds, then frozen; none sees the reported
stream's items. Rows:

- ``now``: the daemon's calibration (monitor.estimates.calibration): isotonic on 10 bins of
  tier 0's support per answer language, the uniform draw's labels only;
- ``+ priority labels``: the same fit on every judged trace of the training stream, each
  weighted by its inverse chance of being judged (so a bin's value estimates the traffic's rate
  in that bin); ``+ priority labels, unweighted``: the same without the weights;
- ``20 bins``: the daemon's calibration with 20 bins of support;
- ``low support x ratio``: + priority labels, with the traces of support below 0.5 split by
  whether tier 0's faithfulness ratio is below 0.5 (isotonic in support within each part);
- ``logistic, 5 signals``: a logistic regression (L2, Newton) on support, the faithfulness
  ratio, the unsupported-entities flag, answer relevancy, context utilisation and the answer
  language, on every judged trace weighted by its inverse chance;
- ``PPI++``: ``now``'s predictions scaled by the power-tuning factor lambda (Angelopoulos,
  Duchi, Zrnic 2023) that minimises the estimate's variance, chosen from the same sums the
  recording rules have (so PromQL could compute it): lambda * mean prediction over every trace
  + the weighted mean of (judge - lambda * prediction) over the judged traces.

And, as bounds rather than estimators (each knows what no daemon knows; never a candidate):

- ``bound: own rate per bin``: each trace predicted by the reported stream's own judge-grade
  rate in its (language, support bin): a 10-bin calibration that knew the held-out traffic;
- ``bound: own rate per item``: by its item's own rate in the stream: any predictor from
  tier 0's signals at best, with today's priorities;
- ``bound: same items``: the daemon's calibration learnt on another stream of the held-out
  fold's items (not held out: the items repeat, so sparse bins learn single items' verdicts).

Per rate and row: bias, coverage of the 95% interval, mean width, the width over
uniform-only's, and the mean paired difference of that ratio from ``now`` per stream with its
standard error (the same streams: far more precise than the ratios' own noise).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.detect import DEFAULT_DATA  # noqa: E402
from bench.estimates import (  # noqa: E402
    WARM_UP,
    Case,
    Chosen,
    Prepared,
    Stream,
    calibrate,
    estimate_stream,
    frozen_predictions,
    prepare,
    select,
    stats,
)
from monitor.config.scoring import EstimatesConfig  # noqa: E402
from monitor.estimates.calibration import FOLDS, fold_of, isotonic  # noqa: E402
from monitor.estimates.estimator import (  # noqa: E402
    Z95,
    Estimate,
    Observation,
    Terms,
    prediction_powered,
    terms_of,
)

MIN_LABELS = EstimatesConfig().calibration_min_labels
Interval = tuple[float, float, float]  # estimate, lower, upper


@dataclass(frozen=True, slots=True)
class Features:
    """The tier-0 signals of one item, with the support of the held-out fold's model."""

    support: float
    ratio: float  # tier 0's faithfulness ratio
    entities: float  # 1 if a number, date or name is in no context
    relevancy: float
    utilization: float
    language: str


def features(case: Case, fold: int) -> Features:
    scores = case.tier0.scores

    def value(name: str) -> float:
        found = scores.get(name)
        return found.value if found is not None and found.value is not None else 0.0

    return Features(
        support=case.support[fold],
        ratio=value("faithfulness"),
        entities=float("unsupported_entities" in case.tier0.flags),
        relevancy=value("answer_relevancy"),
        utilization=value("context_utilization"),
        language=case.language,
    )


@dataclass(frozen=True, slots=True)
class Labelled:
    """A judged trace of the training stream."""

    features: Features
    conversation_fold: int
    below: float  # the judge's verdict: 1 below the faithfulness threshold
    uniform: bool
    weight: float  # 1 / its chance of being judged


Key = Callable[[Features], tuple[int, int]]  # (stratum, bin)


def support_bins(bins: int, split_low: bool = False) -> Key:
    def key(f: Features) -> tuple[int, int]:
        stratum = int(split_low and f.support < 0.5 and f.ratio < 0.5)
        return stratum, min(bins - 1, max(0, int(f.support * bins)))

    return key


def binned_fit(
    labels: Sequence[Labelled], key: Key, bins: int
) -> dict[tuple[str, int], list[float]]:
    """Per (language, stratum): the weighted isotonic share below per bin (falling with the
    support), an empty bin taking its nearest filled neighbour below (above, before the first);
    none for a language with fewer than the daemon's minimum of labels."""
    by_language: dict[str, list[Labelled]] = {}
    for label in labels:
        by_language.setdefault(label.features.language, []).append(label)
    fits: dict[tuple[str, int], list[float]] = {}
    for language, members in by_language.items():
        if len(members) < MIN_LABELS:
            continue
        sums: dict[int, dict[int, list[float]]] = {}
        for label in members:
            stratum, b = key(label.features)
            total = sums.setdefault(stratum, {}).setdefault(b, [0.0, 0.0])
            total[0] += label.weight
            total[1] += label.weight * label.below
        for stratum, per_bin in sums.items():
            filled = sorted(per_bin)
            fitted = isotonic(
                [per_bin[b][1] / per_bin[b][0] for b in filled],
                [per_bin[b][0] for b in filled],
                increasing=False,
            )
            values, at = [], 0
            for b in range(bins):
                while at + 1 < len(filled) and filled[at + 1] <= b:
                    at += 1
                values.append(fitted[at])
            fits[language, stratum] = values
    return fits


Fitter = Callable[[Sequence[Labelled]], Callable[[Features], float]]


def binned(bins: int, split_low: bool = False) -> Fitter:
    key = support_bins(bins, split_low)

    def fitter(labels: Sequence[Labelled]) -> Callable[[Features], float]:
        fits = binned_fit(labels, key, bins)

        def predict(f: Features) -> float:
            stratum, b = key(f)
            fit = fits.get((f.language, stratum))
            return fit[b] if fit is not None else 0.0  # unfitted: the daemon's constant

        return predict

    return fitter


LANGUAGES = ("en", "ja", "unknown")


def design(f: Features) -> list[float]:
    return [
        f.support,
        f.ratio,
        f.entities,
        f.relevancy,
        f.utilization,
        *(float(f.language == lang) for lang in LANGUAGES),
        1.0,
    ]


def logistic(labels: Sequence[Labelled]) -> Callable[[Features], float]:
    """Weighted L2-penalised logistic regression by Newton's method."""
    x = np.asarray([design(label.features) for label in labels])
    y = np.asarray([label.below for label in labels])
    w = np.asarray([label.weight for label in labels])
    w = w / w.mean()
    beta = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-x @ beta))
        gradient = x.T @ (w * (p - y)) + beta
        hessian = (x * (w * p * (1.0 - p))[:, None]).T @ x + np.eye(beta.size)
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if float(np.abs(step).max()) < 1e-9:
            break
    return lambda f: float(1.0 / (1.0 + math.exp(-float(np.dot(design(f), beta)))))


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    fitter: Fitter
    priorities: bool  # learns on every judged trace, not only the draw's
    weighted: bool = True  # each label by its inverse chance of being judged, else all alike


CANDIDATES = (
    Candidate("+ priority labels", binned(10), priorities=True),
    Candidate("+ priority labels, unweighted", binned(10), priorities=True, weighted=False),
    Candidate("20 bins", binned(20), priorities=False, weighted=False),  # as the daemon's
    Candidate("low support x ratio", binned(10, split_low=True), priorities=True),
    Candidate("logistic, 5 signals", logistic, priorities=True),
)
NOW, PPI_PP = "now", "PPI++"
BOUNDS = ("bound: own rate per bin", "bound: own rate per item", "bound: same items")
ROWS = ("uniform-only", NOW, *(c.name for c in CANDIDATES), PPI_PP, *BOUNDS)


def training_labels(
    stream: Stream, chosen: Sequence[Chosen], signals: dict[int, Features]
) -> list[Labelled]:
    out = []
    for i, c in enumerate(chosen):
        if c.judged:
            out.append(
                Labelled(
                    signals[stream.cases[i]],
                    fold_of(stream.conversations[i]),
                    float(stream.unfaithful[i]),
                    c.uniform,
                    1.0 / c.judged_probability,
                )
            )
    return out


def cross_fitted(
    candidate: Candidate, labels: Sequence[Labelled], stream: Stream, signals: dict[int, Features]
) -> list[float]:
    """Every trace of `stream` predicted by the fit of the other conversation folds' labels."""
    kept = [
        label if candidate.weighted else _unweighted(label)
        for label in labels
        if label.uniform or candidate.priorities
    ]
    predictors = [
        candidate.fitter([label for label in kept if label.conversation_fold != k])
        for k in range(FOLDS)
    ]
    return [
        predictors[fold_of(conversation)](signals[case])
        for case, conversation in zip(stream.cases, stream.conversations, strict=True)
    ]


def _unweighted(label: Labelled) -> Labelled:
    return Labelled(label.features, label.conversation_fold, label.below, label.uniform, 1.0)


def own_rates(stream: Stream, keys: Sequence[object]) -> list[float]:
    """Each trace's key's judge-grade rate in `stream` itself."""
    totals: dict[object, list[float]] = {}
    for key, bad in zip(keys, stream.unfaithful, strict=True):
        total = totals.setdefault(key, [0.0, 0.0])
        total[0] += 1.0
        total[1] += float(bad)
    return [totals[key][1] / totals[key][0] for key in keys]


def power_tuned(
    stream: Stream, chosen: Sequence[Chosen], predictions: Sequence[float]
) -> Estimate | None:
    """PPI++: the prediction scaled by the lambda at the vertex of the parabola through the
    estimated variance at lambda = 0, 1 and 2 (the variance the recording rules compute is
    quadratic in lambda, from the same sums), so PromQL could compute it too."""
    rows = list(zip(chosen, stream.unfaithful, predictions, stream.conversations, strict=True))

    def terms(scale: float) -> tuple[Terms, Terms]:
        drawn = [
            Observation(conversation, 1.0 / c.rate, float(bad), scale * f)
            for c, bad, f, conversation in rows
            if c.uniform
        ]
        judged = [
            Observation(conversation, 1.0 / c.judged_probability, float(bad), scale * f)
            for c, bad, f, conversation in rows
            if c.judged
        ]
        return terms_of(drawn, [scale * f for f in predictions]), terms_of(judged, [])

    def variance(scale: float) -> float | None:
        estimate = prediction_powered(*terms(scale))
        return None if estimate is None else estimate.stderr**2

    v0, v1, v2 = variance(0.0), variance(1.0), variance(2.0)
    if v0 is None or v1 is None or v2 is None:
        return None
    curvature = (v0 - 2.0 * v1 + v2) / 2.0
    scale = (v0 - v1 + curvature) / (2.0 * curvature) if curvature > 0.0 else 1.0
    return prediction_powered(*terms(scale))


@dataclass(frozen=True, slots=True)
class Split:
    """Where the prediction-powered estimate's variance comes from, with ``now``'s predictions:
    the traffic no priority rule reaches against the priorities' (the Horvitz-Thompson variance
    of the weighted sum of y - f - D, trace by trace)."""

    share: float  # of the traffic, outside every priority rule
    variance_share: float  # of the variance, from that traffic
    unfaithful: float  # there: the judge-grade share below the threshold, y
    residual: float  # there: the mean of (y - f)^2


def split(
    stream: Stream, chosen: Sequence[Chosen], predictions: Sequence[float], priority: np.ndarray
) -> Split:
    y = np.asarray(stream.unfaithful, dtype=float)
    f = np.asarray(predictions)
    judged = np.asarray([c.judged for c in chosen])
    chance = np.asarray([c.judged_probability for c in chosen])
    weight = judged / chance
    shift = float(np.sum(weight * (y - f)) / np.sum(weight))
    terms = judged * (1.0 - chance) / chance**2 * (y - f - shift) ** 2
    rest = ~priority
    return Split(
        share=float(rest.mean()),
        variance_share=float(terms[rest].sum() / terms.sum()),
        unfaithful=float(y[rest].mean()),
        residual=float(np.mean((y[rest] - f[rest]) ** 2)),
    )


def _interval(estimate: Estimate | None) -> Interval | None:
    if estimate is None:
        return None
    low, high = estimate.interval(Z95)
    return estimate.value, low, high


def one_stream(
    prepared: Prepared,
    rate: float,
    rep: int,
    k: int,
    traces: int,
    seed: int,
    rng: np.random.Generator,
) -> tuple[float, dict[str, Interval | None], Split]:
    """bench/estimates.py's repetition `rep` (the same draws from `rng`), every row."""
    cases, fold = prepared.cases, rep % k
    signals = {i: features(cases[i], fold) for i in prepared.usable}
    train = prepared.stream(
        prepared.members(fold, False), rate, WARM_UP, rng, f"train-{rate}-{rep}"
    )
    calibrations = calibrate(train, cases, fold)
    test = prepared.stream(prepared.members(fold, True), rate, traces, rng, f"test-{rate}-{rep}")
    chosen = select(test, cases, fold)
    now = frozen_predictions(test, cases, fold, calibrations)

    def ppi(predictions: Sequence[float]) -> Interval | None:
        return estimate_stream(test, chosen, predictions).estimates["prediction-powered"]

    baseline = estimate_stream(test, chosen, now).estimates
    rows: dict[str, Interval | None] = {"uniform-only": baseline["uniform-only"], NOW: ppi(now)}
    labels = training_labels(train, select(train, cases, fold), signals)
    for candidate in CANDIDATES:
        rows[candidate.name] = ppi(cross_fitted(candidate, labels, test, signals))
    rows[PPI_PP] = _interval(power_tuned(test, chosen, now))
    bins = [(cases[i].language, min(9, int(cases[i].support[fold] * 10))) for i in test.cases]
    rows[BOUNDS[0]] = ppi(own_rates(test, bins))
    rows[BOUNDS[1]] = ppi(own_rates(test, test.cases))
    own = np.random.default_rng(
        [seed, int(rate * 1e6), rep, 1]
    )  # leaves `rng`'s draws as they were
    same = prepared.stream(prepared.members(fold, True), rate, WARM_UP, own, f"same-{rate}-{rep}")
    rows[BOUNDS[2]] = ppi(frozen_predictions(test, cases, fold, calibrate(same, cases, fold)))
    priority = np.asarray([cases[i].priority[fold] is not None for i in test.cases])
    return float(test.unfaithful.mean()), rows, split(test, chosen, now, priority)


def _ratio(estimate: Interval | None, uniform: Interval | None) -> float:
    if estimate is None or uniform is None or uniform[2] <= uniform[1]:
        return math.nan
    return (estimate[2] - estimate[1]) / (uniform[2] - uniform[1])


def report(
    rate: float,
    judge_error: float,
    repetitions: list[tuple[float, dict[str, Interval | None], Split]],
) -> None:
    outcomes = [(truth, rows) for truth, rows, _ in repetitions]
    print()
    print(f"true unfaithful rate {rate:.0%}: {len(outcomes)} streams")
    print(f"{'row':<31} {'bias':>8} {'coverage':>9} {'width':>7} {'/ uniform':>9} {'vs now':>16}")
    ratios = {
        row: np.asarray([_ratio(rows[row], rows["uniform-only"]) for _, rows in outcomes])
        for row in ROWS
    }
    for row in ROWS:
        s = stats([(truth, rows[row]) for truth, rows in outcomes])
        uniform_width = stats([(t, r["uniform-only"]) for t, r in outcomes]).width
        paired = ratios[row] - ratios[NOW]
        paired = paired[~np.isnan(paired)]
        error = paired.std(ddof=1) / math.sqrt(paired.size) if paired.size > 1 else 0.0
        versus = f"{paired.mean():+.4f} ± {error:.4f}" if row != NOW else "0"
        missing = f"  ({s.missing} without)" if s.missing else ""
        print(
            f"{row:<31} {s.bias:>+8.4f} {s.coverage:>9.1%} {s.width:>7.4f} "
            f"{s.width / uniform_width:>9.3f} {versus:>16}{missing}"
        )
    splits = [parts for _, _, parts in repetitions]

    def mean(field: str) -> float:
        return float(np.mean([getattr(parts, field) for parts in splits]))

    y, floor = mean("unfaithful"), judge_error * (1.0 - judge_error)
    print(
        f"now: {mean('variance_share'):.0%} of the variance from the {mean('share'):.0%} of "
        f"the traffic no priority reaches, where y = {y:.4f} and mean (y - f)^2 = "
        f"{mean('residual'):.4f} against y(1 - y) = {y * (1.0 - y):.4f} (a constant) and "
        f"{floor:.4f} (the judge's own errors alone)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--reps", type=int, default=100, help="streams per rate")
    parser.add_argument("--traces", type=int, default=20_000, help="traces per stream")
    parser.add_argument("--judge-error", type=float, default=0.05)
    parser.add_argument("--rates", default="0.02,0.05,0.1", help="true unfaithful rates")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    prepared = prepare(args.data, args.folds, args.seed, args.judge_error)
    print(
        f"prediction-powered estimates of the share of unfaithful answers with other tier-0 "
        f"predictors: bench/estimates.py's streams (seed {args.seed}, {args.traces} traces, "
        f"judge error {args.judge_error}, {args.folds} folds by source)"
    )
    print("bias = mean(estimate - truth); coverage of the 95% interval; width = mean interval;")
    print("/ uniform = width / uniform-only's; vs now = mean paired difference of that ratio")
    for rate in (float(r) for r in args.rates.split(",")):
        rng = np.random.default_rng([args.seed, int(rate * 1e6)])
        repetitions = [
            one_stream(prepared, rate, rep, args.folds, args.traces, args.seed, rng)
            for rep in range(args.reps)
        ]
        report(rate, args.judge_error, repetitions)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
