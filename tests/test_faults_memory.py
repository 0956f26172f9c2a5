"""State that lives as long as the daemon must stay bounded, whoever scrapes /metrics and when.

Found with the soak (bench/soak.py): resident memory climbs while traffic flows. Two kinds of
per-trace state are kept in memory: the judge cache (bounded by judge.cache_max_entries) and the
per-replica rolling means behind ragmon_evaluation_score_mean_ratio. Before commit 4596d8c the
rolling means kept every score (about 87 bytes each) and dropped old ones only when /metrics was
collected, so a daemon nobody scraped grew by ~80 MB an hour at 50 traces/s; they are now
one-second buckets, bounded by the window whoever scrapes.
"""

from __future__ import annotations

import tracemalloc

from monitor.evaluators.judge_cache import TTLCache
from monitor.sinks.scoring_metrics import RollingMeans

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
    # The old implementation kept +4.8 MB here; allow allocator noise of a few kB.
    bound = max(0.2 * window_full, 64 * 1024)
    assert nine_windows_later < bound, "memory grows with time, not with the window"


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
