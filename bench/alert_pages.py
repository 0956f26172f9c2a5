"""How often do the judge-based estimate alerts page when nothing is wrong? And when it is?

    python bench/alert_pages.py [--reps 40] [--truths 0.7,0.75,0.8,0.85,0.9]
                                [--traffic 500,1000,10000] [--hours 9] [--judge-error 0.05]
                                [--threshold 0.8] [--folds 5] [--seed 0]

``RagmonFaithfulnessLow`` (helm/rag-monitor/templates/_rules.tpl) is true when the
prediction-powered estimate's 95% upper bound of the mean faithfulness is below the threshold
over 1 h and over 6 h, with at least ``alerts.quality.minSamples`` (20) judged traces of the
uniform draw in the hour; it pages after that has held for ``for: 15m``. With the simulated
judge's 0/1 verdicts the mean faithfulness is 1 - the unfaithful share, so the condition is
exactly ``RagmonUnfaithfulShareHigh``'s (lower bound above maxShare 0.2) too.

The streams, folds, simulated judge, real tier 0 held out by source, real ``Sampler`` and the
frozen tier-0 calibration are those of ``bench/estimates.py``; here a stream is ``--hours`` of
traffic at a given rate (traces per hour), its conversations' turns a minute apart, and the
service's true judge-grade mean faithfulness is fixed (the human unfaithful rate is set so that
the judge, wrong with probability ``--judge-error``, grades that mean). The daemon's counters
are replayed as it keeps them (monitor.estimates.recorder: a conversation's sums grow by
what each trace adds) and read every 5 minutes; a window's terms are the difference of two
readings (what ``increase`` gives), its estimate monitor.estimates.estimator's
``prediction_powered``. From 6 h on, at every reading:

- ``cond``: the share of readings where the rule's condition is true;
- ``page``: where it has also been true at the three readings before (15 minutes);
- ``pages/day``: how many times a day it starts paging while watched (a ``page`` reading after
  one that is not; a page already on when the watch begins is not counted, so for a bad
  service, paging throughout, ``page`` is the figure to read).

Each figure with its standard error over the streams (readings of one stream are correlated).
The rules' z = 1.96 (``now``) is compared with candidate fixes that PromQL can compute from
the same counters, and with the 6 h window left out:

- ``1 h alone``: the 1 h upper bound below the threshold, with the guard (what the 6 h window
  adds);
- ``t(k-1)``: the 97.5% quantile of Student's t with the draw's conversations in the window
  less one as degrees of freedom (the Cornish-Fisher expansion 1.96 + 2.372/d + 2.821/d^2,
  within 0.025 of the exact quantile for d >= 5, 0.12 under it at d = 3), instead of 1.96;
- ``k >= 20``: 1.96, and at least 20 conversations of the uniform draw in the hour (the
  ``clusters`` term) instead of 20 traces.
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
    Prepared,
    calibrate,
    frozen_predictions,
    prepare,
    select,
)
from monitor.config.scoring import SamplingConfig  # noqa: E402
from monitor.estimates.calibration import Calibrations  # noqa: E402
from monitor.estimates.estimator import (  # noqa: E402
    TERMS,
    Z95,
    Observation,
    Terms,
    prediction_powered,
    terms_of,
)

READING_MINUTES = 5
PER_HOUR = 60 // READING_MINUTES
FOR_READINGS = 15 // READING_MINUTES  # readings before the current one the condition must hold
MIN_SAMPLES = 20  # alerts.quality.minSamples
_INDEX = {term: i for i, term in enumerate(TERMS)}


def t_quantile(dof: float) -> float:
    """Student's t 97.5% quantile (Cornish-Fisher in 1/dof): what PromQL could compute."""
    if dof < 1.0:
        return math.inf
    return Z95 + 2.372 / dof + 2.821 / (dof * dof)


@dataclass(frozen=True, slots=True)
class Window:
    drawn: Terms  # the uniform draw's terms, with the traffic's
    judged: Terms  # every judged trace's, weighted by its inverse chance


Rule = Callable[[Window, Window], bool]  # (1 h, 6 h) -> condition true


