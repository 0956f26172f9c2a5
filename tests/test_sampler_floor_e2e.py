"""A quiet agent's floor of drawn traces an hour, through a running daemon: real broker, real
store, scripted judge.

Two agents share the input: `quiet` (24 turns) and `busy` (400). At a 2% rate the quiet agent
would give its estimate nothing to stand on; with `sampling.min_drawn_per_hour` at 3,600 (60 a
minute) every quiet trace is drawn (its traffic never reaches 60 a minute), so its estimate is
its judge mean exactly, while the busy agent's rate falls as its traffic is counted. Every
judged result records the rate it was drawn at, and was drawn by its conversation's hash
against that rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from monitor.estimates.estimator import TERMS, Terms, uniform
from monitor.evaluators.sampler import unit_hash
from monitor.sinks.store import Store
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.openai_server import OpenAIServer
from tests.support.traces import RunningDaemon, produce_traces, scoring_settings, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PRIORITIES_OFF = {
    "priority_faithfulness_below": 0.0,
    "priority_feedback_at_or_below": None,
    "priority_no_contexts": False,
}
QUIET, BUSY = "quiet", "busy"


def turn(agent: str, n: int, invented: bool) -> dict[str, Any]:
    context = f"Branch {n} opens at 9:00 and closes at 17:00 on weekdays."
    answer = (
        f"Branch {n} opens at 11:30 UNSUPPORTED and serves free breakfast."
        if invented
        else f"Branch {n} opens at 9:00 on weekdays."
    )
    return {
        "trace_id": f"{agent}-{n:04d}",
        "timestamp": f"2026-11-01T12:{n // 60 % 60:02d}:{n % 60:02d}+00:00",
        "agent": agent,
        "conversation_id": f"{agent}-conv-{n // 2 if agent == QUIET else n}",
        "turn": n % 2 + 1 if agent == QUIET else 1,
        "query": f"When does branch {n} open?",
        "contexts": [{"id": f"doc-{n}", "text": context, "rank": 1}],
        "answer": answer,
    }


async def test_a_quiet_agent_is_drawn_to_its_floor_and_its_estimate_stands_on_it(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    quiet = [turn(QUIET, n, invented=n % 3 == 0) for n in range(24)]
    busy = [turn(BUSY, n, invented=n % 5 == 0) for n in range(400)]
    traces = quiet + busy
    topics = [f"{topic_prefix}.in", f"{topic_prefix}.dlq"]
    await create_topics(kafka_broker.bootstrap, topics, partitions=2)
    db = tmp_path / "floor.db"
    async with OpenAIServer() as judge:
        settings = scoring_settings(
            kafka_broker.bootstrap,
            topic_prefix,
            db,
            # a judge queue that never fills: its load shedding would lower every rate
            sampling={
                "rate": 0.02,
                "min_drawn_per_hour": 3600,
                "queue_size": 100_000,
                **PRIORITIES_OFF,
            },
            judge={"base_url": judge.url, "max_retries": 0, "timeout_seconds": 10},
        )
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        value = daemon.metrics.registry.get_sample_value
        running = RunningDaemon(daemon)
        await running.started()
        await produce_traces(kafka_broker.bootstrap, topics[0], traces)

        def count(name: str, agent: str, **labels: str) -> float:
            return value(name, {"agent": agent, **labels}) or 0.0

        def done() -> bool:
            for agent, sent in ((QUIET, quiet), (BUSY, busy)):
                drawn = count("ragmon_sampler_decisions_total", agent, outcome="sampled")
                judged = sum(
                    count("ragmon_evaluations_total", agent, evaluator="llm", outcome=o)
                    for o in ("ok", "partial", "error")
                )
                processed = count("ragmon_traces_processed_total", agent, outcome="ok")
                if processed != len(sent) or judged != drawn:
                    return False
            return True

        await wait_for(done, 240, "every trace scored and every judgement back", 0.5)
        rates = {
            agent: count("ragmon_sampler_effective_rate_ratio", agent) for agent in (QUIET, BUSY)
        }
        quiet_terms = Terms.of(
            {
                term: count(
                    "ragmon_estimate_terms_total",
                    QUIET,
                    metric="faithfulness",
                    evaluator="llm",
                    quantity="mean",
                    term=term,
                )
                for term in TERMS
            }
        )
        assert await running.stop() == 0

    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    try:
        judged = {
            t["trace_id"]: (t, result)
            for t in traces
            if (result := await store.get_result(t["trace_id"], "llm")) is not None
        }
    finally:
        await store.close()

    # the quiet agent: every trace drawn at rate 1 (the configured 2% would draw none or one)
    assert rates[QUIET] == 1.0
    assert {t["trace_id"] for t in quiet} <= set(judged)
    for t in quiet:
        selection = judged[t["trace_id"]][1].selection
        assert selection is not None and selection.uniform
        assert selection.inclusion_probability == 1.0
    # so its estimate is the judge's mean of its traffic, exactly
    estimate = uniform(quiet_terms)
    assert quiet_terms.traces == len(quiet) and quiet_terms.judged == len(quiet)
    assert estimate is not None
    truth = sum("UNSUPPORTED" not in t["answer"] for t in quiet) / len(quiet)
    assert estimate.value == pytest.approx(truth)

    # the busy agent: drawn at a rate that fell as its traffic was counted, each judged trace
    # by its conversation's hash against the rate it records
    busy_judged = [(t, r) for t, r in judged.values() if t["agent"] == BUSY]
    assert 60 <= len(busy_judged) < len(busy)
    for t, result in busy_judged:
        selection = result.selection
        assert selection is not None and selection.uniform
        assert 0.02 <= selection.inclusion_probability <= 1.0
        assert unit_hash(t["conversation_id"]) < selection.inclusion_probability
    assert min(r.selection.inclusion_probability for _, r in busy_judged if r.selection) < 0.5
