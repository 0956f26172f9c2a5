"""Two replicas SIGKILLed mid-stream with overlapping, out-of-order conversations (issue 21).

Real Apache Kafka (6 partitions, one consumer group), two real `rag-monitor run` processes, a
real PostgreSQL store, the scripted judge; the scenario is `tests/support/crash_scenario.py`.
Exact counts afterwards: nothing lost, no extra trace, every turn right in the turn rows, the
stored results and the last published record of each (trace, evaluator), nothing
dead-lettered, each sampled trace judged once per task (the judge's verdicts are kept in the
store as they arrive) but for the calls in flight at a fault, which another process asks again.

Sizes: RAGMON_FAULT_CRASH_TRACES (default 600), RAGMON_FAULT_SEED (default: random, printed).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support.crash_scenario import Plan, Scenario
from tests.support.faults import env_int
from tests.support.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_two_replicas_killed_mid_stream_keep_every_trace_and_every_turn(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, postgres_url: str
) -> None:
    traces = env_int("RAGMON_FAULT_CRASH_TRACES", 600)
    seed = env_int("RAGMON_FAULT_SEED", random.randrange(1_000_000))
    plan = Plan(traces=traces, conversations=max(1, traces // 6), seed=seed)
    outcome = Scenario(kafka_broker.bootstrap, topic_prefix, postgres_url, tmp_path, plan).run()
    print("\n" + outcome.summary())
    assert len(outcome.kills) == plan.kills
    assert outcome.produced == traces
    assert outcome.exact, outcome.summary()
    assert outcome.sampled > 0 and outcome.renumbered > 0, "the scenario judged and renumbered"
    for task, expected in outcome.judge_expected.items():
        made = outcome.judge_calls[task]
        assert expected <= made <= expected + plan.judge_repeat_bound, (task, made, expected)