def upper(window: Window, z: Callable[[Window], float]) -> float | None:
    estimate = prediction_powered(window.drawn, window.judged)
    if estimate is None:
        return None
    return min(1.0, estimate.value + z(window) * estimate.stderr)


def rule(
    threshold: float,
    z: Callable[[Window], float],
    by_conversations: bool = False,
    six_hours: bool = True,
) -> Rule:
    def holds(hour: Window, six: Window) -> bool:
        guard = hour.drawn.clusters if by_conversations else hour.drawn.judged
        if guard < MIN_SAMPLES:
            return False
        bounds = (upper(hour, z), upper(six, z)) if six_hours else (upper(hour, z),)
        return all(b is not None and b < threshold for b in bounds)

    return holds


def rules(threshold: float) -> dict[str, Rule]:
    return {
        "now": rule(threshold, lambda w: Z95),
        "1 h alone": rule(threshold, lambda w: Z95, six_hours=False),
        "t(k-1)": rule(threshold, lambda w: t_quantile(w.drawn.clusters - 1.0)),
        "k >= 20": rule(threshold, lambda w: Z95, by_conversations=True),
    }


def readings(observations: Sequence[tuple[int, Observation]], buckets: int) -> np.ndarray:
    """The counters of one sample at the end of every bucket, as the recorder keeps them:
    (bucket, judged trace) in time order -> array [bucket, term] of cumulative sums."""
    steps = np.zeros((buckets, len(TERMS)))
    totals: dict[str, tuple[float, float, float]] = {}
    for bucket, o in observations:
        m0, y0, f0 = totals.get(o.cluster, (0.0, 0.0, 0.0))
        dm, dy, df = o.weight, o.weight * o.judge, o.weight * o.prediction
        row = steps[bucket]
        row[_INDEX["judged"]] += 1.0
        row[_INDEX["clusters"]] += 1.0 if m0 == 0.0 else 0.0
        row[_INDEX["m"]] += dm
        row[_INDEX["y"]] += dy
        row[_INDEX["f"]] += df
        row[_INDEX["mm"]] += 2.0 * m0 * dm + dm * dm
        row[_INDEX["yy"]] += 2.0 * y0 * dy + dy * dy
        row[_INDEX["ff"]] += 2.0 * f0 * df + df * df
        row[_INDEX["ym"]] += y0 * dm + dy * m0 + dy * dm
        row[_INDEX["fm"]] += f0 * dm + df * m0 + df * dm
        row[_INDEX["yf"]] += y0 * df + dy * f0 + dy * df
        totals[o.cluster] = (m0 + dm, y0 + dy, f0 + df)
    return np.cumsum(steps, axis=0)


@dataclass(frozen=True, slots=True)
class StreamResult:
    condition: dict[str, float]  # rule -> share of readings
    paging: dict[str, float]
    pages_per_day: dict[str, float]
    drawn_per_hour: float
    conversations_per_hour: float
    readings: int
    guarded: int  # 1 h readings with enough drawn: how their 95% interval misses the truth
    truth_above: int  # upper bound < truth
    truth_below: int  # lower bound > truth


