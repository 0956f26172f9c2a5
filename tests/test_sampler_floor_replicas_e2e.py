"""`sampling.min_drawn_per_hour` is the deployment's floor: two replicas in one consumer group
draw about the floor together, not each, and a replica that joins mid-stream leaves the first
drawing its share of it. Real broker, real stores, scripted judge, two daemons in process.

A quiet agent's 300 conversations are keyed over a native topic of three partitions, so one
replica holds two partitions (a share of 2/3) and the other one (1/3); each replica asks for
the floor times its share. The traffic comes in two "minutes" of the samplers' clock, which the test
moves (a fake clock, so the test need not last an hour; everything else is real): minute 0
carries the first turn of every conversation, minute 1 the second. In minute 1 a replica that
counted minute 0's traffic of its partitions (c traces, 60c an hour) and sees no more than that
draws every trace at exactly floor x share / 60c.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.sampler import Sampler, unit_hash
from monitor.models import EvaluationResult
from monitor.sinks.store import Store
from tests.support.clock import Clock
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.openai_server import OpenAIServer
from tests.support.traces import RunningDaemon, produce_traces, scoring_settings, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

AGENT = "quiet"
CONVERSATIONS = 300
PARTITIONS = 3
FLOOR = 2400  # drawn traces an hour for the deployment: 40 for a minute's traffic
RATE = 0.02
PRIORITIES_OFF = {
    "priority_faithfulness_below": 0.0,
    "priority_feedback_at_or_below": None,
    "priority_no_contexts": False,
}


def turn(n: int, number: int) -> dict[str, Any]:
    return {
        "trace_id": f"{AGENT}-{n:04d}-{number}",
        "timestamp": f"2026-11-01T12:{number:02d}:{n % 60:02d}+00:00",
        "agent": AGENT,
        "conversation_id": f"{AGENT}-conv-{n:04d}",
        "turn": number,
        "query": f"When does branch {n} open?",
        "contexts": [
            {"id": f"doc-{n}", "text": f"Branch {n} opens at 9:00 on weekdays.", "rank": 1}
        ],
        "answer": f"Branch {n} opens at 9:00 on weekdays.",
    }


FIRST = [turn(n, 1) for n in range(CONVERSATIONS)]
SECOND = [turn(n, 2) for n in range(CONVERSATIONS)]
CONVERSATION = {t["trace_id"]: t["conversation_id"] for t in FIRST + SECOND}
MINUTE_1 = {t["trace_id"] for t in SECOND}


def floor_rate(share: float, per_hour: float) -> float:
    """The rate a replica with `share` of the input and `per_hour` traces of the agent takes."""
    return max(RATE, min(1.0, FLOOR * share / per_hour))


def replica(bootstrap: str, topic_prefix: str, db: Path, judge_url: str) -> Daemon:
    return Daemon(
        scoring_settings(
            bootstrap,
            topic_prefix,
            db,
            # a judge queue that never fills: its load shedding would lower the rates
            sampling={
                "rate": RATE,
                "min_drawn_per_hour": FLOOR,
                "queue_size": 100_000,
                **PRIORITIES_OFF,
            },
            judge={"base_url": judge_url, "max_retries": 0, "timeout_seconds": 10},
            # native input only: the scoring group reads the input topic alone
            kafka={"format": "native", "session_timeout_ms": 10_000, "heartbeat_interval_ms": 500},
        ),
        SourceSpec("kafka"),
        registry=CollectorRegistry(),
    )


async def samplers_on_a_clock(
    kafka_broker: KafkaBroker, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Clock:
    """The input and dead-letter topics created, and the clock every daemon's sampler reads."""
    clock = Clock(0.0)
    monkeypatch.setattr("monitor.daemon.Sampler", functools.partial(Sampler, clock=clock))
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in"], partitions=PARTITIONS)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    return clock


def value(daemon: Daemon, name: str, **labels: str) -> float:
    return daemon.metrics.registry.get_sample_value(name, labels) or 0.0


def share(daemon: Daemon) -> float:
    return value(daemon, "ragmon_sampler_input_share_ratio")


def holding_every_partition(daemons: list[Daemon]) -> bool:
    assigned = [value(d, "ragmon_kafka_assigned_partitions") for d in daemons]
    return all(assigned) and sum(assigned) == PARTITIONS


