"""The daemon's Prometheus metrics (prefix `ragmon_`); the README's table lists every one.

Each daemon owns its registry so several can run in one process (tests). Label values are
bounded: agents beyond `max_agents` export as "other"; ids never become labels.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from monitor import __version__

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
OTHER_AGENT = "other"
SKIP_REASONS = ("otlp_not_rag", "otlp_no_spans", "otlp_late_spans")
DEAD_LETTER_REASONS = (
    "invalid_json",
    "invalid_utf8",
    "schema_violation",
    "unknown_schema_version",
    "too_large",
    "empty_message",
    "otlp_undecodable",
    "otlp_unmappable",
    "processing_error",
)


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
        self.build_info = Info("ragmon_build", "Version of the running daemon.", registry=r)
        self.build_info.info({"version": __version__, "python": platform.python_version()})
        self.messages_consumed = Counter(
            "ragmon_messages_consumed",
            "Messages read from the input topics (or lines from the file source).",
            ["topic"],
            registry=r,
        )
        self.traces_decoded = Counter(
            "ragmon_traces_decoded",
            "Traces decoded from input, by wire format.",
            ["format"],
            registry=r,
        )
        self.traces_skipped = Counter(
            "ragmon_traces_skipped",
            "Input deliberately not processed (for example OTLP traces with no RAG turn).",
            ["reason"],
            registry=r,
        )
        self.dead_letters = Counter(
            "ragmon_dead_letters",
            "Messages sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=r,
        )
        self.traces_processed = Counter(
            "ragmon_traces_processed",
            "Traces handed to the processing stage, by agent and outcome (ok or error).",
            ["agent", "outcome"],
            registry=r,
        )
        self.processing_seconds = Histogram(
            "ragmon_processing_duration_seconds",
            "Time from a trace being read to its processing finishing.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "ragmon_in_flight_traces", "Traces read but not yet finished.", registry=r
        )
        self.consumer_lag = Gauge(
            "ragmon_kafka_consumer_lag_messages",
            "Messages between the partition's end and the committable position (never negative).",
            ["topic", "partition"],
            registry=r,
        )
        self.last_commit = Gauge(
            "ragmon_kafka_last_commit_timestamp_seconds",
            "Unix time of the last successful offset commit.",
            registry=r,
        )
        self.commits = Counter(
            "ragmon_kafka_commits",
            "Offset commit attempts, by outcome (ok or error).",
            ["outcome"],
            registry=r,
        )
        self.assigned_partitions = Gauge(
            "ragmon_kafka_assigned_partitions",
            "Partitions currently assigned to this replica's consumers.",
            registry=r,
        )
        self._assigned_by_consumer: dict[str, int] = {}
        self.rebalances = Counter(
            "ragmon_kafka_rebalances", "Partition assignments received.", registry=r
        )
        self.ready = Gauge(
            "ragmon_ready", "1 when the source is consuming (same as /readyz).", registry=r
        )
        # Known label values start at 0, so rate() and alerts see a series before the first event.
        for reason in SKIP_REASONS:
            self.traces_skipped.labels(reason)
        for reason in DEAD_LETTER_REASONS:
            self.dead_letters.labels(reason)
        for outcome in ("ok", "error"):
            self.commits.labels(outcome)

    def set_assigned(self, consumer: str, partitions: int) -> None:
        """One consumer's assignment changed; the gauge shows all consumers' partitions."""
        self._assigned_by_consumer[consumer] = partitions
        self.assigned_partitions.set(sum(self._assigned_by_consumer.values()))