def replay(
    prepared: Prepared,
    calibrations: Calibrations,
    fold: int,
    truth: float,
    human_rate: float,
    per_hour: int,
    hours: int,
    rng: np.random.Generator,
    tag: str,
    conditions: dict[str, Rule],
    sampling: SamplingConfig,
) -> StreamResult:
    cases = prepared.cases
    traces = per_hour * hours
    stream = prepared.stream(
        prepared.members(fold, held_out=True), human_rate, traces, rng, tag, per_hour / 60.0
    )
    chosen = select(stream, cases, fold, sampling, 3600.0 / per_hour)
    below = frozen_predictions(stream, cases, fold, calibrations)
    mean_prediction = [1.0 - b for b in below]  # 0/1 verdicts: the mean is 1 - the share below
    faithful = 1.0 - stream.unfaithful
    bucket_of = (np.arange(traces) * PER_HOUR) // per_hour
    buckets = hours * PER_HOUR
    rows = list(
        zip(bucket_of, chosen, faithful, mean_prediction, stream.conversations, strict=True)
    )
    drawn = [
        (int(b), Observation(conv, 1.0 / c.rate, float(y), f))
        for b, c, y, f, conv in rows
        if c.uniform
    ]
    judged = [
        (int(b), Observation(conv, 1.0 / c.judged_probability, float(y), f))
        for b, c, y, f, conv in rows
        if c.judged
    ]
    drawn_counters = readings(drawn, buckets)
    judged_counters = readings(judged, buckets)
    drawn_counters[:, _INDEX["traces"]] = np.cumsum(np.bincount(bucket_of, minlength=buckets))
    drawn_counters[:, _INDEX["predicted"]] = np.cumsum(
        np.bincount(bucket_of, weights=mean_prediction, minlength=buckets)
    )
    _check(drawn_counters[-1], drawn, mean_prediction)

    def window(end: int, length: int) -> Window:
        start = end - length
        d, j = drawn_counters[end], judged_counters[end]
        if start >= 0:
            d, j = d - drawn_counters[start], j - judged_counters[start]
        return Window(Terms(*map(float, d)), Terms(*map(float, j)))

    first = 6 * PER_HOUR - 1  # the first reading with 6 hours behind it
    ends = range(first, buckets)
    hourly = [window(end, PER_HOUR) for end in ends]
    six = [window(end, 6 * PER_HOUR) for end in ends]
    condition, paging, pages = {}, {}, {}
    for name, holds in conditions.items():
        true = np.asarray([holds(h, s) for h, s in zip(hourly, six, strict=True)])
        held = np.asarray(  # from the first reading with 15 minutes of readings behind it
            [bool(true[i - FOR_READINGS : i + 1].all()) for i in range(FOR_READINGS, true.size)]
        )
        starts = int(np.sum(held[1:] & ~held[:-1]))  # pages that begin while watched
        condition[name] = float(true.mean())
        paging[name] = float(held.mean())
        pages[name] = starts / ((held.size - 1) / PER_HOUR) * 24.0
    intervals = [
        estimate.interval()
        for h in hourly
        if h.drawn.judged >= MIN_SAMPLES
        and (estimate := prediction_powered(h.drawn, h.judged)) is not None
    ]
    return StreamResult(
        condition,
        paging,
        pages,
        drawn_per_hour=float(np.mean([h.drawn.judged for h in hourly])),
        conversations_per_hour=float(np.mean([h.drawn.clusters for h in hourly])),
        readings=len(hourly),
        guarded=len(intervals),
        truth_above=sum(high < truth for _, high in intervals),
        truth_below=sum(low > truth for low, _ in intervals),
    )


def _check(
    last: np.ndarray, drawn: list[tuple[int, Observation]], predictions: list[float]
) -> None:
    """The replayed counters over the whole stream are the sample's terms (their definition)."""
    whole = terms_of([o for _, o in drawn], predictions)
    expected = np.asarray([getattr(whole, term) for term in TERMS])
    if not np.allclose(last, expected, rtol=1e-9, atol=1e-6):
        raise AssertionError(f"counters {last} differ from terms {expected}")


def human_rate_for(truth: float, judge_error: float) -> float:
    """The human unfaithful rate whose judge-graded mean faithfulness is `truth`."""
    unfaithful = 1.0 - truth
    rate = (unfaithful - judge_error) / (1.0 - 2.0 * judge_error)
    if not 0.0 < rate < 1.0:
        raise SystemExit(f"truth {truth} is out of reach with judge error {judge_error}")
    return rate


@dataclass
class Row:
    truth: float
    per_hour: int
    streams: list[StreamResult]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values)
    se = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else float("nan")
    return float(a.mean()), se


