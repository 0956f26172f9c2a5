"""Metrics of the scoring stage: score histograms, unmeasured counts, flags, sampler decisions,
and the running sums of the population estimates (monitor.estimates)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from monitor import metrics_catalog as catalog
from monitor.metrics import AgentLabels, Children
from monitor.models import EvaluationResult, Selection

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
        self._buckets: dict[tuple[str, ...], deque[list[float]]] = {}

    def add(self, key: tuple[str, ...], value: float, now: float | None = None) -> None:
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

    def means(self, now: float | None = None) -> dict[tuple[str, ...], float]:
        now = time.monotonic() if now is None else now
        result = {}
        for key, buckets in list(self._buckets.items()):
            self._prune(buckets, now)
            count = sum(b[2] for b in buckets)
            if count:
                result[key] = sum(b[1] for b in buckets) / count
        return result

    def collect(self) -> Iterator[Metric]:
        family = catalog.EVALUATION_SCORE_MEAN.family()
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
        self.scores = catalog.create(catalog.EVALUATION_SCORE, r)
        self.unmeasured = catalog.create(catalog.EVALUATION_UNMEASURED, r)
        self.evaluations = catalog.create(catalog.EVALUATIONS, r)
        self.flags = catalog.create(catalog.EVALUATION_FLAGS, r)
        self.statements = catalog.create(catalog.STATEMENTS, r)
        self.sampler_decisions = catalog.create(catalog.SAMPLER_DECISIONS, r)
        self.sampler_priorities = catalog.create(catalog.SAMPLER_PRIORITIES, r)
        self.sampler_shed = catalog.create(catalog.SAMPLER_SHED, r)
        self.effective_rate = catalog.create(catalog.SAMPLER_EFFECTIVE_RATE, r)
        self.input_share = catalog.create(catalog.SAMPLER_INPUT_SHARE, r)
        self.judge_queue = catalog.create(catalog.JUDGE_QUEUE_DEPTH, r)
        self.results_published = catalog.create(catalog.RESULTS_PUBLISHED, r)
        self.store_writes = catalog.create(catalog.STORE_WRITES, r)
        self.estimate_terms = catalog.create(catalog.ESTIMATE_TERMS, r)
        self.estimate_weighted_terms = catalog.create(catalog.ESTIMATE_WEIGHTED_TERMS, r)
        self.rolling = RollingMeans(rolling_window_seconds)
        r.register(self.rolling)
        # the children a trace updates, looked up once per label values
        self.score_series = Children(self.scores)
        self.evaluation_series = Children(self.evaluations)
        self.flag_series = Children(self.flags)
        self.statement_series = Children(self.statements)
        self.published = Children(self.results_published)
        self.written = Children(self.store_writes)
        self.rate_series = Children(self.effective_rate)

    def record(self, result: EvaluationResult) -> None:
        agent = self.agent_label(result.agent)
        evaluator = result.evaluator
        selection = selection_label(result.selection)
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
            series = (agent, metric, evaluator, selection)
            self.score_series(*series).observe(score.value, exemplar=exemplar)
            self.rolling.add(series, score.value)
        outcome = "error" if result.errors and unmeasured else ("partial" if unmeasured else "ok")
        self.evaluation_series(agent, evaluator, outcome).inc()
        for flag in result.flags:
            self.flag_series(agent, flag).inc()
        supported = sum(1 for s in result.statements if s.supported)
        if supported:
            self.statement_series(agent, evaluator, "supported").inc(supported)
        if len(result.statements) - supported:
            self.statement_series(agent, evaluator, "unsupported").inc(
                len(result.statements) - supported
            )


def selection_label(selection: Selection | None) -> str:
    """`all` for results of every trace (tier 0, or without a judge), else the judge's draw:
    `uniform` when the uniform draw chose the trace, `priority` when only a priority did."""
    if selection is None:
        return "all"
    return "uniform" if selection.uniform else "priority"
