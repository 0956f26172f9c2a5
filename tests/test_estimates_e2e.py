"""The population estimates through a running daemon: real broker, real store, scripted judge.

The same traffic (conversations of several turns whose answers are grounded or invented, with
a propensity to invent per conversation, so turns are correlated) runs through two daemons: one
with the priority rules on (every invented answer has low tier-0 support, so the judge sees
many of them beyond the uniform draw, up to the cap) and one with them off. The scripted judge
scores an invented answer 0 and a grounded one 1, so the truth -- the judge's mean over all
traffic -- is known. In both runs the exported estimate's 95% interval holds the truth, and the
uniform draw is the same conversations; with priorities on, the judge's own mean is far off.

The first half of the conversations is a calibration phase: produced and judged first, then,
in a later epoch of the calibration (a short `estimates.calibration_epoch_seconds`), the second
half is read and predicted by tier 0 calibrated on the first half's uniform draw, so the
prediction-powered estimate is not merely the uniform-only one.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from monitor.estimates.estimator import (
    TERMS,
    Estimate,
    Terms,
    prediction_powered,
    uniform,
)
from monitor.models import EvaluationResult
from monitor.sinks.store import Store
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, read_all
from tests.support.openai_server import OpenAIServer
from tests.support.traces import RunningDaemon, produce_traces, scoring_settings, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RATE = 0.3
EPOCH_SECONDS = 1.0
CALIBRATION_CONVERSATIONS = 75
PRIORITIES_OFF = {
    "priority_faithfulness_below": 0.0,
    "priority_feedback_at_or_below": None,
    "priority_no_contexts": False,
}


def traffic(seed: int = 3) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Traces of 150 conversations of 1-5 turns, and the judge's faithfulness of each."""
    rng = random.Random(seed)
    traces, judge = [], {}
    for c in range(150):
        invents = 0.6 if rng.random() < 0.3 else 0.05
        for turn in range(1, rng.randint(1, 5) + 1):
            n = len(traces)
            hour = rng.randint(7, 11)
            context = f"Branch {n} opens at {hour}:00 and closes at {hour + 8}:00 on weekdays."
            if rng.random() < invents:
                answer = (
                    f"Branch {n} opens at {hour + 3}:30 UNSUPPORTED and serves free breakfast "
                    f"to its first {rng.randint(20, 90)} visitors."
                )
            else:
                answer = f"Branch {n} opens at {hour}:00 on weekdays."
            trace_id = f"t-{n:04d}"
            judge[trace_id] = 0.0 if "UNSUPPORTED" in answer else 1.0
            traces.append(
                {
                    "trace_id": trace_id,
                    "timestamp": f"2026-11-01T12:{n // 60 % 60:02d}:{n % 60:02d}+00:00",
                    "conversation_id": f"conv-{c:03d}",
                    "turn": turn,
                    "query": f"When does branch {n} open?",
                    "contexts": [{"id": f"doc-{n}", "text": context, "rank": 1}],
                    "answer": answer,
                }
            )
    return traces, judge


async def run_daemon(
    broker: KafkaBroker, prefix: str, tmp_path: Path, sampling: dict[str, Any]
) -> tuple[tuple[Terms, Terms], dict[str, float], list[EvaluationResult], list[bytes]]:
    """The run's sums (the traffic and the uniform draw; every judged trace, weighted), its
    counts, the judge's stored results and what the results topic received."""
    traces, _ = traffic()
    topics = [f"{prefix}.in", f"{prefix}.dlq", f"{prefix}.results"]
    await create_topics(broker.bootstrap, topics, partitions=2)
    db = tmp_path / f"{prefix.rsplit('.', 1)[-1]}.db"
    async with OpenAIServer() as judge:
        settings = scoring_settings(
            broker.bootstrap,
            prefix,
            db,
            results_topic=topics[2],
            sampling={"rate": RATE, **sampling},
            judge={"base_url": judge.url, "max_retries": 0, "timeout_seconds": 10},
            estimates={"calibration_epoch_seconds": EPOCH_SECONDS},
        )
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        value = daemon.metrics.registry.get_sample_value
        running = RunningDaemon(daemon)
        await running.started()

        async def send(batch: list[dict[str, Any]]) -> None:
            await produce_traces(broker.bootstrap, topics[0], batch)

        def judged() -> float:
            return sum(
                value("ragmon_sampler_decisions_total", {"agent": "default", "outcome": o}) or 0.0
                for o in ("sampled", "priority")
            )

        def done(count: int) -> bool:
            processed = value(
                "ragmon_traces_processed_total", {"agent": "default", "outcome": "ok"}
            )
            evaluations = sum(
                value(
                    "ragmon_evaluations_total",
                    {"agent": "default", "evaluator": "llm", "outcome": o},
                )
                or 0.0
                for o in ("ok", "partial", "error")
            )
            return processed == count and evaluations == judged()

        first = [t for t in traces if int(t["conversation_id"][5:]) < CALIBRATION_CONVERSATIONS]
        await send(first)
        await wait_for(lambda: done(len(first)), 240, "the calibration phase", interval=0.5)
        await asyncio.sleep(EPOCH_SECONDS)  # the rest is read in a later epoch
        await send(traces[len(first) :])
        await wait_for(
            lambda: done(len(traces)), 240, "every trace scored and every judgement back", 0.5
        )
        of_faithfulness = {**judge_labels(), "quantity": "mean"}
        terms, weighted = (
            Terms.of(
                {term: value(counter, {**of_faithfulness, "term": term}) or 0.0 for term in TERMS}
            )
            for counter in ("ragmon_estimate_terms_total", "ragmon_estimate_weighted_terms_total")
        )
        raw = {
            selection: [
                value(
                    f"ragmon_evaluation_score_ratio_{part}",
                    {**judge_labels(), "selection": selection},
                )
                or 0.0
                for part in ("sum", "count")
            ]
            for selection in ("uniform", "priority")
        }
        counts = {
            "judged": judged(),
            "capped": value(
                "ragmon_sampler_decisions_total",
                {"agent": "default", "outcome": "priority_capped"},
            )
            or 0.0,
            "raw_mean": sum(s for s, _ in raw.values()) / sum(n for _, n in raw.values()),
            "priority_scores": raw["priority"][1],
            "calibration_labels": value(
                "ragmon_estimate_calibration_labels",
                {"metric": "faithfulness", "language": "en"},
            )
            or 0.0,
        }
        expected = len(traces) + int(counts["judged"])  # tier 0's results and the judge's
        published = [r.value for r in await read_all(broker.bootstrap, topics[2], expected)]
        assert len(published) == expected
        assert await running.stop() == 0
    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    try:
        stored = [
            result
            for t in traces
            if (result := await store.get_result(t["trace_id"], "llm")) is not None
        ]
    finally:
        await store.close()
    return (terms, weighted), counts, stored, published


