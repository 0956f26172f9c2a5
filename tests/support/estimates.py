"""The estimate recorder on a registry of its own, and scored results, for the estimates' tests."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog
from monitor.config.scoring import EstimatesConfig
from monitor.estimates.calibration import Calibrations
from monitor.estimates.recorder import EstimateRecorder
from monitor.metrics import AgentLabels
from monitor.models import EvaluationResult, Score
from tests.support.traces import FIXED_TIME

THRESHOLDS = {"faithfulness": 0.8}


def recorder_on(
    registry: CollectorRegistry, calibrations: Calibrations | None = None
) -> EstimateRecorder:
    """Faithfulness only (threshold 0.8); by default a calibration of 100 labels, 5 to fit."""
    return EstimateRecorder(
        evaluator="llm",
        config=EstimatesConfig(thresholds=THRESHOLDS),
        terms=catalog.create(catalog.ESTIMATE_TERMS, registry),
        weighted_terms=catalog.create(catalog.ESTIMATE_WEIGHTED_TERMS, registry),
        agent_label=AgentLabels(10),
        calibrations=calibrations or Calibrations(THRESHOLDS, 100, 5, epoch_seconds=300.0),
    )


def result(evaluator: str, **scores: float) -> EvaluationResult:
    return EvaluationResult(
        trace_id="t",
        timestamp=FIXED_TIME,
        evaluator=evaluator,
        scores={name: Score.of(value) for name, value in scores.items()},
    )
