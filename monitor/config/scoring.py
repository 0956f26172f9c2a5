"""How traces are scored: ``scoring`` (tier 0), ``sampling`` (which traces the judge gets) and
``estimates`` (the judge's scores over all traffic, from the uniform draw and tier 0)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from monitor.config.base import Section


class ScoringConfig(Section):
    must_not_contain: list[str] = Field(
        default_factory=list, description="terms no answer may contain (flagged by tier 0)"
    )
    rolling_window_seconds: float = Field(default=300.0, gt=0)


class SamplingConfig(Section):
    """See :mod:`monitor.evaluators.sampler` for how the rates and priorities are applied."""

    rate: float = Field(default=0.05, ge=0, le=1, description="share of conversations judged")
    agent_rates: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict, description="per-agent shares of conversations judged"
    )
    min_drawn_per_hour: int | None = Field(
        default=None,
        gt=0,
        description="fewest traces an hour each agent's uniform draw takes, all replicas "
        "together (each asks for its share of the input partitions): a quieter agent's rate is "
        "raised to reach it, up to 1",
    )
    priority_faithfulness_below: float = Field(default=0.5, ge=0, le=1)
    priority_feedback_at_or_below: float | None = Field(
        default=0.0, description="feedback.score at or below this always gets judged"
    )
    priority_no_contexts: bool = True
    priority_max_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="share of an agent's traces that priorities may send to the judge beyond "
        "the uniform rate",
    )
    priority_burst: int = Field(
        default=20, ge=1, description="priority judgements allowed at once above that share"
    )
    queue_size: int = Field(default=200, gt=0)
    token_budget_per_hour: int | None = Field(default=None, gt=0)
    min_rate_factor: float = Field(default=0.01, gt=0, le=1)


ESTIMATED_METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_relevancy")


class EstimatesConfig(Section):
    """See :mod:`monitor.estimates` and docs/metrics.md, "Population estimates"."""

    thresholds: dict[str, float] = Field(
        default_factory=lambda: {
            "faithfulness": 0.8,
            "answer_relevancy": 0.7,
            "context_precision": 0.5,
            "context_relevancy": 0.6,
        },
        description="judge metrics estimated over all traffic, each with the score below which "
        "an answer counts in the share below threshold",
    )
    calibration_window: int = Field(
        default=2000, gt=0, description="judged traces each tier-0 calibration is fitted on"
    )
    calibration_min_labels: int = Field(
        default=30, gt=0, description="judged traces before a calibration predicts by tier 0"
    )
    calibration_epoch_seconds: float = Field(
        default=300.0,
        gt=0,
        description="how often the calibrations take in new labels: a trace is predicted by the "
        "fit of the epoch it was read in, made of the labels that arrived before it began",
    )

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(ESTIMATED_METRICS))
        if unknown:
            raise ValueError(
                f"unknown metric {unknown[0]!r}; one of: {', '.join(ESTIMATED_METRICS)}"
            )
        bad = sorted(k for k, v in value.items() if not 0.0 < v <= 1.0)
        if bad:
            raise ValueError(f"threshold of {bad[0]!r} must be in (0, 1]")
        return value