def run(args: argparse.Namespace) -> list[Row]:
    prepared = prepare(args.data, args.folds, args.seed, args.judge_error)
    conditions = rules(args.threshold)
    sampling = SamplingConfig(min_drawn_per_hour=args.min_drawn_per_hour)
    out = []
    for truth in args.truths:
        rate = human_rate_for(truth, args.judge_error)
        rng = np.random.default_rng([args.seed, int(truth * 1e6)])
        calibrations = {}
        for fold in range(args.folds):  # a daemon that has run a while at this quality
            train = prepared.members(fold, held_out=False)
            stream = prepared.stream(train, rate, WARM_UP, rng, f"train-{truth}-{fold}")
            calibrations[fold] = calibrate(stream, prepared.cases, fold)
        for per_hour in args.traffic:
            streams = [
                replay(
                    prepared,
                    calibrations[rep % args.folds],
                    rep % args.folds,
                    truth,
                    rate,
                    per_hour,
                    args.hours,
                    rng,
                    f"test-{truth}-{per_hour}-{rep}",
                    conditions,
                    sampling,
                )
                for rep in range(args.reps)
            ]
            out.append(Row(truth, per_hour, streams))
            print_row(out[-1], list(conditions), flush=True)
    return out


def print_header(args: argparse.Namespace, names: list[str]) -> None:
    print(
        f"RagmonFaithfulnessLow (upper bound < {args.threshold} over 1 h and 6 h, >= "
        f"{MIN_SAMPLES} drawn in the hour) on {args.reps} streams of {args.hours} h per row, "
        f"read every {READING_MINUTES} min from 6 h on; judge error {args.judge_error}; "
        f"default sampling (5% uniform draw of conversations, priorities capped)"
        + (
            f", a floor of {args.min_drawn_per_hour} drawn traces an hour"
            if args.min_drawn_per_hour
            else ""
        )
    )
    print("per rule: cond % / page % (held 15 min) / pages per day, each +- s.e. over streams")
    print(
        "last: the share of 1 h readings with >= 20 drawn, and of those, where the 95% interval"
        " misses the truth: upper bound below it, lower bound above it"
    )
    cells = "".join(f" | {name:^36}" for name in names)
    print(f"{'truth':>5} {'traces/h':>8} {'drawn/h':>7} {'conv/h':>6}{cells} | 1 h interval")


def print_row(row: Row, names: list[str], flush: bool = False) -> None:
    drawn = np.mean([s.drawn_per_hour for s in row.streams])
    conversations = np.mean([s.conversations_per_hour for s in row.streams])
    cells = ""
    for name in names:
        c, c_se = mean_se([s.condition[name] for s in row.streams])
        p, p_se = mean_se([s.paging[name] for s in row.streams])
        d, d_se = mean_se([s.pages_per_day[name] for s in row.streams])
        cells += f" | {c:5.1%}±{c_se:5.2%} {p:5.1%}±{p_se:5.2%} {d:4.2f}±{d_se:4.2f}"
    guarded = sum(s.guarded for s in row.streams)
    above = sum(s.truth_above for s in row.streams) / guarded if guarded else math.nan
    below = sum(s.truth_below for s in row.streams) / guarded if guarded else math.nan
    print(
        f"{row.truth:>5.2f} {row.per_hour:>8} {drawn:>7.1f} {conversations:>6.1f}{cells}"
        f" | {guarded / sum(s.readings for s in row.streams):4.0%} {above:5.1%} {below:5.1%}",
        flush=flush,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--reps", type=int, default=40, help="streams per row")
    parser.add_argument(
        "--truths",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.7, 0.75, 0.8, 0.85, 0.9],
        help="true judge-grade mean faithfulness",
    )
    parser.add_argument(
        "--traffic",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[500, 1000, 10000],
        help="traces per hour",
    )
    parser.add_argument("--hours", type=int, default=9, help="hours per stream (>= 7)")
    parser.add_argument("--judge-error", type=float, default=0.05)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--min-drawn-per-hour",
        type=int,
        default=None,
        help="sampling.min_drawn_per_hour: a quiet agent's rate raised to draw this many",
    )
    args = parser.parse_args(argv)
    if args.hours < 7:
        parser.error("--hours must leave readings after the first 6 hours")
    started = time.perf_counter()
    print_header(args, list(rules(args.threshold)))
    run(args)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
