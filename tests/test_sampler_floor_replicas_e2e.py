"""`sampling.min_drawn_per_hour` is the deployment's floor: two replicas in one consumer group
draw about the floor together, not each. Real broker, real stores, scripted judge, two daemons
in process.

A quiet agent's 300 conversations are keyed over a native topic of three partitions, so one
replica holds two partitions (a share of 2/3) and the other one (1/3); each replica asks for
the floor times its share. The traffic comes in two "minutes" of the samplers' clock, which the test
moves (a fake clock, so the test need not last an hour; everything else is real): minute 0
carries the first turn of every conversation, minute 1 the second. In minute 1 each replica
knows its traffic of the minute before (c traces, 60c an hour) and sees no more than that, so
every trace it counts there is drawn at exactly floor x share / 60c; the two replicas then
draw about floor / 60 second turns together (floor traces an hour, for a minute's traffic),
where a floor per replica draws about twice that.
"""

from __future__ import annotations

import functools
import math
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


def floor_rate(share: float, per_hour: float) -> float:
    """The rate a replica with `share` of the input and `per_hour` traces of the agent takes."""
    return max(RATE, min(1.0, FLOOR * share / per_hour))


async def test_two_replicas_draw_the_floor_together_not_each(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(0.0)
    monkeypatch.setattr("monitor.daemon.Sampler", functools.partial(Sampler, clock=clock))
    first = [turn(n, 1) for n in range(CONVERSATIONS)]
    second = [turn(n, 2) for n in range(CONVERSATIONS)]
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in"], partitions=PARTITIONS)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    dbs = [tmp_path / "a.db", tmp_path / "b.db"]
    async with OpenAIServer() as judge:
        daemons = [
            Daemon(
                scoring_settings(
                    kafka_broker.bootstrap,
                    topic_prefix,
                    db,
                    # a judge queue that never fills: its load shedding would lower the rates
                    sampling={
                        "rate": RATE,
                        "min_drawn_per_hour": FLOOR,
                        "queue_size": 100_000,
                        **PRIORITIES_OFF,
                    },
                    judge={"base_url": judge.url, "max_retries": 0, "timeout_seconds": 10},
                    # native input only: the scoring group reads the input topic alone
                    kafka={
                        "format": "native",
                        "session_timeout_ms": 10_000,
                        "heartbeat_interval_ms": 500,
                    },
                ),
                SourceSpec("kafka"),
                registry=CollectorRegistry(),
            )
            for db in dbs
        ]
        running = [RunningDaemon(daemon) for daemon in daemons]
        for replica in running:
            await replica.started()

        def value(daemon: Daemon, name: str, **labels: str) -> float:
            return daemon.metrics.registry.get_sample_value(name, labels) or 0.0

        def shares() -> list[float]:
            return [value(d, "ragmon_sampler_input_share_ratio") for d in daemons]

        def settled() -> bool:
            assigned = [value(d, "ragmon_kafka_assigned_partitions") for d in daemons]
            return all(assigned) and sum(assigned) == PARTITIONS

        await wait_for(settled, 60, "both replicas holding partitions", 0.2)
        assert sorted(shares()) == pytest.approx([1 / 3, 2 / 3])

        def all_done(sent: int) -> bool:
            processed = judged = drawn = 0.0
            for d in daemons:
                processed += value(d, "ragmon_traces_processed_total", agent=AGENT, outcome="ok")
                drawn += value(d, "ragmon_sampler_decisions_total", agent=AGENT, outcome="sampled")
                judged += sum(
                    value(d, "ragmon_evaluations_total", agent=AGENT, evaluator="llm", outcome=o)
                    for o in ("ok", "partial", "error")
                )
            return processed == sent and judged == drawn

        await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", first)
        await wait_for(lambda: all_done(len(first)), 240, "minute 0 scored and judged", 0.2)
        clock.now = 60.0  # minute 1: each replica knows its traffic of minute 0
        await produce_traces(kafka_broker.bootstrap, f"{topic_prefix}.in", second)
        await wait_for(lambda: all_done(len(first) + len(second)), 240, "minute 1 too", 0.2)
        final_shares = shares()
        final_rates = [
            value(d, "ragmon_sampler_effective_rate_ratio", agent=AGENT) for d in daemons
        ]
        assert shares() == final_shares, "a rebalance during the run"
        for replica in running:
            assert await replica.stop() == 0

    # what each replica consumed and judged: its own store
    consumed: list[set[str]] = []
    judged: list[dict[str, EvaluationResult]] = []
    for db in dbs:
        store = await Store.open(f"sqlite+aiosqlite:///{db}")
        try:
            mine, results = set(), {}
            for t in first + second:
                if await store.get_result(t["trace_id"], HeuristicEvaluator.name) is not None:
                    mine.add(t["trace_id"])
                if (result := await store.get_result(t["trace_id"], "llm")) is not None:
                    results[t["trace_id"]] = result
            consumed.append(mine)
            judged.append(results)
        finally:
            await store.close()
    assert consumed[0].isdisjoint(consumed[1])
    assert len(consumed[0] | consumed[1]) == len(first) + len(second)

    conversation = {t["trace_id"]: t["conversation_id"] for t in first + second}
    minute_1 = {t["trace_id"] for t in second}
    drawn_together = 0
    variance = 0.0
    for share, mine, results, gauge in zip(
        final_shares, consumed, judged, final_rates, strict=True
    ):
        counted = len(mine - minute_1)  # minute 0's traffic here: 60 x that an hour
        assert len(mine & minute_1) == counted  # the second turns came where the first did
        # (a) minute 0: the k-th trace counted here was drawn at floor x share / 60k (the
        # minute so far, scaled to an hour); minute 1: every trace at floor x share / this
        # replica's traffic an hour (60 x its minute 0), its count of minute 1 never more
        minute_0_rates = [floor_rate(share, 60.0 * k) for k in range(1, counted + 1)]
        rate = floor_rate(share, 60.0 * counted)
        assert RATE < rate < 1.0
        assert gauge == pytest.approx(rate)
        for trace_id, result in results.items():
            selection = result.selection
            assert selection is not None and selection.uniform
            # (c) drawn by its conversation's hash against the rate it records
            assert unit_hash(conversation[trace_id]) < selection.inclusion_probability
            if trace_id in minute_1:
                assert selection.inclusion_probability == pytest.approx(rate)
            else:
                assert any(
                    selection.inclusion_probability == pytest.approx(r) for r in minute_0_rates
                )
        # (c) and every second turn whose conversation's hash is under that rate was judged
        assert {t for t in mine & minute_1 if unit_hash(conversation[t]) < rate} == (
            mine & minute_1 & set(results)
        )
        drawn_together += len(mine & minute_1 & set(results))
        variance += counted * rate * (1 - rate)

    # (b) together about the floor for a minute's traffic, floor / 60 = 40 (a floor per replica
    # draws about 80): within three standard deviations of the draw, and clearly below twice it
    target = FLOOR / 60
    assert abs(drawn_together - target) <= 3 * math.sqrt(variance)
    assert drawn_together < 1.5 * target
