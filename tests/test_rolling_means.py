"""The per-replica rolling mean gauge: a sliding window in bounded memory."""

from __future__ import annotations

import pytest

from monitor.sinks.scoring_metrics import RollingMeans

KEY = ("agent", "faithfulness", "heuristic")


def test_the_mean_covers_only_the_window() -> None:
    means = RollingMeans(window_seconds=10)
    for i in range(100):  # 0.0 and 1.0 alternating over ten seconds
        means.add(KEY, float(i % 2), now=1000 + i * 0.1)
    assert means.means(now=1009.9)[KEY] == pytest.approx(0.5)
    means.add(KEY, 1.0, now=1015.0)
    # Buckets older than 10 s (seconds 1000-1005) are gone: 1006..1009 hold 20 zeros, 20 ones.
    assert means.means(now=1015.0)[KEY] == pytest.approx(21 / 41)
    assert means.means(now=1030.0) == {}, "nothing left in the window: no sample, not 0"


def test_memory_is_bounded_by_the_window_not_the_traffic() -> None:
    means = RollingMeans(window_seconds=5)
    for i in range(100_000):
        means.add(KEY, 0.5, now=2000 + i * 0.001)  # 100 s of traffic at 1000/s
    assert len(means._buckets[KEY]) <= 6
