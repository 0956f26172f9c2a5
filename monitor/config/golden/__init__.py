"""Configuration of golden-set suites: ``golden:`` in the daemon's settings.

Mounted by the daemon as ``Settings.golden`` (environment ``RAGMON_GOLDEN__...``; the suites
list is JSON in ``RAGMON_GOLDEN__SUITES``). Unknown keys are errors. Example::

    golden:
      report_dir: /var/lib/rag-monitor/golden
      suites:
        - name: search
          kind: retrieval
          dataset: golden/retrieval.yaml        # relative to the config file's directory
          service:
            url: http://rag-api:8080/search
            request_template: {query: "{{query}}", top_k: "{{top_k}}", mode: "{{mode}}",
                               rerank: "{{rerank}}", alpha: "{{alpha}}"}
            response: {doc_ids: "results[*].doc_id"}
            timeout_seconds: 5
            concurrency: 4
          params: {alpha: 0.3, rerank: false}   # shared request parameters
          modes:
            A: {description: BM25 only, params: {mode: keyword}}
            C: {description: Hybrid (RRF), params: {mode: hybrid}}
            D: {description: Hybrid + Rerank, params: {mode: hybrid, rerank: true}}
          baseline_mode: A
          sweeps: {alpha: [0.0, 0.1, 0.3, 0.5, 0.7, 1.0]}
          schedule: {cron: "0 3 * * *"}

Request templates: see :mod:`monitor.config.golden.template`. Variables: ``query`` (the query,
or the question of a generation case; also ``question``), ``query_id``, ``top_k``, ``contexts`` (a
generation case's contexts, ``null`` for live retrieval), ``language``, ``params`` (all of the
mode's parameters as one object) and every parameter by name. Without a template the body is
``{"query": ..., "top_k": ..., <parameters>}`` (retrieval) or ``{"query": ..., "contexts": ...,
<parameters>}`` (generation). ``GET`` sends the rendered template as URL query parameters.

Response mapping: JSONPath-lite paths (:mod:`monitor.config.golden.jsonpath`) to the ranked document
ids (retrieval; required), the answer (generation; required) and the contexts used
(generation; optional, texts).

Targets: measure name (:mod:`monitor.config.golden.measures`) -> threshold; latency and bad-outcome
rates must stay at or below theirs, everything else at or above. Retrieval defaults are seed
000's: MRR >= 0.70, Recall@5 >= 0.80, NDCG@5 >= 0.70, P50 <= 200 ms, P95 <= 300 ms.
Generation defaults (docs/metrics.md#answer-checks): no ``must_not_contain`` violation, every
no-context case admits it does not know, every answer in the expected language.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    JsonValue,
    SecretStr,
    field_validator,
    model_validator,
)

from monitor.config.base import Section
from monitor.config.golden.jsonpath import parse_path
from monitor.config.golden.measures import is_latency, known_measure
from monitor.config.golden.template import placeholders

DEFAULT_RETRIEVAL_TARGETS: Final[dict[str, float]] = {
    "mrr": 0.70,
    "recall_5": 0.80,
    "ndcg_5": 0.70,
    "latency_p50_ms": 200.0,
    "latency_p95_ms": 300.0,
}
DEFAULT_GENERATION_TARGETS: Final[dict[str, float]] = {
    "must_not_contain_rate": 0.0,
    "no_context_pass_rate": 1.0,
    "language_pass_rate": 1.0,
}
DEFAULT_CUTOFFS: Final = (5, 10, 30)
BUILTIN_VARIABLES: Final = frozenset(
    {"query", "question", "query_id", "top_k", "contexts", "language", "params"}
)
DEFAULT_RETRY_STATUSES: Final = (408, 425, 429, 500, 502, 503, 504)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,31}$")


class ResponseMapping(Section):
    """Where the service's JSON response holds what the runner needs."""

    doc_ids: str | None = Field(
        default=None, description="ranked document ids, best first, e.g. results[*].id"
    )
    answer: str | None = Field(default=None, description="the generated answer, e.g. answer")
    contexts: str | None = Field(
        default=None, description="texts of the contexts used, e.g. contexts[*].text"
    )

    @field_validator("doc_ids", "answer", "contexts")
    @classmethod
    def _valid_path(cls, value: str | None) -> str | None:
        if value is not None:
            parse_path(value)  # ValueError names the problem
        return value


