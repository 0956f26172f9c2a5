"""Does the prediction-powered estimate stay unbiased with the daemon's timing?

    python bench/estimates_timing.py [--reps 60] [--rate 0.2] [--latency 10,300,1000]
                                     [--epoch 300] [--traces 3600] [--turn-gap 60]
                                     [--judge-error 0.05] [--folds 5] [--seed 0]

The streams, simulated judge, real tier 0 held out by source and real sampler are those of
``bench/estimates.py``; here the calibration learns online while the stream is scored, from the
stream's own uniform draw as its labels arrive: from nothing (``cold``: the daemon starts with
the stream) or after a full window of labels from a stream of the other folds (``warm``).
Repetition r replays a stream of ``--traces`` traces of fold r mod k, whose conversations' turns
are ``--turn-gap`` traces apart, at the true unfaithful rate ``--rate``.

Time is counted in traces of traffic: trace i is read at time i. A conversation's turns are
scored one at a time, in order; a judged turn (drawn or a priority) holds its conversation
until the judge answers, after a latency drawn uniformly between half and one and a half times
`latency`, and a label of the uniform draw joins the calibration then. So the turns of drawn
conversations are scored later than the others, as in the daemon (monitor.stages.score and
scoring). The judge has no concurrency limit here and reading never waits for capacity: the
shared load those add is what the daemon's design leaves (monitor.estimates.calibration).

Predictors of a trace's judge-grade verdict (the share below the faithfulness threshold), the
rows of the table:

- `ScoringTime`: the daemon before the fix -- the calibration as it is when the trace is
  scored, refitted at every label, the labels' running mean until `min_labels` (0 with none);
- `ReadEpoch`: the daemon now -- fits that change at epoch boundaries (`epoch` traces long), a
  trace predicted by the fit of the epoch it was read in; with ``folds=1`` every label is in
  every fit, so a drawn conversation's earlier turns predict its later ones (the design without
  cross-fitting by conversation, to measure what that leaves).

Per judge latency, start and predictor: the prediction-powered estimate's bias (with its own
standard error over the streams), the coverage of its 95% interval and its mean width; the
uniform-only estimate for reference; and ``vs now``: the mean difference of each estimate from
the daemon's, stream by stream (a bias relative to the daemon's, far more precise than each).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.detect import DEFAULT_DATA  # noqa: E402
from bench.estimates import (  # noqa: E402
    METRIC,
    WARM_UP,
    Case,
    Outcome,
    Prepared,
    Stats,
    Stream,
    draws,
    estimate_stream,
    of,
    prepare,
    select,
    stats,
)
from monitor.config.scoring import EstimatesConfig  # noqa: E402
from monitor.estimates.calibration import (  # noqa: E402
    FOLDS,
    BinSums,
    Calibration,
    bin_of,
    fold_of,
)


@dataclass(frozen=True, slots=True)
class Label:
    """A judged trace of the uniform draw: its tier-0 support, judge score, calibration key."""

    support: float
    judge: float
    language: str
    conversation: str


class Predictor(Protocol):
    def add(self, label: Label, at: float) -> None:
        """`label` arrives at time `at`."""
        ...

    def predict(self, support: float, language: str, conversation: str, read: float) -> float:
        """The chance below the threshold of a trace read at `read`, asked now."""
        ...


class ScoringTime:
    """The calibration before the fix: what is in when asked."""

    def __init__(self, threshold: float, window: int, min_labels: int) -> None:
        self._threshold = threshold
        self._window = window
        self._min_labels = min_labels
        self._labels: dict[str, deque[tuple[int, float, float]]] = {}
        self._sums: dict[str, BinSums] = {}
        self._fits: dict[str, list[float]] = {}

    def add(self, label: Label, at: float) -> None:
        labels = self._labels.setdefault(label.language, deque())
        sums = self._sums.setdefault(label.language, BinSums())
        if len(labels) == self._window:
            sums.add(*labels.popleft(), sign=-1)
        entry = (bin_of(label.support), label.judge, float(label.judge < self._threshold))
        labels.append(entry)
        sums.add(*entry)
        self._fits.pop(label.language, None)

    def predict(self, support: float, language: str, conversation: str, read: float) -> float:
        fit = self._fits.get(language)
        if fit is None:
            fit = self._fits[language] = self._refit(self._sums.get(language, BinSums()))
        return fit[bin_of(support)]

    def _refit(self, sums: BinSums) -> list[float]:
        fitted = sums.fit(self._min_labels)
        if fitted is not None:
            return [p.below for p in fitted]
        n = sum(sums.count)
        return [sum(sums.below) / n if n else 0.0] * len(sums.count)


class ReadEpoch:
    """The calibration now (monitor.estimates.calibration), with epochs of `epoch` traces."""

    def __init__(
        self, threshold: float, window: int, min_labels: int, epoch: float, folds: int = FOLDS
    ) -> None:
        self._args = (threshold, window, min_labels, folds)
        self._epoch = epoch
        self._by_language: dict[str, Calibration] = {}
        self._folds: dict[str, int] = {}

    def _fold(self, conversation: str) -> int:
        found = self._folds.get(conversation)
        if found is None:
            found = self._folds[conversation] = fold_of(conversation)
        return found

    def _calibration(self, language: str) -> Calibration:
        found = self._by_language.get(language)
        if found is None:
            threshold, window, min_labels, folds = self._args
            found = self._by_language[language] = Calibration(threshold, window, min_labels, folds)
        return found

    def add(self, label: Label, at: float) -> None:
        self._calibration(label.language).add(
            label.support,
            label.judge,
            fold=self._fold(label.conversation),
            epoch=math.floor(at / self._epoch),
        )

    def predict(self, support: float, language: str, conversation: str, read: float) -> float:
        epoch = math.floor(read / self._epoch)
        calibration = self._calibration(language)
        return calibration.predict(support, fold=self._fold(conversation), epoch=epoch).below


def schedule(
    conversations: Sequence[str], judged: Sequence[bool], latency: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """When each trace is scored, and when its judge answers (when it is scored, if not
    judged): trace i is read at i and waits for its conversation's earlier turns."""
    waits = rng.uniform(0.5, 1.5, len(conversations)) * latency
    scored = np.empty(len(conversations))
    answered = np.empty(len(conversations))
    free: dict[str, float] = {}
    for i, (conversation, judge) in enumerate(zip(conversations, judged, strict=True)):
        start = max(float(i), free.get(conversation, 0.0))
        scored[i] = start
        answered[i] = start + waits[i] if judge else start
        free[conversation] = answered[i]
    return scored, answered


