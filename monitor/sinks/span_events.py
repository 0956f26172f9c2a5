"""Scores as OpenTelemetry ``gen_ai.evaluation.result`` events on the daemon's processing span.

The GenAI semantic conventions (development status) describe one event per evaluation result,
parented to the operation it evaluates. The daemon's ``rag-monitor process`` span continues the
producer's ``traceparent``, so the events land in the evaluated request's trace, on a child of
its span. One event per score:

- ``gen_ai.evaluation.name``: the metric (``faithfulness``, ``answer_relevancy``, ...);
- ``gen_ai.evaluation.score.value``: the value in [0, 1], when measured;
- ``error.type`` and ``gen_ai.evaluation.explanation``: the reason, when unmeasured;
- ``rag_monitor.evaluator``: which evaluator scored it (``heuristic``, ``llm``, ``ragas``).

No trace text goes into an event (statements and judge reasons can hold user data); the
store and the results topic carry those, redacted. Without tracing configured the current
span does not record and this costs one check.
"""

from __future__ import annotations

from opentelemetry import trace as otel_trace
from opentelemetry.util.types import AttributeValue

from monitor.models import EvaluationResult

EVENT_NAME = "gen_ai.evaluation.result"


def add_evaluation_events(result: EvaluationResult) -> None:
    """One ``gen_ai.evaluation.result`` event per score of `result` on the current span."""
    span = otel_trace.get_current_span()
    if not span.is_recording():
        return
    for metric, score in result.scores.items():
        attributes: dict[str, AttributeValue] = {
            "gen_ai.evaluation.name": metric,
            "rag_monitor.evaluator": result.evaluator,
        }
        if score.value is not None:
            attributes["gen_ai.evaluation.score.value"] = score.value
        else:
            reason = score.reason or "unmeasured"
            attributes["error.type"] = reason
            attributes["gen_ai.evaluation.explanation"] = f"unmeasured: {reason}"
        span.add_event(EVENT_NAME, attributes=attributes)


__all__ = ["EVENT_NAME", "add_evaluation_events"]