class ServiceConfig(Section):
    """The HTTP endpoint a suite runs against."""

    url: str
    method: Literal["GET", "POST"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    secret_headers: dict[str, SecretStr] = Field(
        default_factory=dict, description="headers whose values are masked (Authorization)"
    )
    request_template: JsonValue = Field(
        default=None, description="JSON value with {{placeholders}}; a JSON string is parsed"
    )
    response: ResponseMapping = Field(default_factory=ResponseMapping)
    timeout_seconds: float = Field(default=10.0, gt=0, description="per request attempt")
    retries: int = Field(default=2, ge=0, le=10, description="extra attempts after a failure")
    backoff_seconds: float = Field(
        default=0.5, ge=0, description="wait before retry n is random, up to backoff * 2**(n-1)"
    )
    backoff_max_seconds: float = Field(default=10.0, ge=0)
    retry_statuses: list[int] = Field(default_factory=lambda: list(DEFAULT_RETRY_STATUSES))
    concurrency: int = Field(default=4, ge=1, le=256, description="requests in flight at once")
    dedupe_doc_ids: bool = Field(
        default=True, description="keep the first of repeated document ids (chunks of one doc)"
    )
    verify_tls: bool = True

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value

    @field_validator("request_template", mode="before")
    @classmethod
    def _parse_template(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"request_template is not valid JSON: {exc.msg}") from None
        return value


class ModeConfig(Section):
    """One retrieval mode (A-E, say) or pipeline variant: its request parameters."""

    description: str | None = None
    params: dict[str, JsonValue] = Field(default_factory=dict)


class ScheduleConfig(Section):
    """When the daemon runs a suite: a cron expression or a fixed interval (exactly one).

    Missed runs: a suite never runs twice at once (``max_instances=1``); a run time that comes
    while the previous run is still going is skipped. Run times missed while the daemon was busy
    or paused are coalesced into one run, made only if it is at most ``misfire_grace_seconds``
    late (``null``: however late); otherwise the suite waits for its next regular time. Run
    times that passed while the daemon was down are not caught up (the schedule lives in
    memory); ``run_on_start`` runs the suite once as soon as the daemon starts.
    """

    cron: str | None = Field(default=None, description="5-field crontab, e.g. '0 3 * * *'")
    interval_seconds: float | None = Field(default=None, gt=0)
    timezone: str = "UTC"
    misfire_grace_seconds: int | None = Field(
        default=300, ge=1, description="skip a run that would start later than this; null: never"
    )
    run_on_start: bool = False

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleConfig:
        if (self.cron is None) == (self.interval_seconds is None):
            raise ValueError("set exactly one of cron and interval_seconds")
        if self.cron is not None:
            from apscheduler.triggers.cron import (  # type: ignore[import-untyped]
                CronTrigger,
            )

            try:
                CronTrigger.from_crontab(self.cron, timezone=self.timezone)
            except Exception as exc:  # apscheduler raises ValueError or pytz/zoneinfo errors
                raise ValueError(f"invalid cron {self.cron!r}: {exc}") from None
        return self


def _default_primary(kind: str, cutoffs: list[int]) -> str:
    if kind == "generation":
        return "topic_coverage"
    return f"ndcg_{5 if 5 in cutoffs else cutoffs[0]}"


class SuiteConfig(Section):
    """One golden-set suite: a dataset, the service to run it against, modes, targets."""

    name: str = Field(description="suite label (metrics, reports); [A-Za-z0-9_.-]")
    kind: Literal["retrieval", "generation"] = "retrieval"
    dataset: Path
    service: ServiceConfig
    params: dict[str, JsonValue] = Field(
        default_factory=dict, description="request parameters every mode shares"
    )
    modes: dict[str, ModeConfig] = Field(
        default_factory=lambda: {"default": ModeConfig()},
        min_length=1,
        description="label (A-E) -> parameters; they override params",
    )
    baseline_mode: str | None = Field(
        default=None, description="modes are compared against it; default: the first mode"
    )
    gate_modes: list[str] | None = Field(
        default=None, description="modes whose targets decide pass/fail; default: all"
    )
    top_k: int | None = Field(default=None, ge=1, description="default: the largest cutoff")
    cutoffs: list[int] = Field(default_factory=lambda: list(DEFAULT_CUTOFFS), min_length=1)
    targets: dict[str, float] = Field(default_factory=dict)
    relevance_threshold: int = Field(default=2, ge=0, description="seed: grade >= 2 relevant")
    gain: Literal["exponential", "linear"] = "exponential"
    primary_metric: str | None = Field(
        default=None, description="ranks worst queries and picks the best mode for sweeps"
    )
    compare_metrics: list[str] | None = Field(
        default=None, description="measures tested between modes; default: the targets'"
    )
    length_correlation_metric: str | None = Field(
        default=None, description="correlated with query length; default ndcg_10"
    )
    sweeps: dict[str, list[JsonValue]] = Field(
        default_factory=dict, description="parameter -> values, run on sweep_mode"
    )
    sweep_mode: str = Field(default="best", description="a mode label or 'best'")
    sweep_strategy: Literal["one_at_a_time", "grid"] = "one_at_a_time"
    max_sweep_variants: int = Field(default=64, ge=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_effect: float = Field(default=0.3, ge=0, description="Cohen's d of a real improvement")
    bootstrap_resamples: int = Field(default=10_000, ge=100)
    bootstrap_seed: int = 0
    confidence: float = Field(default=0.95, gt=0, lt=1)
    worst_queries: int = Field(default=5, ge=0, description="per mode in the failure analysis")
    max_query_failures: int = Field(
        default=0, ge=0, description="failed queries per mode tolerated before the run errors"
    )
    schedule: ScheduleConfig | None = None
    report_dir: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_targets(cls, data: Any) -> Any:
        if isinstance(data, dict) and "targets" not in data:
            kind = data.get("kind", "retrieval")
            defaults = (
                DEFAULT_GENERATION_TARGETS if kind == "generation" else DEFAULT_RETRIEVAL_TARGETS
            )
            data = {**data, "targets": dict(defaults)}
        return data

    @field_validator("name")
    @classmethod
    def _label(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
        return value

    @field_validator("cutoffs")
    @classmethod
    def _cutoffs(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError("cutoffs must be positive")
        if len(set(value)) != len(value):
            raise ValueError("cutoffs repeat a value")
        return sorted(value)

    @field_validator("modes")
    @classmethod
    def _mode_labels(cls, value: dict[str, ModeConfig]) -> dict[str, ModeConfig]:
        for label in value:
            if not _MODE.match(label):
                raise ValueError(f"mode label {label!r} must match [A-Za-z0-9][A-Za-z0-9_.+-]*")
        return value

    @field_validator("sweeps")
    @classmethod
    def _sweeps(cls, value: dict[str, list[JsonValue]]) -> dict[str, list[JsonValue]]:
        for param, values in value.items():
            if param in BUILTIN_VARIABLES:
                raise ValueError(f"cannot sweep the built-in variable {param!r}")
            if not values:
                raise ValueError(f"sweep of {param!r} has no values")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SuiteConfig:
        modes = list(self.modes)
        if self.baseline_mode is not None and self.baseline_mode not in self.modes:
            raise ValueError(
                f"baseline_mode {self.baseline_mode!r} is not one of the modes {modes}"
            )
        for label in self.gate_modes or []:
            if label not in self.modes:
                raise ValueError(f"gate_modes: {label!r} is not one of the modes {modes}")
        if self.sweep_mode != "best" and self.sweep_mode not in self.modes:
            raise ValueError(f"sweep_mode {self.sweep_mode!r} is not 'best' or a mode {modes}")
        for name in self.params:
            if name in BUILTIN_VARIABLES:
                raise ValueError(f"params: {name!r} is a built-in variable")
        for label, mode in self.modes.items():
            for name in mode.params:
                if name in BUILTIN_VARIABLES:
                    raise ValueError(f"modes.{label}.params: {name!r} is a built-in variable")
        self._check_measures()
        self._check_template()
        self._check_response()
        return self

    def _check_measures(self) -> None:
        for name in self.targets:
            problem = known_measure(self.kind, name, self.cutoffs)
            if problem:
                raise ValueError(f"targets: {problem}")
        for field, names in (
            ("compare_metrics", self.compare_metrics or []),
            ("primary_metric", [self.primary_metric] if self.primary_metric else []),
            (
                "length_correlation_metric",
                [self.length_correlation_metric] if self.length_correlation_metric else [],
            ),
        ):
            for name in names:
                problem = known_measure(self.kind, name, self.cutoffs)
                if problem:
                    raise ValueError(f"{field}: {problem}")
                if is_latency(name) or name == "coverage":
                    raise ValueError(f"{field}: {name!r} is not a per-query measure")

    def _check_template(self) -> None:
        template = self.service.request_template
        if template is None:
            return
        used = placeholders(template) - BUILTIN_VARIABLES
        shared = set(self.params)
        for label, mode in self.modes.items():
            missing = used - shared - set(mode.params)
            if missing:
                raise ValueError(
                    f"request_template uses {sorted(missing)} which mode {label!r} does not "
                    "define (in params or modes.<label>.params)"
                )

    def _check_response(self) -> None:
        response = self.service.response
        if self.kind == "retrieval" and response.doc_ids is None:
            raise ValueError("service.response.doc_ids is required for a retrieval suite")
        if self.kind == "generation" and response.answer is None:
            raise ValueError("service.response.answer is required for a generation suite")

    # ---------------------------------------------------------------- derived

    @property
    def effective_top_k(self) -> int:
        return self.top_k if self.top_k is not None else max(self.cutoffs)

    @property
    def effective_baseline(self) -> str:
        return self.baseline_mode if self.baseline_mode is not None else next(iter(self.modes))

    @property
    def effective_gate_modes(self) -> list[str]:
        return list(self.gate_modes) if self.gate_modes is not None else list(self.modes)

    @property
    def effective_primary_metric(self) -> str:
        if self.primary_metric is not None:
            return self.primary_metric
        return _default_primary(self.kind, self.cutoffs)

    @property
    def effective_compare_metrics(self) -> list[str]:
        if self.compare_metrics is not None:
            return list(self.compare_metrics)
        names = [n for n in self.targets if not is_latency(n) and n != "coverage"]
        if self.kind == "retrieval":
            return names or [self.effective_primary_metric]
        primary = self.effective_primary_metric
        return [primary, *[n for n in names if n != primary]]

    @property
    def effective_length_metric(self) -> str | None:
        if self.kind != "retrieval":
            return None
        if self.length_correlation_metric is not None:
            return self.length_correlation_metric
        return f"ndcg_{10 if 10 in self.cutoffs else self.cutoffs[-1]}"

    def mode_params(self, label: str) -> dict[str, JsonValue]:
        """The request parameters of mode ``label``: ``params`` overridden by the mode's."""
        return {**self.params, **self.modes[label].params}

    def resolved_dataset(self, base_dir: Path | None) -> Path:
        """``dataset``, relative paths taken from ``base_dir`` (the config file's directory)."""
        if self.dataset.is_absolute() or base_dir is None:
            return self.dataset
        return base_dir / self.dataset


class GoldenConfig(Section):
    """``golden:`` -- the suites the daemon schedules and ``rag-monitor golden run`` runs."""

    suites: list[SuiteConfig] = Field(default_factory=list)
    judge_answers: bool = Field(
        default=True,
        description="score generation answers with the judge section's endpoint when it is "
        "active (answer correctness, semantic similarity, context recall against references; "
        "faithfulness, answer relevancy, context relevancy); false: those stay unmeasured",
    )
    report_dir: Path | None = Field(
        default=None, description="scheduled runs write <suite>/<UTC time>.md and .json here"
    )

    @model_validator(mode="after")
    def _unique_names(self) -> GoldenConfig:
        seen: set[str] = set()
        for suite in self.suites:
            if suite.name in seen:
                raise ValueError(f"suite name {suite.name!r} repeats")
            seen.add(suite.name)
        return self

    def suite(self, name: str) -> SuiteConfig:
        for suite in self.suites:
            if suite.name == name:
                return suite
        known = ", ".join(s.name for s in self.suites) or "none configured"
        raise KeyError(f"no golden suite named {name!r} (known: {known})")


__all__ = [
    "BUILTIN_VARIABLES",
    "DEFAULT_CUTOFFS",
    "DEFAULT_GENERATION_TARGETS",
    "DEFAULT_RETRIEVAL_TARGETS",
    "GoldenConfig",
    "ModeConfig",
    "ResponseMapping",
    "ScheduleConfig",
    "ServiceConfig",
    "SuiteConfig",
]
