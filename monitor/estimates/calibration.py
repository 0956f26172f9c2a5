"""Tier 0 calibrated to the judge, online: what the judge would likely say of a trace it did
not see.

One calibration per (judge metric, answer language), fitted on the last `window` judged traces
of the uniform draw: the tier-0 score that predicts the metric (``support`` for faithfulness,
see monitor.estimates.recorder) is cut into ten equal bins, and a monotone step function is fitted
by pooling adjacent bins that violate the order (isotonic regression, pool-adjacent-violators,
weighted by the labels in each bin): the expected judge score rises with the tier-0 score, the
chance of a judge score below the metric's threshold falls. Until `min_labels` labels are in,
the prediction is a constant (the labels' mean), which makes the prediction-powered estimate the
uniform-only one exactly.

A trace's prediction is made from the labels in before it, and recorded; its own label joins
only after its judge answered. So no label corrects a prediction it was fitted on (cross-fitting
by time), which keeps the prediction-powered estimate unbiased whatever the fit's quality.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from monitor import metrics_catalog as catalog
from monitor.evaluators.language import identify
from monitor.models import Prediction

BINS = 10


def _bin(x: float) -> int:
    return min(BINS - 1, max(0, int(x * BINS)))


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


class Calibration:
    """Expected judge score, and chance below `threshold`, given one tier-0 score."""

    def __init__(self, threshold: float, window: int, min_labels: int) -> None:
        self.threshold = threshold
        self._min_labels = min_labels
        self._labels: deque[tuple[int, float, float]] = deque(maxlen=window)
        self._count = [0] * BINS
        self._sum = [0.0] * BINS
        self._below = [0.0] * BINS
        self._fit: tuple[list[float], list[float]] | None = None
        self.updated_at: float | None = None  # time.monotonic() of the newest label

    @property
    def labels(self) -> int:
        return len(self._labels)

    def add(self, x: float, judge: float, now: float | None = None) -> None:
        """One judged trace: its tier-0 score `x` and the judge's score."""
        if len(self._labels) == self._labels.maxlen:
            old_bin, old_y, old_below = self._labels[0]
            self._count[old_bin] -= 1
            self._sum[old_bin] -= old_y
            self._below[old_bin] -= old_below
        label = (_bin(x), judge, 1.0 if judge < self.threshold else 0.0)
        self._labels.append(label)
        self._count[label[0]] += 1
        self._sum[label[0]] += label[1]
        self._below[label[0]] += label[2]
        self._fit = None
        self.updated_at = time.monotonic() if now is None else now

    def predict(self, x: float) -> Prediction:
        mean, below = self._fitted()
        return Prediction(mean=mean[_bin(x)], below=below[_bin(x)])

    def _fitted(self) -> tuple[list[float], list[float]]:
        if self._fit is None:
            self._fit = self._refit()
        return self._fit

    def _refit(self) -> tuple[list[float], list[float]]:
        n = len(self._labels)
        if n < self._min_labels:
            mean = sum(self._sum) / n if n else 0.0
            below = sum(self._below) / n if n else 0.0
            return [mean] * BINS, [below] * BINS
        filled = [b for b in range(BINS) if self._count[b] > 0]
        weights = [float(self._count[b]) for b in filled]
        means = isotonic([self._sum[b] / self._count[b] for b in filled], weights)
        belows = isotonic(
            [self._below[b] / self._count[b] for b in filled], weights, increasing=False
        )
        return _spread(filled, means), _spread(filled, belows)


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


def answer_language(answer: str) -> str:
    """The calibration's language key: ``en``, ``ja``, ``other`` or ``unknown`` (bounded)."""
    language = identify(answer)
    return language if language in ("en", "ja", "unknown") else "other"


class Calibrations(Collector):
    """Every (metric, language) calibration; exports their sizes and ages (per replica)."""

    def __init__(self, thresholds: dict[str, float], window: int, min_labels: int) -> None:
        self._thresholds = thresholds
        self._window = window
        self._min_labels = min_labels
        self._by_key: dict[tuple[str, str], Calibration] = {}

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