def judge_labels() -> dict[str, str]:
    return {"agent": "default", "metric": "faithfulness", "evaluator": "llm"}


def covers(estimate: Estimate | None, truth: float) -> bool:
    assert estimate is not None
    low, high = estimate.interval()
    return low <= truth <= high


async def test_the_estimate_holds_the_truth_with_priority_rules_on_and_off(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    traces, judge = traffic()
    truth = sum(judge.values()) / len(judge)
    on = await run_daemon(kafka_broker, f"{topic_prefix}.on", tmp_path, {})
    off = await run_daemon(kafka_broker, f"{topic_prefix}.off", tmp_path, PRIORITIES_OFF)
    uniform_draws = []
    for (terms, weighted), counts, stored, published in (on, off):
        assert terms.traces == len(traces), "every trace's tier-0 prediction is counted"
        assert terms.judged >= 60 and terms.clusters >= 20
        # every judged trace is in the weighted sample, the priorities by their known chance
        assert weighted.judged == counts["judged"]
        powered, plain = prediction_powered(terms, weighted), uniform(terms)
        assert covers(powered, truth), (powered, truth)
        assert covers(plain, truth), (plain, truth)
        # the second half was predicted by tier 0 calibrated on the first half's draw, which
        # tells grounded from invented answers here: a narrower interval than the draw's alone
        assert counts["calibration_labels"] >= 30
        assert powered is not None and plain is not None and powered.stderr < plain.stderr
        # every judged result says why it was judged, in the store and on the results topic
        assert len(stored) == counts["judged"]
        assert all(r.selection is not None and r.selection.judged for r in stored)
        drawn = {r.trace_id for r in stored if r.selection and r.selection.uniform}
        assert len(drawn) == terms.judged
        assert all(r.selection.inclusion_probability == RATE for r in stored if r.selection)
        on_topic = [json.loads(v) for v in published]
        judged_on_topic = [r for r in on_topic if r["evaluator"] == "llm"]
        assert {r["trace_id"] for r in judged_on_topic} == {r.trace_id for r in stored}
        assert all(r["selection"]["predictions"]["faithfulness"] for r in judged_on_topic)
        assert all(r["selection"] is None for r in on_topic if r["evaluator"] == "heuristic")
        uniform_draws.append(drawn)
    (on_terms, on_weighted), on_counts, on_stored, _ = on
    (off_terms, off_weighted), off_counts, _, _ = off
    # The uniform draw did not depend on the priority rules: the same traces, the same
    # uniform-only estimate.
    assert uniform_draws[0] == uniform_draws[1]
    drawn_on, drawn_off = uniform(on_terms), uniform(off_terms)
    assert drawn_on is not None and drawn_off is not None
    assert drawn_on.value == pytest.approx(drawn_off.value)
    assert drawn_on.stderr == pytest.approx(drawn_off.stderr)
    # With priorities on, the judge saw many invented answers beyond the draw (up to the cap,
    # which skipped the rest): its own mean reads far worse than the traffic is.
    priorities = [r for r in on_stored if r.selection and not r.selection.uniform]
    assert priorities and all(r.selection and r.selection.priority for r in priorities)
    assert on_counts["capped"] > 0 and on_counts["priority_scores"] == len(priorities)
    assert all(
        r.selection.priority_probability is not None and r.selection.priority_probability > 0
        for r in priorities
        if r.selection
    )
    estimate = prediction_powered(on_terms, on_weighted)
    assert estimate is not None
    low, _ = estimate.interval()
    assert on_counts["raw_mean"] < low < truth
    assert off_counts["priority_scores"] == 0 and off_counts["capped"] == 0
    # without priorities, every judged trace is one of the draw, weighted alike
    assert off_weighted.judged == off_terms.judged
    assert (off_weighted.m, off_weighted.y) == pytest.approx((off_terms.m, off_terms.y))