def replay(
    predictor: Predictor,
    supports: Sequence[float],
    languages: Sequence[str],
    conversations: Sequence[str],
    labels: Sequence[Label | None],
    scored: np.ndarray,
    answered: np.ndarray,
) -> list[float]:
    """Every trace's prediction, asked when it is scored, with the labels (`labels[i]`: trace
    i's, None when the draw did not choose it) joining when the judge answered; a label and a
    prediction at one moment: the label first."""
    events: list[tuple[float, int, int]] = [(float(t), 1, i) for i, t in enumerate(scored)]
    events += [(float(answered[i]), 0, i) for i, label in enumerate(labels) if label is not None]
    events.sort()
    out = [0.0] * len(supports)
    for at, kind, i in events:
        if kind == 0:
            label = labels[i]
            assert label is not None
            predictor.add(label, at)
        else:
            out[i] = predictor.predict(supports[i], languages[i], conversations[i], float(i))
    return out


BEFORE = "at scoring time (before)"
NO_FOLDS = "read epoch, no folds"
NOW = "read epoch + folds (now)"
PREDICTORS = (BEFORE, NO_FOLDS, NOW)
STARTS = ("cold", "warm")


def predictor(kind: str, epoch: float, warm: Sequence[Label | None] = ()) -> Predictor:
    """A calibration of `kind` (PREDICTORS; epochs of `epoch` traces), with the default window
    and minimum, given the `warm` labels before the stream begins."""
    config = EstimatesConfig()
    threshold = config.thresholds[METRIC]
    window, min_labels = config.calibration_window, config.calibration_min_labels
    made: Predictor
    if kind == BEFORE:
        made = ScoringTime(threshold, window, min_labels)
    else:
        made = ReadEpoch(threshold, window, min_labels, epoch, 1 if kind == NO_FOLDS else FOLDS)
    for label in warm:
        if label is not None:
            made.add(label, -1.0)
    return made


def labels_of(stream: Stream, cases: list[Case], fold: int) -> list[Label | None]:
    """Per trace, its label when the uniform draw chose it (the judge's faithfulness, 0 or 1)."""
    return [
        Label(c.support[fold], judge, c.language, conversation) if drawn else None
        for drawn, c, judge, conversation in draws(stream, cases, fold)
    ]


@dataclass(frozen=True)
class Timing:
    """The streams and the daemon's timing, in traces of traffic."""

    latencies: tuple[float, ...]  # the judge's answer time
    epoch: float  # the calibration's epoch
    traces: int  # the stream estimated, from when the daemon starts
    turn_gap: float  # between a conversation's turns


@dataclass
class Summary:
    """At one judge latency: per start, the stats of the uniform-only estimate and of the
    prediction-powered one by each predictor, and their mean difference from the daemon's
    (and its standard error)."""

    latency: float
    reps: int
    rows: dict[str, dict[str, Stats]]
    versus_now: dict[str, dict[str, tuple[float, float]]]


def paired(a: Sequence[Outcome], b: Sequence[Outcome], method: str) -> tuple[float, float]:
    """Mean and standard error of a's `method` estimate minus b's prediction-powered one, over
    the streams both estimate."""
    diffs = np.asarray(
        [
            x[0] - y[0]
            for (_, x), (_, y) in zip(of(a, method), of(b, "prediction-powered"), strict=True)
            if x is not None and y is not None
        ]
    )
    if len(diffs) < 2:
        return float("nan"), float("nan")
    return float(diffs.mean()), float(diffs.std(ddof=1) / math.sqrt(len(diffs)))


