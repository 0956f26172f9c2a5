"""Prometheus metrics of golden-set runs (``ragmon_golden_*``, declared in
:mod:`monitor.metrics_catalog`).

``metric`` values are the measure names of :mod:`monitor.config.golden.measures` (``mrr``,
``recall_5``, ``ndcg_5``, ``precision_5``, ``coverage``, ``answer_correctness``, ...). Only the
configured modes are exported, not sweep variants (their labels are unbounded), and only
measured values: an unmeasured measure (no judge) has no sample rather than a 0. When a later
run of a suite lacks a mode or measure of an earlier one, the stale series are removed. A run
that errors (service down, dataset unreadable) counts in ``ragmon_golden_runs_total`` and sets
the duration but leaves the values of the last completed run in place.
``ragmon_golden_target_ratio`` holds the ratio targets; latency targets (milliseconds) are in
the report and the JSON result. ``last_success`` is the end of the last run that *completed*
(``passed`` or ``failed``: the suite was measured), not of the last run that met its targets.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog
from monitor.config.golden.measures import is_latency
from monitor.golden.results import RunResult

_LATENCY_LABELS = {"latency_p50_ms": "p50", "latency_p95_ms": "p95", "latency_p99_ms": "p99"}


class GoldenMetrics:
    """Exports golden-set results into ``registry`` (the daemon's registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.metric = catalog.create(catalog.GOLDEN_METRIC, registry)
        self.target = catalog.create(catalog.GOLDEN_TARGET, registry)
        self.latency = catalog.create(catalog.GOLDEN_LATENCY, registry)
        self.runs = catalog.create(catalog.GOLDEN_RUNS, registry)
        self.last_success = catalog.create(catalog.GOLDEN_LAST_SUCCESS, registry)
        self.duration = catalog.create(catalog.GOLDEN_RUN_DURATION, registry)
        self._series: dict[str, set[tuple[str, ...]]] = {}
        self._latency_series: dict[str, set[tuple[str, ...]]] = {}
        self._target_series: dict[str, set[tuple[str, ...]]] = {}

    def init_suite(self, suite: str, targets: Mapping[str, float]) -> None:
        """Create a suite's run counters at 0 and publish its targets (before the first run)."""
        catalog.zero(catalog.GOLDEN_RUNS, self.runs, suite=suite)
        self._set_targets(suite, targets)

    def _set_targets(self, suite: str, targets: Mapping[str, float]) -> None:
        fresh: set[tuple[str, ...]] = {(suite, name) for name in targets if not is_latency(name)}
        for labels in self._target_series.get(suite, set()) - fresh:
            self.target.remove(*labels)
        for name, value in targets.items():
            if not is_latency(name):
                self.target.labels(suite=suite, metric=name).set(value)
        self._target_series[suite] = fresh

    def record(self, result: RunResult) -> None:
        """Export a finished run: counters and duration; values and timestamp unless it errored."""
        suite = result.suite
        self.runs.labels(suite=suite, outcome=result.outcome).inc()
        self.duration.labels(suite=suite).set(result.duration_seconds)
        self._set_targets(suite, result.targets)
        if result.outcome == "error":
            return  # keep the values of the last completed run; its timestamp shows their age
        series: set[tuple[str, ...]] = set()
        latency_series: set[tuple[str, ...]] = set()
        for mode in result.modes:
            for name, value in mode.metrics.items():
                if value is None:
                    continue
                labels: tuple[str, ...]
                if is_latency(name):
                    labels = (suite, mode.label, _LATENCY_LABELS[name])
                    self.latency.labels(*labels).set(value / 1000.0)
                    latency_series.add(labels)
                else:
                    labels = (suite, mode.label, name)
                    self.metric.labels(*labels).set(value)
                    series.add(labels)
        for labels in self._series.get(suite, set()) - series:
            self.metric.remove(*labels)
        for labels in self._latency_series.get(suite, set()) - latency_series:
            self.latency.remove(*labels)
        self._series[suite] = series
        self._latency_series[suite] = latency_series
        self.last_success.labels(suite=suite).set(result.finished_at.timestamp())


__all__ = ["GoldenMetrics"]
