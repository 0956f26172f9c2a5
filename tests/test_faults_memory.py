"""State that lives as long as the daemon must stay bounded, whoever scrapes /metrics and when.

Found by the soak (bench/soak.py): resident memory climbs while traffic flows. Two kinds of
per-trace state are kept in memory: the judge cache (bounded by judge.cache_max_entries, checked
here) and the per-replica rolling means behind ragmon_evaluation_score_mean_ratio, whose old
values are dropped only when /metrics is collected, so a daemon that nobody scrapes keeps every
score it ever computed.
"""

from __future__ import annotations

import tracemalloc

import pytest

from monitor.evaluate.judge_cache import TTLCache
from monitor.export.scoring_metrics import RollingMeans

KEY = ("default", "faithfulness", "heuristic")


def _allocated_while(action: object) -> int:
    """Bytes still allocated (traced) after calling `action`."""
    assert callable(action)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        action()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.xfail(
    strict=True,
    reason="bug: RollingMeans (monitor/export/scoring_metrics.py) drops values older than the "
    "window only in collect(), i.e. when /metrics is scraped; without scrapes it keeps every "
    "score ever observed (about 87 bytes each: ~80 MB an hour at 50 traces/s, tier 0 alone)",
)
def test_rolling_means_stay_bounded_when_nobody_scrapes() -> None:
    means = RollingMeans(window_seconds=60)
    rate = 100  # scores per second
    clock = {"t": 0.0}

    def feed(seconds: int) -> None:
        for _ in range(seconds * rate):
            clock["t"] += 1 / rate
            means.add(KEY, 0.5, now=clock["t"])

    window_full = _allocated_while(lambda: feed(60))
    nine_windows_later = _allocated_while(lambda: feed(540))
    print(
        f"\none window: {window_full / 1e6:.1f} MB; nine more: +{nine_windows_later / 1e6:.1f} MB"
    )
    assert nine_windows_later < 0.2 * window_full, "memory grows with time, not with the window"


def test_rolling_means_stay_bounded_when_scraped() -> None:
    means = RollingMeans(window_seconds=60)
    t = 0.0
    for _ in range(60 * 100):
        t += 0.01
        means.add(KEY, 0.5, now=t)
    list(means.collect())

    def more() -> None:
        nonlocal t
        for second in range(540):
            for _ in range(100):
                t += 0.01
                means.add(KEY, 0.5, now=t)
            if second % 15 == 0:  # a scrape every 15 s, as Prometheus does
                list(means.collect())

    grown = _allocated_while(more)
    assert grown < 2_000_000, f"{grown} bytes kept"


def test_the_judge_cache_holds_at_most_its_configured_entries() -> None:
    cache: TTLCache[str] = TTLCache(ttl_seconds=3600, max_entries=100)
    for n in range(10_000):
        cache.put(f"key-{n}", "x" * 100)
    assert len(cache) == 100
