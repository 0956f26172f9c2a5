"""Each agent's traffic an hour, as the sampler's floor of drawn traces reads it."""

from __future__ import annotations

import pytest

from monitor.evaluators.agent_traffic import AgentTraffic


def test_steady_traffic_reads_as_its_rate_once_an_hour_is_known() -> None:
    traffic = AgentTraffic(max_agents=10)
    readings = []
    for second in range(0, 2 * 3600, 12):  # 300 traces an hour
        readings.append(traffic.count("a", second + 0.5))
    assert readings[3600 // 12 :] == pytest.approx([300.0] * (3600 // 12), rel=1e-3)


def test_a_burst_after_an_idle_hour_is_followed_within_the_minute() -> None:
    """The completed minutes of the last hour hold nothing; the burst's own count, scaled to an
    hour, is the reading: the k-th trace of the minute reads k * 60 an hour."""
    traffic = AgentTraffic(max_agents=10)
    for second in range(0, 600, 60):
        traffic.count("a", second + 1.0)
    burst = [traffic.count("a", 7200.0 + k * 0.01) for k in range(1, 501)]
    assert burst == pytest.approx([k * 60.0 for k in range(1, 501)])


def test_agents_past_the_bound_are_not_tracked() -> None:
    traffic = AgentTraffic(max_agents=2)
    assert traffic.count("a", 1.0) == 60.0
    assert traffic.count("b", 1.0) == 60.0
    assert traffic.count("c", 1.0) is None
    assert traffic.count("a", 2.0) == 120.0


def test_scaled_counts_read_as_that_share_of_the_traffic_and_keep_counting() -> None:
    """Halved at a rebalance, an hour of 600 traces reads 300 an hour at once, and traffic that
    then comes at 300 an hour keeps reading 300 as the old minutes age out."""
    traffic = AgentTraffic(max_agents=10)
    for second in range(0, 3600 + 60, 6):  # 600 an hour, past one whole hour
        traffic.count("a", second + 0.5)
    traffic.scale(0.5)
    readings = [traffic.count("a", 3660 + second + 0.5) for second in range(0, 3600, 12)]
    assert readings == pytest.approx([300.0] * len(readings), rel=1e-3)
