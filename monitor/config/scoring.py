"""How traces are scored: ``scoring`` (tier 0) and ``sampling`` (which traces the judge gets)."""

from __future__ import annotations

from pydantic import Field

from monitor.config.base import Section


class ScoringConfig(Section):
    must_not_contain: list[str] = Field(
        default_factory=list, description="terms no answer may contain (flagged by tier 0)"
    )
    rolling_window_seconds: float = Field(default=300.0, gt=0)


class SamplingConfig(Section):
    """See :mod:`monitor.evaluators.sampler` for how the rates and priorities are applied."""

    rate: float = Field(default=0.05, ge=0, le=1, description="share of conversations judged")
    agent_rates: dict[str, float] = Field(default_factory=dict)
    priority_faithfulness_below: float = Field(default=0.5, ge=0, le=1)
    priority_feedback_at_or_below: float | None = Field(
        default=0.0, description="feedback.score at or below this always gets judged"
    )
    priority_no_contexts: bool = True
    queue_size: int = Field(default=200, gt=0)
    token_budget_per_hour: int | None = Field(default=None, gt=0)
    min_rate_factor: float = Field(default=0.01, gt=0, le=1)
