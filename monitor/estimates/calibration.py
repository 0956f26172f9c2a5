"""Tier 0 calibrated to the judge, online: what the judge would likely say of a trace it did
not see.

One calibration per (judge metric, answer language), fitted on the last `window` judged traces
of the uniform draw: the tier-0 score that predicts the metric (``support`` for faithfulness,
see monitor.estimates.recorder) is cut into ten equal bins, and a monotone step function is fitted
by pooling adjacent bins that violate the order (isotonic regression, pool-adjacent-violators,
weighted by the labels in each bin): the expected judge score rises with the tier-0 score, the
chance of a judge score below the metric's threshold falls.

The prediction-powered estimate is unbiased only if a trace's prediction does not depend on
whether the draw chose the trace (docs/metrics.md, "Population estimates"). Two things would
make it depend on that, and both are ruled out here:

- *When* the trace is predicted. A judged turn holds its conversation until the judge answers,
  so the turns of drawn conversations are scored later than others, when more labels are in. So
  the fits change only at epoch boundaries (`estimates.calibration_epoch_seconds`), and a trace
  is predicted by the fit of the epoch it was *read* in (monitor.stages.read_time), made of the
  labels that arrived before that epoch began, however late the trace is scored. Until a fit has
  `min_labels` labels the prediction is the constant `UNFITTED`, never the labels' running mean
  (with a constant prediction the prediction-powered estimate is the uniform-only one).
- *Which* labels predict it. A drawn conversation's earlier turns would be labels of the fit that
  predicts its later turns. So conversations are dealt into `FOLDS` folds by a hash of their id
  (independent of the draw's hash), and a trace is predicted by the fit of the other folds'
  labels only (cross-fitting).

What remains is shared load: a drawn conversation's judge calls and unfinished traces slightly
delay other traces' labels and reading; bench/estimates.py measures the design with the
daemon's timing.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from monitor import metrics_catalog as catalog
from monitor.config.scoring import EstimatesConfig
from monitor.evaluators.language import identify
from monitor.evaluators.sampler import unit_hash
from monitor.models import Prediction

BINS = 10
FOLDS = 5
RETAINED_FITS = 32
"""Fits kept per calibration for traces scored epochs after they were read (one per epoch in
which labels arrived). A trace older than all of them takes the oldest kept."""
UNFITTED = Prediction(mean=1.0, below=0.0)
"""The prediction of a fit with fewer than `min_labels` labels: the judge finds nothing wrong.
Any constant makes the prediction-powered estimate the uniform-only one; one near typical
scores keeps the estimate's variance low over windows that mix fitted and unfitted epochs."""

Fit = tuple[Prediction, ...]  # per bin
_Label = tuple[int, int, float, float]  # fold, bin, judge score, 1 if below the threshold


def bin_of(x: float) -> int:
    return min(BINS - 1, max(0, int(x * BINS)))


def fold_of(key: str) -> int:
    """The calibration fold of a conversation (or of a trace without one), by a hash of its id
    that the draw's hash (monitor.evaluators.sampler) does not predict."""
    return min(FOLDS - 1, int(unit_hash(f"calibration fold\x00{key}") * FOLDS))


