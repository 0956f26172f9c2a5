"""Tier 0 on big traces runs in a worker thread, so the event loop (probes, the Kafka fetcher,
other traces) keeps running; small traces stay inline. bench/loop_lag.py measures the gap."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.sampler import Sampler
from monitor.metrics import AgentLabels
from monitor.models import EvaluationResult, Trace
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.stages.scoring import ScoringProcessor
from tests.support.traces import make_trace


class RecordingTier0:
    """The real tier 0, noting the thread each evaluation ran on."""

    name = "heuristic"

    def __init__(self) -> None:
        self.inner = HeuristicEvaluator()
        self.threads: list[int] = []

    def evaluate(self, trace: Trace) -> EvaluationResult:
        self.threads.append(threading.get_ident())
        return self.inner.evaluate(trace)


def trace(chars: int) -> Trace:
    text = "The plan costs 12 dollars a month. " * (chars // 35 + 1)
    return make_trace(
        "What does the plan cost?",
        [text],
        "The plan costs 12 dollars a month.",
        trace_id=f"t{chars}",
        ranks=False,
    )


async def test_big_traces_are_scored_off_the_event_loop() -> None:
    tier0 = RecordingTier0()
    registry = CollectorRegistry()
    processor = ScoringProcessor(
        tier0=tier0,
        metrics=ScoringMetrics(registry, AgentLabels(10), 300.0),
        sampler=Sampler(SamplingConfig(rate=0.0)),
        offload_chars=1_000,
    )
    loop_thread = threading.get_ident()
    await processor.process(trace(200))
    await processor.process(trace(5_000))
    assert tier0.threads[0] == loop_thread
    assert tier0.threads[1] != loop_thread
    # the result of the offloaded evaluation is used like any other
    labels = {"agent": "default", "evaluator": "heuristic", "outcome": "ok"}
    assert registry.get_sample_value("ragmon_evaluations_total", labels) == 2
