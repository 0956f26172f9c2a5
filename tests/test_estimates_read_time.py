"""A trace's tier-0 prediction is the one of when it was read, not of when it is scored.

The real score stage, scoring processor, tier 0, sampler and estimate recorder, with a judge that
answers when told: a drawn conversation's second turn waits for the judge on its first while
labels of other conversations come in, epochs pass and a trace read later is predicted from
them; the held turn is still predicted as when it was read. Predicted at its scoring time, the
turns of drawn conversations would see more labels than the rest of the traffic, which biases
the prediction-powered estimate (docs/metrics.md, "Population estimates").
"""

from __future__ import annotations

import asyncio
import io
import json
import time

import pytest
from prometheus_client import CollectorRegistry

from monitor.config.scoring import EstimatesConfig, SamplingConfig
from monitor.estimates.calibration import (
    FOLDS,
    UNFITTED,
    Calibrations,
    answer_language,
    fold_of,
)
from monitor.estimates.recorder import EstimateRecorder
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.sampler import Sampler
from monitor.messages import RawMessage, Routed
from monitor.metrics import AgentLabels, Metrics
from monitor.models import EvaluationResult, Prediction, Score, Trace
from monitor.sinks.deadletter import StreamDeadLetters
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.sources.offsets import OffsetTracker
from monitor.stages.reject import Rejecter
from monitor.stages.score import ScoreStage
from monitor.stages.scoring import ScoringProcessor
from tests.support.traces import native_trace, wait_for

EPOCH_SECONDS = 0.25


class HeldJudge:
    """Scores every answer 1.0; holds the first turn of conversation `held` until released."""

    name = "llm"
    circuit_open = False

    def __init__(self, held: str) -> None:
        self.held = held
        self.release = asyncio.Event()

    async def evaluate(self, trace: Trace) -> EvaluationResult:
        if trace.conversation_id == self.held and trace.turn == 1:
            await self.release.wait()
        return EvaluationResult(
            trace_id=trace.trace_id,
            conversation_id=trace.conversation_id,
            turn=trace.turn,
            timestamp=trace.timestamp,
            evaluator=self.name,
            scores={"faithfulness": Score.of(1.0)},
        )


def message(offset: int, conversation: str, turn: int) -> RawMessage:
    trace = native_trace(offset, conversation_id=conversation, turn=turn)
    return RawMessage("in", 0, offset, conversation.encode(), json.dumps(trace).encode())


def read(tracker: OffsetTracker, *messages: RawMessage) -> list[Routed]:
    """Messages as the consume loop hands them to the score stage (their offsets begun)."""
    for msg in messages:
        tracker.begin(msg.tp, msg.offset)
    return [Routed(msg, "native") for msg in messages]


async def next_epoch(calibrations: Calibrations, after: int) -> int:
    def now() -> int:
        return calibrations.epoch_at(time.monotonic())

    await wait_for(lambda: now() > after, 5, f"epoch {after} to end", interval=0.01)
    return now()


async def test_a_held_turn_is_predicted_by_the_calibration_of_when_it_was_read() -> None:
    registry = CollectorRegistry()
    scoring_metrics = ScoringMetrics(registry, AgentLabels(10), 300.0)
    config = EstimatesConfig(
        thresholds={"faithfulness": 0.8},
        calibration_min_labels=1,
        calibration_epoch_seconds=EPOCH_SECONDS,
    )
    calibrations = Calibrations.from_config(config)
    judge = HeldJudge("conv-a")
    processor = ScoringProcessor(
        tier0=HeuristicEvaluator(),
        metrics=scoring_metrics,
        sampler=Sampler(SamplingConfig(rate=1.0)),  # every conversation drawn
        judge=judge,
        estimates=EstimateRecorder(
            evaluator="llm",
            config=config,
            terms=scoring_metrics.estimate_terms,
            weighted_terms=scoring_metrics.estimate_weighted_terms,
            agent_label=AgentLabels(10),
            calibrations=calibrations,
        ),
    )
    predicted: dict[str, Prediction] = {}

    async def keep(trace: Trace, result: EvaluationResult) -> None:
        if result.selection is not None:
            predicted[trace.trace_id] = result.selection.predictions["faithfulness"]

    processor.observers.append(keep)
    tracker, metrics = OffsetTracker(), Metrics(CollectorRegistry())
    score = ScoreStage(
        processor=processor,
        rejecter=Rejecter(StreamDeadLetters(io.StringIO()), metrics, tracker, max_bytes=1_048_576),
        tracker=tracker,
        metrics=metrics,
        tracer=None,
        max_in_flight=100,
    )
    read_in = calibrations.epoch_at(time.monotonic())
    await score.handle_batch(read(tracker, message(0, "conv-a", 1), message(1, "conv-a", 2)))
    # Labels of other conversations (every other fold) arrive while the second turn waits.
    arrived = await next_epoch(calibrations, read_in)
    language = answer_language(native_trace(1)["answer"])
    calibration = calibrations.get("faithfulness", language)
    for fold in set(range(FOLDS)) - {fold_of("conv-a")}:
        for b in range(10):
            calibration.add(b / 10 + 0.05, 0.2, fold=fold, epoch=arrived)
    await next_epoch(calibrations, arrived)
    await score.handle_batch(read(tracker, message(2, "conv-b", 1)))  # read after they came
    await wait_for(lambda: "trace-000002" in predicted, 10, "the later trace", interval=0.01)
    later = predicted["trace-000002"]
    assert (later.mean, later.below) == pytest.approx((0.2, 1.0)), "they would count"
    assert "trace-000001" not in predicted, "the second turn still waits for the first"
    judge.release.set()
    assert await score.drain(time.monotonic() + 10)
    assert predicted["trace-000000"] == UNFITTED
    assert predicted["trace-000001"] == UNFITTED, "as when it was read: no label was in then"