def isotonic(means: list[float], weights: list[float], increasing: bool = True) -> list[float]:
    """The weighted least-squares monotone fit of `means` (pool adjacent violators)."""
    sign = 1.0 if increasing else -1.0
    blocks: list[list[float]] = []  # [value (signed), weight, members]
    for mean, weight in zip(means, weights, strict=True):
        blocks.append([sign * mean, weight, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            value, w, n = blocks.pop()
            last = blocks[-1]
            total = last[1] + w
            last[0] = (last[0] * last[1] + value * w) / total if total > 0 else last[0]
            last[1] = total
            last[2] += n
    fitted: list[float] = []
    for value, _, n in blocks:
        fitted += [sign * value] * int(n)
    return fitted


class BinSums:
    """Labels per bin of the predictor: how many, their judge scores' sum, how many below."""

    __slots__ = ("below", "count", "total")

    def __init__(self) -> None:
        self.count = [0] * BINS
        self.total = [0.0] * BINS
        self.below = [0.0] * BINS

    def add(self, b: int, judge: float, below: float, sign: int = 1) -> None:
        self.count[b] += sign
        self.total[b] += sign * judge
        self.below[b] += sign * below

    def without(self, other: BinSums) -> BinSums:
        out = BinSums()
        out.count = [a - b for a, b in zip(self.count, other.count, strict=True)]
        out.total = [a - b for a, b in zip(self.total, other.total, strict=True)]
        out.below = [a - b for a, b in zip(self.below, other.below, strict=True)]
        return out

    def fit(self, min_labels: int) -> Fit | None:
        """The isotonic fit of these labels; None with fewer than `min_labels`."""
        n = sum(self.count)
        if n == 0 or n < min_labels:
            return None
        filled = [b for b in range(BINS) if self.count[b] > 0]
        weights = [float(self.count[b]) for b in filled]
        means = isotonic([self.total[b] / self.count[b] for b in filled], weights)
        belows = isotonic(
            [self.below[b] / self.count[b] for b in filled], weights, increasing=False
        )
        return tuple(
            Prediction(mean=m, below=p)
            for m, p in zip(_spread(filled, means), _spread(filled, belows), strict=True)
        )


def _spread(filled: list[int], values: list[float]) -> list[float]:
    """Values of every bin from those of the filled ones: an empty bin takes the value of the
    nearest filled bin below it (above it, before the first)."""
    out: list[float] = []
    at = 0
    for b in range(BINS):
        while at + 1 < len(filled) and filled[at + 1] <= b:
            at += 1
        out.append(values[at])
    return out


class Calibration:
    """Expected judge score, and chance below `threshold`, given one tier-0 score, per epoch
    and fold (see the module's docstring). Epochs are numbered by the caller (whole numbers
    that never go back: monitor.estimates.calibration.Calibrations.epoch_at)."""

    def __init__(self, threshold: float, window: int, min_labels: int, folds: int = FOLDS) -> None:
        self.threshold = threshold
        self._min_labels = min_labels
        self._folds = folds
        self._labels: deque[_Label] = deque(maxlen=window)  # in the fits, oldest first
        self._pending: deque[_Label] = deque(maxlen=window)  # arrived in epoch self._epoch
        self._sums = BinSums()
        self._fold_sums = [BinSums() for _ in range(folds)]
        self._epoch: int | None = None  # the newest epoch seen
        self._fits: deque[tuple[int, tuple[Fit | None, ...]]] = deque(maxlen=RETAINED_FITS)
        self._forgot = False  # fits older than the kept ones were dropped
        self.updated_at: float | None = None  # time.monotonic() of the newest label

    @property
    def labels(self) -> int:
        """Labels the current fits are made of (all folds; those of this epoch not yet)."""
        return len(self._labels)

    def add(
        self, x: float, judge: float, *, fold: int, epoch: int, now: float | None = None
    ) -> None:
        """One judged trace of `fold` whose label arrived in `epoch`: its tier-0 score `x` and
        the judge's score. It joins the fits of the epochs after `epoch`."""
        self._advance(epoch)
        below = 1.0 if judge < self.threshold else 0.0
        self._pending.append((fold % self._folds, bin_of(x), judge, below))
        self.updated_at = time.monotonic() if now is None else now

    def predict(self, x: float, *, fold: int, epoch: int) -> Prediction:
        """The prediction for a trace of `fold` read in `epoch`: from the labels of the other
        folds that arrived before `epoch` began, whenever this is asked."""
        self._advance(epoch)
        fits = self._fits_of(epoch)
        fit = fits[fold % self._folds] if fits is not None else None
        return UNFITTED if fit is None else fit[bin_of(x)]

    def _advance(self, epoch: int) -> None:
        """Into a new epoch: the labels of the last one seen join the fits, fitted once for all.
        The new fits hold from the epoch after that one, even when nothing asked for a
        prediction or brought a label since (a quiet calibration): a trace read then is
        predicted by them, whether it is scored before or after this call."""
        if self._epoch is not None and epoch <= self._epoch:
            return
        if self._pending and self._epoch is not None:  # (a label's add() set the epoch)
            for label in self._pending:
                self._commit(label)
            self._pending.clear()
            self._forgot |= len(self._fits) == self._fits.maxlen
            fits = tuple(self._fit(fold) for fold in range(self._folds))
            self._fits.append((self._epoch + 1, fits))
        self._epoch = epoch

    def _commit(self, label: _Label) -> None:
        if len(self._labels) == self._labels.maxlen:
            fold, b, judge, below = self._labels[0]
            self._sums.add(b, judge, below, -1)
            self._fold_sums[fold].add(b, judge, below, -1)
        self._labels.append(label)
        fold, b, judge, below = label
        self._sums.add(b, judge, below)
        self._fold_sums[fold].add(b, judge, below)

    def _fit(self, fold: int) -> Fit | None:
        others = self._sums.without(self._fold_sums[fold]) if self._folds > 1 else self._sums
        return others.fit(self._min_labels)

    def _fits_of(self, epoch: int) -> tuple[Fit | None, ...] | None:
        for start, fits in reversed(self._fits):
            if start <= epoch:
                return fits
        return self._fits[0][1] if self._forgot else None


def answer_language(answer: str) -> str:
    """The calibration's language key: ``en``, ``ja``, ``other`` or ``unknown`` (bounded)."""
    language = identify(answer)
    return language if language in ("en", "ja", "unknown") else "other"


class Calibrations(Collector):
    """Every (metric, language) calibration, and the epochs they change at; exports their
    sizes and ages (per replica)."""

    def __init__(
        self, thresholds: dict[str, float], window: int, min_labels: int, epoch_seconds: float
    ) -> None:
        self._thresholds = thresholds
        self._window = window
        self._min_labels = min_labels
        self._epoch_seconds = epoch_seconds
        self._by_key: dict[tuple[str, str], Calibration] = {}

    @classmethod
    def from_config(cls, config: EstimatesConfig) -> Calibrations:
        """The calibrations the `estimates` settings describe."""
        return cls(
            config.thresholds,
            config.calibration_window,
            config.calibration_min_labels,
            config.calibration_epoch_seconds,
        )

    def epoch_at(self, monotonic: float) -> int:
        """The epoch of a moment of `time.monotonic()`."""
        return math.floor(monotonic / self._epoch_seconds)

    def get(self, metric: str, language: str) -> Calibration:
        key = (metric, language)
        found = self._by_key.get(key)
        if found is None:
            found = self._by_key[key] = Calibration(
                self._thresholds[metric], self._window, self._min_labels
            )
        return found

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        labels = catalog.ESTIMATE_CALIBRATION_LABELS.family()
        age = catalog.ESTIMATE_CALIBRATION_AGE.family()
        for (metric, language), calibration in sorted(self._by_key.items()):
            labels.add_metric([metric, language], calibration.labels)
            if calibration.updated_at is not None:
                age.add_metric([metric, language], now - calibration.updated_at)
        yield labels
        yield age