def all_done(daemons: list[Daemon], sent: int) -> bool:
    """Every trace sent scored, and every drawn one judged."""
    processed = judged = drawn = 0.0
    for d in daemons:
        processed += value(d, "ragmon_traces_processed_total", agent=AGENT, outcome="ok")
        drawn += value(d, "ragmon_sampler_decisions_total", agent=AGENT, outcome="sampled")
        judged += sum(
            value(d, "ragmon_evaluations_total", agent=AGENT, evaluator="llm", outcome=o)
            for o in ("ok", "partial", "error")
        )
    return processed == sent and judged == drawn


async def consumed_and_judged(
    dbs: Iterable[Path],
) -> tuple[list[set[str]], list[dict[str, EvaluationResult]]]:
    """Per replica, from its own store: the traces it scored, and its judge results."""
    consumed: list[set[str]] = []
    judged: list[dict[str, EvaluationResult]] = []
    for db in dbs:
        store = await Store.open(f"sqlite+aiosqlite:///{db}")
        try:
            mine, results = set(), {}
            for t in FIRST + SECOND:
                if await store.get_result(t["trace_id"], HeuristicEvaluator.name) is not None:
                    mine.add(t["trace_id"])
                if (result := await store.get_result(t["trace_id"], "llm")) is not None:
                    results[t["trace_id"]] = result
            consumed.append(mine)
            judged.append(results)
        finally:
            await store.close()
    assert consumed[0].isdisjoint(consumed[1])
    assert len(consumed[0] | consumed[1]) == len(FIRST) + len(SECOND)
    return consumed, judged


def assert_drawn_by_hash_at_recorded_rates(
    results: dict[str, EvaluationResult], minute_1: set[str], rates: list[float]
) -> None:
    """Each judged trace is of the uniform draw, its conversation's hash under the rate it
    records, which is one of `rates`; every minute-1 trace whose hash is under the least of
    them was judged, and none whose hash is at or over the greatest."""
    for trace_id, result in results.items():
        selection = result.selection
        assert selection is not None and selection.uniform
        assert unit_hash(CONVERSATION[trace_id]) < selection.inclusion_probability
        if trace_id in minute_1:
            assert any(selection.inclusion_probability == pytest.approx(r) for r in rates)
    hashes = {t: unit_hash(CONVERSATION[t]) for t in minute_1}
    assert {t for t, h in hashes.items() if h < min(rates)} <= set(results)
    assert not {t for t, h in hashes.items() if h >= max(rates)} & set(results)


