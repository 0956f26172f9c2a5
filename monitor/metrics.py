"""The daemon's ingest, delivery and processing metrics (declared in `metrics_catalog`).

Each daemon owns its registry so several can run in one process (tests). Label values are
bounded: agents beyond `max_agents` export as "other"; ids never become labels.
"""

from __future__ import annotations

import platform
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from monitor import __version__
from monitor import metrics_catalog as catalog
from monitor.compiled import fully_compiled

OTHER_AGENT = "other"

M = TypeVar("M", bound=MetricWrapperBase)


class Children(Generic[M]):
    """A labelled metric's children by their label values, each asked of the metric once.

    `.labels()` checks, converts and joins its values on every call (about 2 µs); a trace
    updates a dozen series. Only for metrics whose children are never removed, and whose label
    values are bounded already (they are series).
    """

    def __init__(self, metric: M) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class AgentLabels:
    """Caps the number of distinct `agent` label values a misbehaving producer can create."""

    def __init__(self, max_agents: int) -> None:
        self._max = max_agents
        self._seen: set[str] = set()

    def __call__(self, agent: str) -> str:
        if agent in self._seen:
            return agent
        if len(self._seen) >= self._max:
            return OTHER_AGENT
        self._seen.add(agent)
        return agent


class Metrics:
    """Ingest, delivery and processing metrics of one daemon."""

    def __init__(self, registry: CollectorRegistry | None = None, max_agents: int = 50) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.agent_label = AgentLabels(max_agents)
        r = self.registry
        self.build_info = catalog.create(catalog.BUILD_INFO, r)
        self.build_info.info(
            {
                "version": __version__,
                "python": platform.python_version(),
                "compiled": "true" if fully_compiled() else "false",
            }
        )
        self.messages_consumed = catalog.create(catalog.MESSAGES_CONSUMED, r)
        self.traces_decoded = catalog.create(catalog.TRACES_DECODED, r)
        self.traces_skipped = catalog.create(catalog.TRACES_SKIPPED, r)
        self.dead_letters = catalog.create(catalog.DEAD_LETTERS, r)
        self.traces_processed = catalog.create(catalog.TRACES_PROCESSED, r)
        self.processed = Children(self.traces_processed)
        self.processing_seconds = catalog.create(catalog.PROCESSING_DURATION, r)
        self.in_flight = catalog.create(catalog.IN_FLIGHT, r)
        self.consumer_lag = catalog.create(catalog.CONSUMER_LAG, r)
        self.last_commit = catalog.create(catalog.LAST_COMMIT, r)
        self.commits = catalog.create(catalog.COMMITS, r)
        self.assigned_partitions = catalog.create(catalog.ASSIGNED_PARTITIONS, r)
        self._assigned_by_consumer: dict[str, int] = {}
        self.rebalances = catalog.create(catalog.REBALANCES, r)
        self.ready = catalog.create(catalog.READY, r)
        self.stuck_partitions = catalog.create(catalog.STUCK_PARTITIONS, r)

    def set_assigned(self, consumer: str, partitions: int) -> None:
        """One consumer's assignment changed; the gauge shows all consumers' partitions."""
        self._assigned_by_consumer[consumer] = partitions
        self.assigned_partitions.set(sum(self._assigned_by_consumer.values()))
