"""Metrics of the scoring stage: score histograms, unmeasured counts, flags, sampler decisions."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from monitor.export.metrics import AgentLabels
from monitor.models import EvaluationResult

SCORE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
MAX_EXEMPLAR_ID_CHARS = 64
# Scores that become histogram series; other per-result values (e.g. `support`) stay in results.
EXPORTED_SCORES = frozenset(
    {
        "faithfulness",
        "support",
        "answer_relevancy",
        "context_precision",
        "context_utilization",
        "context_relevancy",
    }
)


class RollingMeans(Collector):
    """Per-replica mean of each (agent, metric, evaluator) over a sliding time window.

    Values are summed into one-second buckets, so memory is bounded by the window length and the
    number of series, not by the traffic.
    """

    def __init__(self, window_seconds: float) -> None:
        self._window = window_seconds
        # key -> deque of [second, sum, count], oldest first
        self._buckets: dict[tuple[str, str, str], deque[list[float]]] = {}

    def add(self, key: tuple[str, str, str], value: float, now: float | None = None) -> None:
        second = float(int(time.monotonic() if now is None else now))
        buckets = self._buckets.setdefault(key, deque())
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += value
            buckets[-1][2] += 1
        else:
            buckets.append([second, value, 1.0])
            self._prune(buckets, second)

    def _prune(self, buckets: deque[list[float]], now: float) -> None:
        while buckets and buckets[0][0] <= now - self._window:
            buckets.popleft()

    def means(self, now: float | None = None) -> dict[tuple[str, str, str], float]:
        now = time.monotonic() if now is None else now
        result = {}
        for key, buckets in list(self._buckets.items()):
            self._prune(buckets, now)
            count = sum(b[2] for b in buckets)
            if count:
                result[key] = sum(b[1] for b in buckets) / count
        return result

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "ragmon_evaluation_score_mean_ratio",
            "Mean score over the rolling window, per replica (use the histogram across replicas).",
            labels=["agent", "metric", "evaluator"],
        )
        for key, mean in self.means().items():
            family.add_metric(list(key), mean)
        yield family


class ScoringMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        agent_label: AgentLabels,
        rolling_window_seconds: float = 300.0,
    ) -> None:
        r = registry
        self.agent_label = agent_label
        self.scores = Histogram(
            "ragmon_evaluation_score_ratio",
            "Measured scores in [0, 1].",
            ["agent", "metric", "evaluator"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.unmeasured = Counter(
            "ragmon_evaluation_unmeasured",
            "Scores that could not be computed, by reason.",
            ["agent", "metric", "evaluator", "reason"],
            registry=r,
        )
        self.evaluations = Counter(
            "ragmon_evaluations",
            "Evaluations run, by outcome (ok, partial, error).",
            ["agent", "evaluator", "outcome"],
            registry=r,
        )
        self.flags = Counter(
            "ragmon_evaluation_flags",
            "Tier-0 flags raised, by reason.",
            ["agent", "reason"],
            registry=r,
        )
        self.statements = Counter(
            "ragmon_statements",
            "Answer statements judged, supported or unsupported.",
            ["agent", "evaluator", "outcome"],
            registry=r,
        )
        self.sampler_decisions = Counter(
            "ragmon_sampler_decisions",
            "Sampler decisions: sampled, priority, skipped, shed.",
            ["agent", "outcome"],
            registry=r,
        )
        self.sampler_shed = Counter(
            "ragmon_sampler_shed",
            "Judge work dropped under load, by reason.",
            ["agent", "reason"],
            registry=r,
        )
        self.effective_rate = Gauge(
            "ragmon_sampler_effective_rate_ratio",
            "Sampling rate in force after load shedding.",
            ["agent"],
            registry=r,
        )
        self.judge_queue = Gauge(
            "ragmon_judge_queue_depth", "Traces waiting for the judge.", registry=r
        )
        self.results_published = Counter(
            "ragmon_results_published",
            "Results written to the results topic.",
            ["outcome"],
            registry=r,
        )
        self.store_writes = Counter(
            "ragmon_store_writes", "Results written to the store.", ["outcome"], registry=r
        )
        for outcome in ("ok", "error"):
            self.results_published.labels(outcome)
            self.store_writes.labels(outcome)
        self.rolling = RollingMeans(rolling_window_seconds)
        r.register(self.rolling)

    def record(self, result: EvaluationResult) -> None:
        agent = self.agent_label(result.agent)
        evaluator = result.evaluator
        exemplar = (
            {"trace_id": result.trace_id} if len(result.trace_id) <= MAX_EXEMPLAR_ID_CHARS else None
        )
        unmeasured = 0
        for metric, score in result.scores.items():
            if metric not in EXPORTED_SCORES:
                continue
            if score.value is None:
                unmeasured += 1
                self.unmeasured.labels(agent, metric, evaluator, score.reason or "unknown").inc()
                continue
            self.scores.labels(agent, metric, evaluator).observe(score.value, exemplar=exemplar)
            self.rolling.add((agent, metric, evaluator), score.value)
        outcome = "error" if result.errors and unmeasured else ("partial" if unmeasured else "ok")
        self.evaluations.labels(agent, evaluator, outcome).inc()
        for flag in result.flags:
            self.flags.labels(agent, flag).inc()
        supported = sum(1 for s in result.statements if s.supported)
        if supported:
            self.statements.labels(agent, evaluator, "supported").inc(supported)
        if len(result.statements) - supported:
            self.statements.labels(agent, evaluator, "unsupported").inc(
                len(result.statements) - supported
            )