async def test_two_replicas_draw_the_floor_together_not_each(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both replicas hold their partitions from the start. In minute 1 each draws at exactly
    floor x share / its traffic an hour, and the two draw about floor / 60 second turns together
    (floor traces an hour, for a minute's traffic), where a floor per replica draws about twice
    that."""
    clock = await samplers_on_a_clock(kafka_broker, topic_prefix, monkeypatch)
    dbs = [tmp_path / "a.db", tmp_path / "b.db"]
    async with OpenAIServer() as judge:
        daemons = [replica(kafka_broker.bootstrap, topic_prefix, db, judge.url) for db in dbs]
        running = [RunningDaemon(daemon) for daemon in daemons]
        for r in running:
            await r.started()
        await wait_for(
            lambda: holding_every_partition(daemons), 60, "both replicas holding partitions", 0.2
        )
        assert sorted(share(d) for d in daemons) == pytest.approx([1 / 3, 2 / 3])

        await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", FIRST)
        await wait_for(lambda: all_done(daemons, len(FIRST)), 240, "minute 0 judged", 0.2)
        clock.now = 60.0  # minute 1: each replica knows its traffic of minute 0
        await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", SECOND)
        await wait_for(lambda: all_done(daemons, 2 * CONVERSATIONS), 240, "minute 1 too", 0.2)
        final_shares = [share(d) for d in daemons]
        final_rates = [
            value(d, "ragmon_sampler_effective_rate_ratio", agent=AGENT) for d in daemons
        ]
        assert [share(d) for d in daemons] == final_shares, "a rebalance during the run"
        for r in running:
            assert await r.stop() == 0

    consumed, judged = await consumed_and_judged(dbs)
    drawn_together = 0
    variance = 0.0
    for s, mine, results, gauge in zip(final_shares, consumed, judged, final_rates, strict=True):
        counted = len(mine - MINUTE_1)  # minute 0's traffic here: 60 x that an hour
        assert len(mine & MINUTE_1) == counted  # the second turns came where the first did
        # minute 0: the k-th trace counted here was drawn at floor x share / 60k (the minute so
        # far, scaled to an hour); minute 1: every trace at floor x share / this replica's
        # traffic an hour (60 x its minute 0), its count of minute 1 never more
        minute_0_rates = [floor_rate(s, 60.0 * k) for k in range(1, counted + 1)]
        rate = floor_rate(s, 60.0 * counted)
        assert RATE < rate < 1.0
        assert gauge == pytest.approx(rate)
        assert_drawn_by_hash_at_recorded_rates(
            {t: r for t, r in results.items() if t in MINUTE_1}, mine & MINUTE_1, [rate]
        )
        for trace_id, result in results.items():
            if trace_id not in MINUTE_1:
                assert result.selection is not None
                p = result.selection.inclusion_probability
                assert any(p == pytest.approx(r) for r in minute_0_rates)
        drawn_together += len(mine & MINUTE_1 & set(results))
        variance += counted * rate * (1 - rate)

    # together about the floor for a minute's traffic, floor / 60 = 40 (a floor per replica
    # draws about 80): within three standard deviations of the draw, and clearly below twice it
    target = FLOOR / 60
    assert abs(drawn_together - target) <= 3 * math.sqrt(variance)
    assert drawn_together < 1.5 * target


async def test_a_replica_that_joins_mid_stream_leaves_the_first_at_its_rate(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replica A alone scores minute 0 (all 300 first turns, a share of 1); B joins, and the
    rebalance leaves A a share s of 1/3 or 2/3. A's counted minute is re-read at s (300 s
    traces, as if it had held its new partitions all along), so in minute 1 its k-th trace is
    drawn at floor x s / max(60 x 300 s, 60 k): floor / 18,000 = 0.133 while its minute-1
    traffic is within its share, the rate it had alone. Read as counted (the code before the
    rebalance rescaling), A asked floor x s / 18,000 (0.044 or 0.089) and drew a third or two
    thirds of its share of the floor until the hour's counts aged out.

    B has counted nothing: like a new agent, its first minute reads its traffic so far as the
    hour's (its k-th trace at floor x (1 - s) / 60k, from 1 down), so a joining replica draws
    more than its share in its first minute (the rates it records say so, and the estimates
    weigh them as any other)."""
    clock = await samplers_on_a_clock(kafka_broker, topic_prefix, monkeypatch)
    dbs = [tmp_path / "a.db", tmp_path / "b.db"]
    async with OpenAIServer() as judge:
        first = replica(kafka_broker.bootstrap, topic_prefix, dbs[0], judge.url)
        running = [RunningDaemon(first)]
        await running[0].started()
        await wait_for(lambda: holding_every_partition([first]), 60, "A holding all", 0.2)
        assert share(first) == 1.0
        await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", FIRST)
        await wait_for(lambda: all_done([first], len(FIRST)), 240, "minute 0 judged on A", 0.2)

        second = replica(kafka_broker.bootstrap, topic_prefix, dbs[1], judge.url)
        daemons = [first, second]
        running.append(RunningDaemon(second))
        await running[1].started()
        await wait_for(lambda: holding_every_partition(daemons), 60, "A and B holding", 0.2)
        shares = [share(d) for d in daemons]
        assert sorted(shares) == pytest.approx([1 / 3, 2 / 3])

        clock.now = 60.0
        await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", SECOND)
        await wait_for(lambda: all_done(daemons, 2 * CONVERSATIONS), 240, "minute 1", 0.2)
        assert [share(d) for d in daemons] == shares, "a rebalance during minute 1"
        a_gauge = value(first, "ragmon_sampler_effective_rate_ratio", agent=AGENT)
        for r in running:
            assert await r.stop() == 0

    consumed, judged = await consumed_and_judged(dbs)
    assert consumed[0] >= {t["trace_id"] for t in FIRST}  # minute 0 was A's alone
    s_a, s_b = shares
    a_minute_1 = consumed[0] & MINUTE_1
    b_minute_1 = consumed[1] & MINUTE_1
    # from floor / 18,000, the rate A had alone, down as its minute-1 traffic passes 300 s
    a_rates = [
        floor_rate(s_a, max(60.0 * CONVERSATIONS * s_a, 60.0 * k))
        for k in range(1, len(a_minute_1) + 1)
    ]
    assert a_gauge == pytest.approx(a_rates[-1])
    assert_drawn_by_hash_at_recorded_rates(
        {t: r for t, r in judged[0].items() if t in MINUTE_1}, a_minute_1, a_rates
    )
    a_drawn = len(a_minute_1 & set(judged[0]))
    expected = sum(a_rates)
    assert abs(a_drawn - expected) <= 3 * math.sqrt(sum(r * (1 - r) for r in a_rates))

    b_rates = [floor_rate(s_b, 60.0 * k) for k in range(1, len(b_minute_1) + 1)]
    assert_drawn_by_hash_at_recorded_rates(judged[1], b_minute_1, b_rates)
