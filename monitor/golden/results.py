"""What a golden-set run produces: per query, per mode, comparisons, the run as a whole.

Plain pydantic models, so a run serialises to the JSON result written beside the report
(``RunResult.model_dump_json``) and reads back (``RunResult.model_validate_json``). A measure
that could not be computed is ``None`` (JSON ``null``), never 0.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

Outcome = Literal["passed", "failed", "error"]
Verdict = Literal["better", "worse", "no significant difference", "small effect", "undefined"]


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryResult(_Result):
    """One query (or generation case) in one mode."""

    query_id: str
    text: str
    category: str | None = None
    language: str | None = None
    difficulty: str | None = None
    metrics: dict[str, float | None]
    latency_ms: float | None = None
    attempts: int = 0
    error: str | None = Field(default=None, description="why the request failed (after retries)")
    # retrieval
    expected: dict[str, int] = Field(default_factory=dict, description="doc id -> grade")
    returned: list[str] = Field(default_factory=list, description="ranked doc ids")
    duplicates_dropped: int = 0
    # generation
    answer: str | None = None
    forbidden_found: list[str] = Field(default_factory=list)
    topics_missing: list[str] = Field(default_factory=list)
    admits_not_knowing: bool | None = None
    answer_language: str | None = None
    expected_language: str | None = None
    no_context: bool | None = None
    judge_reason: str | None = None
    judge_input_tokens: int | None = None
    judge_output_tokens: int | None = None
    unmeasured: dict[str, str] = Field(
        default_factory=dict, description="measure -> why it is None for this query"
    )


class LatencySummary(_Result):
    """Latency of the successful requests of a mode, in milliseconds."""

    n: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_ms: float | None


class GroupResult(_Result):
    n: int
    metrics: dict[str, float | None]


class LengthCorrelation(_Result):
    """Pearson correlation of query length (characters after NFKC) with a per-query measure."""

    metric: str
    n: int
    r: float | None
    p_value: float | None
    reason: str | None = None


class TargetCheck(_Result):
    metric: str
    target: float
    direction: Literal["min", "max"] = Field(description="min: value >= target; max: <=")
    value: float | None
    passed: bool | None = Field(description="None when the measure is unmeasured")


class ModeResult(_Result):
    """One mode (or sweep variant) over the whole suite."""

    label: str
    description: str | None = None
    params: dict[str, JsonValue]
    variant_of: str | None = Field(default=None, description="sweep variants: the base mode")
    sweep: dict[str, JsonValue] | None = Field(
        default=None, description="sweep variants: the swept parameters"
    )
    n_queries: int
    n_failed: int
    metrics: dict[str, float | None]
    measured: dict[str, int] = Field(description="queries each mean is over")
    latency: LatencySummary
    groups: dict[str, dict[str, GroupResult]] = Field(
        default_factory=dict, description="category/language/difficulty -> label -> means"
    )
    length_correlation: LengthCorrelation | None = None
    targets: list[TargetCheck] = Field(default_factory=list)
    gated: bool = Field(default=True, description="its targets decide the run's outcome")
    passed: bool | None = Field(default=None, description="every target met")
    queries: list[QueryResult]


class Comparison(_Result):
    """Paired comparison of ``candidate`` against ``baseline`` on one measure."""

    metric: str
    baseline: str
    candidate: str
    n: int
    baseline_mean: float | None
    candidate_mean: float | None
    mean_diff: float | None = Field(description="candidate - baseline")
    t_statistic: float | None
    p_value: float | None
    df: int | None
    cohens_d: float | None = Field(description="paired d_z of candidate - baseline")
    ci_lower: float | None
    ci_upper: float | None
    confidence: float
    alpha: float
    significant: bool | None
    verdict: Verdict
    reason: str | None = None


class Recommendation(_Result):
    """A tuning suggestion (the tuning table of docs/metrics.md, and further checks)."""

    metric: str
    problem: str
    cause: str
    actions: list[str]
    modes: list[str] = Field(default_factory=list)
    detail: str | None = None
    source: str = "tuning table"


class RunResult(_Result):
    """A whole run of one suite."""

    suite: str
    kind: Literal["retrieval", "generation"]
    dataset: str
    dataset_version: str | None = None
    n_queries: int = 0
    started_at: datetime
    finished_at: datetime
    duration_seconds: float
    outcome: Outcome
    error: str | None = None
    conventions: dict[str, JsonValue] = Field(default_factory=dict)
    targets: dict[str, float] = Field(default_factory=dict)
    primary_metric: str | None = None
    baseline_mode: str | None = None
    judge: bool = False
    modes: list[ModeResult] = Field(default_factory=list)
    sweeps: list[ModeResult] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    sweep_comparisons: list[Comparison] = Field(default_factory=list)
    recommendations: list[Recommendation] = Field(default_factory=list)

    def mode(self, label: str) -> ModeResult:
        for mode in [*self.modes, *self.sweeps]:
            if mode.label == label:
                return mode
        raise KeyError(label)

    def failed_targets(self) -> list[tuple[str, TargetCheck]]:
        """``(mode, check)`` for every gated target not passed (missed or unmeasured)."""
        return [
            (mode.label, check)
            for mode in self.modes
            if mode.gated
            for check in mode.targets
            if check.passed is not True
        ]


__all__ = [
    "Comparison",
    "GroupResult",
    "LatencySummary",
    "LengthCorrelation",
    "ModeResult",
    "Outcome",
    "QueryResult",
    "Recommendation",
    "RunResult",
    "TargetCheck",
    "Verdict",
]