def replay_stream(
    prepared: Prepared,
    stream: Stream,
    fold: int,
    timing: Timing,
    warm: Sequence[Label | None],
    rng: np.random.Generator,
) -> dict[tuple[float, str, str], Outcome]:
    """Every (latency, start, predictor)'s estimates of one stream."""
    cases = prepared.cases
    chosen = select(stream, cases, fold)
    labels = labels_of(stream, cases, fold)
    supports = [cases[case].support[fold] for case in stream.cases]
    languages = [cases[case].language for case in stream.cases]
    out = {}
    for latency in timing.latencies:
        judged = [c.judged for c in chosen]
        scored, answered = schedule(stream.conversations, judged, latency, rng)
        for start in STARTS:
            for kind in PREDICTORS:
                made = predictor(kind, timing.epoch, warm if start == "warm" else ())
                predictions = replay(
                    made, supports, languages, stream.conversations, labels, scored, answered
                )
                out[(latency, start, kind)] = estimate_stream(stream, chosen, predictions)
    return out


def run(
    prepared: Prepared, rate: float, reps: int, k: int, seed: int, timing: Timing
) -> list[Summary]:
    rng = np.random.default_rng([seed, int(rate * 1e6)])
    warm: dict[int, list[Label | None]] = {}  # per fold: a daemon's window of labels
    outcomes: dict[tuple[float, str, str], list[Outcome]] = {}
    for rep in range(reps):
        fold = rep % k
        if fold not in warm:
            train = prepared.members(fold, held_out=False)
            warm[fold] = labels_of(
                prepared.stream(train, rate, WARM_UP, rng, f"train-{fold}"), prepared.cases, fold
            )
        test = prepared.members(fold, held_out=True)
        stream = prepared.stream(test, rate, timing.traces, rng, f"t{rep}", timing.turn_gap)
        for key, outcome in replay_stream(prepared, stream, fold, timing, warm[fold], rng).items():
            outcomes.setdefault(key, []).append(outcome)
    summaries = []
    for latency in timing.latencies:
        rows: dict[str, dict[str, Stats]] = {}
        versus: dict[str, dict[str, tuple[float, float]]] = {}
        for start in STARTS:
            now = outcomes[(latency, start, NOW)]
            rows[start] = {"uniform-only": stats(of(now, "uniform-only"))}
            versus[start] = {"uniform-only": paired(now, now, "uniform-only")}
            for kind in PREDICTORS:
                runs = outcomes[(latency, start, kind)]
                rows[start][kind] = stats(of(runs, "prediction-powered"))
                versus[start][kind] = paired(runs, now, "prediction-powered")
        summaries.append(Summary(latency, reps, rows, versus))
    return summaries


def print_report(summaries: list[Summary], rate: float, timing: Timing, seconds: float) -> None:
    print(
        f"Share of unfaithful answers (judge-grade, true rate {rate:.0%}) estimated from streams "
        f"of {timing.traces} traces (turns {timing.turn_gap:.0f} traces apart) with the daemon's "
        f"timing: the calibration learns online on the stream's uniform draw, epochs of "
        f"{timing.epoch:.0f} traces; a judged turn holds its conversation until the judge "
        f"answers (latency in traces of traffic, uniform within +-50%); 'cold': the daemon "
        f"starts with the stream, 'warm': its calibration's window full first."
    )
    print(
        "bias = mean(estimate - truth) +- its standard error; coverage of the 95% interval; "
        "width = mean interval; 'vs now' = mean(estimate - the daemon's estimate) +- its error"
    )
    header = (
        f"{'start':<5} {'estimate':<28} {'bias':>8} {'+-':>7} {'coverage':>9} {'width':>7} "
        f"{'vs now':>8} {'+-':>7}"
    )
    for s in summaries:
        print()
        print(f"judge latency {s.latency:.0f} traces, {s.reps} streams")
        print(header)
        for start, rows in s.rows.items():
            for method, row in rows.items():
                note = f"  ({row.missing} streams without estimate)" if row.missing else ""
                difference, error = s.versus_now[start][method]
                print(
                    f"{start:<5} {method:<28} {row.bias:>+8.4f} {row.bias_error:>7.4f} "
                    f"{row.coverage:>9.1%} {row.width:>7.4f} {difference:>+8.4f} {error:>7.4f}"
                    f"{note}"
                )
    print()
    print(f"({seconds:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--reps", type=int, default=60, help="streams")
    parser.add_argument("--rate", type=float, default=0.2, help="true unfaithful rate")
    parser.add_argument("--latency", default="10,300,1000", help="judge latencies, in traces")
    parser.add_argument("--epoch", type=float, default=300.0, help="calibration epoch, traces")
    parser.add_argument("--traces", type=int, default=3600, help="traces per stream")
    parser.add_argument("--turn-gap", type=float, default=60.0, help="traces between turns")
    parser.add_argument("--judge-error", type=float, default=0.05)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    latencies = tuple(float(x) for x in args.latency.split(","))
    timing = Timing(latencies, args.epoch, args.traces, args.turn_gap)
    prepared = prepare(args.data, args.folds, args.seed, args.judge_error)
    summaries = run(prepared, args.rate, args.reps, args.folds, args.seed, timing)
    print_report(summaries, args.rate, timing, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
