"""A scripted multi-turn conversation through the real broker, with a restart in the middle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.agents_report import compare, records_from_rows
from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.evaluators.multiturn import summarize_agents
from monitor.sinks.store import Store
from monitor.sinks.turns import turns_since
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.traces import RunningDaemon, encode, scoring_settings, wait_for

pytestmark = pytest.mark.kafka

CONTEXT = {
    "id": "kb-1",
    "text": "The Aurora kettle holds 1.7 litres, as much as the CompetitorX Pro, "
    "and has a two-year warranty.",
}
NO_COMPETITOR = {
    "id": "no-competitor",
    "text": "Do not mention CompetitorX.",
    "kind": "forbidden_terms",
    "value": ["CompetitorX"],
}
ANSWERS = {
    1: "The Aurora kettle holds 1.7 litres.",
    2: "The Aurora kettle has a two-year warranty.",
    3: "The Aurora kettle holds as much as the CompetitorX Pro.",  # true, but drops the rule
    4: "The Aurora kettle has a titanium heating plate made in Norway.",  # invented claim
}


def _turn(turn: int) -> dict[str, Any]:
    return {
        "trace_id": f"kettle-{turn}",
        "agent": "acc",
        "timestamp": (datetime(2026, 11, 26, 9, tzinfo=UTC) + timedelta(minutes=turn)).isoformat(),
        "conversation_id": "conv-kettle",
        "turn": turn,
        "query": "Tell me about the Aurora kettle.",
        "contexts": [CONTEXT],
        "answer": ANSWERS[turn],
        "constraints": [NO_COMPETITOR],
        "memory_tokens": 100 * turn,
    }


def _settings(broker: KafkaBroker, prefix: str, db: Path) -> Settings:
    return scoring_settings(broker.bootstrap, prefix, db)


async def _stored_turns(db: Path) -> dict[int, dict[str, Any]]:
    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    try:
        rows = await turns_since(store, datetime(2026, 1, 1, tzinfo=UTC))
    finally:
        await store.close()
    return {row["turn"]: row for row in rows}


async def test_drift_at_turn_three_and_hallucination_at_turn_four_survive_a_restart(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    db = tmp_path / "r.db"
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in", f"{topic_prefix}.dlq"])
    key = [b"conv-kettle"]

    first = Daemon(
        _settings(kafka_broker, topic_prefix, db), SourceSpec("kafka"), registry=CollectorRegistry()
    )
    running = RunningDaemon(first)
    await running.started()
    for turn in (2, 1):  # out of order
        await produce(kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(_turn(turn))], keys=key)

    async def turns_stored(count: int) -> bool:
        return len(await _stored_turns(db)) >= count

    await wait_for(lambda: turns_stored(2), 60, "turns 1 and 2 stored")
    assert await running.stop() == 0

    second = Daemon(
        _settings(kafka_broker, topic_prefix, db), SourceSpec("kafka"), registry=CollectorRegistry()
    )
    running = RunningDaemon(second)
    await running.started()
    for turn in (3, 2, 4):  # turn 2 again: a re-delivery
        await produce(kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(_turn(turn))], keys=key)
    await wait_for(lambda: turns_stored(4), 60, "turns 3 and 4 stored")
    await wait_for(
        lambda: (
            second.metrics.registry.get_sample_value(
                "ragmon_traces_processed_total", {"agent": "acc", "outcome": "ok"}
            )
            == 3.0
        ),
        30,
        "the second daemon processed its three traces",
    )
    assert await running.stop() == 0

    turns = await _stored_turns(db)
    assert sorted(turns) == [1, 2, 3, 4]
    assert turns[1]["drift"] is None, "no drift audit at turn 1"
    assert turns[2]["drift"] == 0.0 and turns[3]["drift"] == 1.0 and turns[4]["drift"] == 0.0
    assert turns[3]["hallucination"] == 0.0
    assert turns[4]["hallucination"] == 1.0, "the invented claim is unsupported"
    assert all(t["evaluator"] == "heuristic" for t in turns.values())

    summary = compare(summarize_agents(records_from_rows(list(turns.values()))), None)
    acc = summary["agents"]["acc"]
    assert acc["hallucination_mean"] == pytest.approx(0.25)  # H_u = (0 + 0 + 0 + 1) / 4
    assert acc["drift_mean"] == pytest.approx(1 / 3)  # D_r = (0 + 1 + 0) / 3
    assert acc["memory_mean"] == pytest.approx(250.0)
    assert acc["memory_final_mean"] == 400.0

    value = second.metrics.registry.get_sample_value
    drift3 = {"agent": "acc", "turn_bucket": "3"}
    assert value("ragmon_turn_drift_ratio_sum", drift3) == 1.0
    assert value("ragmon_turn_drift_ratio_count", drift3) == 1.0
    h4 = {"agent": "acc", "evaluator": "heuristic", "turn_bucket": "4-5"}
    assert value("ragmon_turn_hallucination_ratio_sum", h4) == 1.0
    h2 = {"agent": "acc", "evaluator": "heuristic", "turn_bucket": "2"}
    assert value("ragmon_turn_hallucination_ratio_count", h2) is None, (
        "the re-delivered turn 2 was already counted before the restart"
    )
    assert value("ragmon_constraint_checks_total", {"agent": "acc", "outcome": "violated"}) == 1.0
