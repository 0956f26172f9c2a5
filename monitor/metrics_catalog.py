"""Every Prometheus metric the daemon exports, as data: the one place a metric is declared.

A :class:`MetricSpec` says what a scraper sees: the series name (counters with ``_total``, the
build info with ``_info``), the type, the help text, the labels, the histogram buckets, and the
label values created at 0 so that ``rate()`` and alerts see a series before the first event.
:func:`create` makes the collector on a registry (every daemon owns its registry, so several can
run in one process); the metrics classes beside the code that records (``monitor/metrics.py``
for the core pipeline, ``stages/conversation.py``, ``sinks/scoring_metrics.py``, ...) get all
their collectors from here.

The metrics contract is this module: the dashboards and alert rules may use only these series
and labels (``dashboards/contract.py``), the tables of ``docs/exported-metrics.md`` must list
exactly these, with the same types and labels (``tests/test_metrics_catalog.py``), and a running
daemon exports nothing else (``tests/test_prometheus_e2e.py``, ``tests/test_process.py``).
Labels are bounded; trace, conversation and user ids never become labels (trace ids ride as
exemplars).

This module imports nothing of the daemon's, so that any layer can import it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily

MetricType = Literal["counter", "gauge", "histogram", "info"]
C = TypeVar("C", Counter, Gauge, Histogram, Info)
_TYPES: dict[type[object], MetricType] = {
    Counter: "counter",
    Gauge: "gauge",
    Histogram: "histogram",
    Info: "info",
}
_SUFFIX: dict[MetricType, str] = {"counter": "_total", "info": "_info"}


@dataclass(frozen=True, eq=False)
class MetricSpec(Generic[C]):
    """One metric as a scraper sees it.

    `preset` gives the known values of some labels: :func:`create` makes every combination at 0
    when all labels have known values; :func:`zero` does it once the values of the others
    (an evaluator, a suite) are known. `collected` marks a metric a custom collector yields
    (:meth:`family`) instead of one :func:`create` makes. For the build info, `labels` are the
    keys of the info the owner sets.
    """

    name: str
    kind: type[C]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    preset: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    collected: bool = False

    def __post_init__(self) -> None:
        if not self.name.startswith("ragmon_"):
            raise ValueError(f"{self.name}: every metric's name starts with ragmon_")
        suffix = _SUFFIX.get(self.type)
        if suffix is not None and not self.name.endswith(suffix):
            raise ValueError(f"{self.name}: a {self.type}'s series name ends with {suffix}")
        if (self.buckets is not None) != (self.type == "histogram"):
            raise ValueError(f"{self.name}: buckets are given for histograms, and only for them")
        unknown = set(self.preset) - set(self.labels)
        if unknown:
            raise ValueError(f"{self.name}: preset values for labels it lacks: {sorted(unknown)}")

    @property
    def type(self) -> MetricType:
        return _TYPES[self.kind]

    @property
    def family_name(self) -> str:
        """The name prometheus_client and OpenMetrics give the family (no ``_total``/``_info``)."""
        return self.name.removesuffix(_SUFFIX.get(self.type, ""))

    def family(self) -> GaugeMetricFamily:
        """An empty family for a custom collector to fill (gauges only)."""
        if self.type != "gauge" or not self.collected:
            raise TypeError(f"{self.name} is not a gauge yielded by a custom collector")
        return GaugeMetricFamily(self.name, self.help, labels=list(self.labels))


AnySpec = MetricSpec[Counter] | MetricSpec[Gauge] | MetricSpec[Histogram] | MetricSpec[Info]
_DECLARED: list[AnySpec] = []


def _declare(spec: MetricSpec[C]) -> MetricSpec[C]:
    _DECLARED.append(spec)
    return spec


def create(spec: MetricSpec[C], registry: CollectorRegistry) -> C:
    """The collector of `spec` on `registry`, with the preset series made when it can be."""
    if spec.collected:
        raise TypeError(f"{spec.name} is yielded by a custom collector (MetricSpec.family)")
    # An info's labels are the keys its owner sets, not label names; prometheus_client adds the
    # `_total` and `_info` suffixes to the family name itself.
    labelnames = () if spec.type == "info" else spec.labels
    extra: dict[str, Any] = {} if spec.buckets is None else {"buckets": spec.buckets}
    collector = spec.kind(spec.family_name, spec.help, labelnames, registry=registry, **extra)
    if spec.labels and set(spec.preset) == set(spec.labels):
        zero(spec, collector)
    return collector


def zero(spec: MetricSpec[C], collector: C, **fixed: str) -> None:
    """Create at 0 the series of every preset label value, with `fixed` for the other labels."""
    choices: list[tuple[str, ...]] = []
    for label in spec.labels:
        if label in fixed:
            choices.append((fixed[label],))
        elif label in spec.preset:
            choices.append(spec.preset[label])
        else:
            raise ValueError(f"{spec.name}: no value for label {label!r}")
    for values in itertools.product(*choices):
        collector.labels(*values)


# --- label values known in advance ---------------------------------------------------------------

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
    "too_many_spans",
    "processing_error",
    "trace_id_conflict",
    "store_rejected",
)
OK_ERROR = ("ok", "error")
WRITE_OUTCOMES = ("ok", "error", "unchanged")
RetryOperation = Literal[
    "dead_letters",  # producing a dead letter (until acknowledged)
    "internal_topics",  # producing to the daemon's own topics (until acknowledged)
    "results",  # producing to the results topic (until acknowledged)
    "store",  # the results store while its database is away (until it answers)
    "judge_chat",  # a judge chat call (bounded: judge.max_retries)
    "judge_embeddings",  # a judge embeddings request (bounded: judge.max_retries)
    "golden_service",  # a golden-set query to the service under test (bounded: retries)
]
RETRY_OPERATIONS: tuple[RetryOperation, ...] = get_args(RetryOperation)
JudgeRequestOutcome = Literal["ok", "error", "timeout", "rate_limited", "malformed", "truncated"]
JUDGE_REQUEST_OUTCOMES: tuple[JudgeRequestOutcome, ...] = get_args(JudgeRequestOutcome)
JudgeEndpoint = Literal["chat", "embeddings"]
JUDGE_ENDPOINTS: tuple[JudgeEndpoint, ...] = get_args(JudgeEndpoint)
GOLDEN_RUN_OUTCOMES = ("passed", "failed", "error")  # golden.results.Outcome
# Which traces a score comes from: every trace (tier 0), the judge's uniform draw, or the
# judge's priorities (models.Selection).
SELECTIONS = ("all", "uniform", "priority")
ESTIMATE_QUANTITIES = ("mean", "below")

# --- buckets --------------------------------------------------------------------------------------

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SCORE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
JUDGE_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
JUDGE_PACE_PHASES = ("prompt", "generation")
RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
MEMORY_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
OUTCOME_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)

# --- ingest, delivery and processing --------------------------------------------------------------

BUILD_INFO = _declare(
    MetricSpec(
        "ragmon_build_info",
        Info,
        "Version of the running daemon, and whether the modules a build can compile run compiled.",
        ("version", "python", "compiled"),
    )
)
MESSAGES_CONSUMED = _declare(
    MetricSpec(
        "ragmon_messages_consumed_total",
        Counter,
        "Messages read from the input topics (or lines from the file source).",
        ("topic",),
    )
)
TRACES_DECODED = _declare(
    MetricSpec(
        "ragmon_traces_decoded_total",
        Counter,
        "Traces decoded from input, by wire format.",
        ("format",),
    )
)
TRACES_SKIPPED = _declare(
    MetricSpec(
        "ragmon_traces_skipped_total",
        Counter,
        "Input deliberately not processed (for example OTLP traces with no RAG turn).",
        ("reason",),
        preset={"reason": SKIP_REASONS},
    )
)
DEAD_LETTERS = _declare(
    MetricSpec(
        "ragmon_dead_letters_total",
        Counter,
        "Messages sent to the dead-letter topic, by reason.",
        ("reason",),
        preset={"reason": DEAD_LETTER_REASONS},
    )
)
TRACES_PROCESSED = _declare(
    MetricSpec(
        "ragmon_traces_processed_total",
        Counter,
        "Traces handed to the processing stage, by agent and outcome (ok or error).",
        ("agent", "outcome"),
    )
)
PROCESSING_DURATION = _declare(
    MetricSpec(
        "ragmon_processing_duration_seconds",
        Histogram,
        "Time from a trace being read to its processing finishing.",
        buckets=LATENCY_BUCKETS,
    )
)
IN_FLIGHT = _declare(
    MetricSpec("ragmon_in_flight_traces", Gauge, "Traces read but not yet finished.")
)
CONSUMER_LAG = _declare(
    MetricSpec(
        "ragmon_kafka_consumer_lag_messages",
        Gauge,
        "Messages between the partition's end and the committable position (never negative).",
        ("topic", "partition"),
    )
)
LAST_COMMIT = _declare(
    MetricSpec(
        "ragmon_kafka_last_commit_timestamp_seconds",
        Gauge,
        "Unix time of the last successful offset commit.",
    )
)
COMMITS = _declare(
    MetricSpec(
        "ragmon_kafka_commits_total",
        Counter,
        "Offset commit attempts, by outcome (ok or error).",
        ("outcome",),
        preset={"outcome": OK_ERROR},
    )
)
ASSIGNED_PARTITIONS = _declare(
    MetricSpec(
        "ragmon_kafka_assigned_partitions",
        Gauge,
        "Partitions currently assigned to this replica's consumers.",
    )
)
OTLP_ASSEMBLY_TRACES = _declare(
    MetricSpec(
        "ragmon_otlp_assembly_traces",
        Gauge,
        "Traces held by the assembler: pending (not yet released) or kept (grace period).",
        ("state",),
        preset={"state": ("pending", "kept")},
    )
)
OTLP_ASSEMBLY_BYTES = _declare(
    MetricSpec(
        "ragmon_otlp_assembly_bytes",
        Gauge,
        "Bytes the assembler holds for pending and kept traces: their parts and an estimate of "
        "their bookkeeping.",
    )
)
OTLP_TRACES_RELEASED = _declare(
    MetricSpec(
        "ragmon_otlp_traces_released_total",
        Counter,
        "Traces released by the assembler: complete, incomplete, or revised (late spans).",
        ("outcome",),
        preset={"outcome": ("complete", "incomplete", "revised")},
    )
)
OTLP_ASSEMBLY_SHED = _declare(
    MetricSpec(
        "ragmon_otlp_assembly_shed_total",
        Counter,
        "Traces the memory bound made the assembler give up on early, by reason.",
        ("reason",),
        preset={"reason": ("pending_limit", "grace_limit")},
    )
)
OTLP_ASSEMBLY_PAUSED = _declare(
    MetricSpec(
        "ragmon_otlp_assembly_paused_seconds_total",
        Counter,
        "Seconds the OTLP stage stopped reading until traces due within the settle time were "
        "released, because the traces it was assembling filled its bound (backpressure).",
    )
)
REBALANCES = _declare(
    MetricSpec("ragmon_kafka_rebalances_total", Counter, "Partition assignments received.")
)
READY = _declare(
    MetricSpec("ragmon_ready", Gauge, "1 when the source is consuming (same as /readyz).")
)
STUCK_PARTITIONS = _declare(
    MetricSpec(
        "ragmon_stuck_partitions",
        Gauge,
        "Partitions of a stage whose lowest unfinished message has not finished for "
        "kafka.stuck_seconds (the stage makes no progress there while it has work).",
        ("stage",),
        preset={"stage": ("scoring", "otlp")},
    )
)
RETRIES = _declare(
    MetricSpec(
        "ragmon_retries_total",
        Counter,
        "Failed attempts that were retried, by operation.",
        ("operation",),
        preset={"operation": RETRY_OPERATIONS},
    )
)

# --- scoring --------------------------------------------------------------------------------------

EVALUATION_SCORE = _declare(
    MetricSpec(
        "ragmon_evaluation_score_ratio",
        Histogram,
        "Measured scores in [0, 1].",
        ("agent", "metric", "evaluator", "selection"),
        buckets=SCORE_BUCKETS,
    )
)
EVALUATION_SCORE_MEAN = _declare(
    MetricSpec(
        "ragmon_evaluation_score_mean_ratio",
        Gauge,
        "Mean score over the rolling window, per replica (use the histogram across replicas).",
        ("agent", "metric", "evaluator", "selection"),
        collected=True,
    )
)
EVALUATION_UNMEASURED = _declare(
    MetricSpec(
        "ragmon_evaluation_unmeasured_total",
        Counter,
        "Scores that could not be computed, by reason.",
        ("agent", "metric", "evaluator", "reason"),
    )
)
EVALUATIONS = _declare(
    MetricSpec(
        "ragmon_evaluations_total",
        Counter,
        "Evaluations run, by outcome (ok, partial, error).",
        ("agent", "evaluator", "outcome"),
    )
)
EVALUATION_FLAGS = _declare(
    MetricSpec(
        "ragmon_evaluation_flags_total",
        Counter,
        "Tier-0 flags raised, by reason.",
        ("agent", "reason"),
    )
)
STATEMENTS = _declare(
    MetricSpec(
        "ragmon_statements_total",
        Counter,
        "Answer statements judged, supported or unsupported.",
        ("agent", "evaluator", "outcome"),
    )
)
SAMPLER_DECISIONS = _declare(
    MetricSpec(
        "ragmon_sampler_decisions_total",
        Counter,
        "Sampler decisions: sampled, priority, skipped, shed.",
        ("agent", "outcome"),
    )
)
SAMPLER_PRIORITIES = _declare(
    MetricSpec(
        "ragmon_sampler_priorities_total",
        Counter,
        "Traces matching a priority rule for the judge, by rule.",
        ("agent", "reason"),
    )
)
SAMPLER_SHED = _declare(
    MetricSpec(
        "ragmon_sampler_shed_total",
        Counter,
        "Judge work dropped under load, by reason.",
        ("agent", "reason"),
    )
)
SAMPLER_EFFECTIVE_RATE = _declare(
    MetricSpec(
        "ragmon_sampler_effective_rate_ratio",
        Gauge,
        "Uniform sampling rate in force (configured or quiet-agent floor), after load shedding.",
        ("agent",),
    )
)
SAMPLER_INPUT_SHARE = _declare(
    MetricSpec(
        "ragmon_sampler_input_share_ratio",
        Gauge,
        "This replica's share of the scored input's partitions, which scales its sampling floor.",
    )
)
ESTIMATE_TERMS = _declare(
    MetricSpec(
        "ragmon_estimate_terms_total",
        Counter,
        "Running sums the population estimates of the judge's scores are computed from.",
        ("agent", "metric", "evaluator", "quantity", "term"),
    )
)
ESTIMATE_WEIGHTED_TERMS = _declare(
    MetricSpec(
        "ragmon_estimate_weighted_terms_total",
        Counter,
        "Running sums over every judged trace, weighted by its inverse chance of being judged.",
        ("agent", "metric", "evaluator", "quantity", "term"),
    )
)
ESTIMATE_CALIBRATION_LABELS = _declare(
    MetricSpec(
        "ragmon_estimate_calibration_labels",
        Gauge,
        "Judged traces the tier-0 calibration is fitted on, per replica.",
        ("metric", "language"),
        collected=True,
    )
)
ESTIMATE_CALIBRATION_AGE = _declare(
    MetricSpec(
        "ragmon_estimate_calibration_age_seconds",
        Gauge,
        "Seconds since the tier-0 calibration last took in a judged trace, per replica.",
        ("metric", "language"),
        collected=True,
    )
)
JUDGE_QUEUE_DEPTH = _declare(
    MetricSpec("ragmon_judge_queue_depth", Gauge, "Traces waiting for the judge.")
)
JUDGE_REQUESTS = _declare(
    MetricSpec(
        "ragmon_judge_requests_total",
        Counter,
        "Chat-completion requests sent to the judge endpoint, by outcome.",
        ("evaluator", "outcome"),
        preset={"outcome": JUDGE_REQUEST_OUTCOMES},
    )
)
JUDGE_REQUEST_DURATION = _declare(
    MetricSpec(
        "ragmon_judge_request_duration_seconds",
        Histogram,
        "Latency of one chat-completion request to the judge endpoint.",
        ("evaluator",),
        buckets=JUDGE_LATENCY_BUCKETS,
    )
)
JUDGE_INPUT_TOKENS = _declare(
    MetricSpec(
        "ragmon_judge_input_tokens_total",
        Counter,
        "Prompt tokens reported in the judge responses' usage.",
        ("evaluator",),
    )
)
JUDGE_OUTPUT_TOKENS = _declare(
    MetricSpec(
        "ragmon_judge_output_tokens_total",
        Counter,
        "Completion tokens reported in the judge responses' usage.",
        ("evaluator",),
    )
)
JUDGE_COST = _declare(
    MetricSpec(
        "ragmon_judge_cost_dollars_total",
        Counter,
        "Cost of the judge's tokens at the configured prices per million tokens.",
        ("evaluator",),
    )
)
JUDGE_CACHE_LOOKUPS = _declare(
    MetricSpec(
        "ragmon_judge_cache_lookups_total",
        Counter,
        "Judge cache lookups, hit or miss.",
        ("outcome",),
        preset={"outcome": ("hit", "miss")},
    )
)
JUDGE_CIRCUIT_OPEN = _declare(
    MetricSpec(
        "ragmon_judge_circuit_open",
        Gauge,
        "1 while the judge's circuit breaker is open (calls are not made), per endpoint.",
        ("evaluator", "endpoint"),
        preset={"endpoint": JUDGE_ENDPOINTS},
    )
)
JUDGE_CONCURRENCY_LIMIT = _declare(
    MetricSpec(
        "ragmon_judge_concurrency_limit",
        Gauge,
        "Requests the judge lets run at once on an endpoint now (adaptive, up to "
        "judge.max_concurrency).",
        ("evaluator", "endpoint"),
    )
)
JUDGE_TOKENS_PER_SECOND = _declare(
    MetricSpec(
        "ragmon_judge_tokens_per_second",
        Gauge,
        "The judge chat endpoint's observed speed for one request: prompt tokens read and "
        "tokens generated per second (from the usage the server reports).",
        ("evaluator", "phase"),
    )
)
JUDGE_SLOWDOWN = _declare(
    MetricSpec(
        "ragmon_judge_slowdown_ratio",
        Gauge,
        "Judge chat latency at the current concurrency over that of requests alone, for "
        "requests of the same size (1: no queueing).",
        ("evaluator",),
    )
)
RESULTS_PUBLISHED = _declare(
    MetricSpec(
        "ragmon_results_published_total",
        Counter,
        "Results written to the results topic (unchanged: re-processed, the same, not sent).",
        ("outcome",),
        preset={"outcome": WRITE_OUTCOMES},
    )
)
STORE_WRITES = _declare(
    MetricSpec(
        "ragmon_store_writes_total",
        Counter,
        "Results written to the store (unchanged: re-processed, the same, not written).",
        ("outcome",),
        preset={"outcome": WRITE_OUTCOMES},
    )
)

# --- conversations (multi-turn, per agent) -------------------------------------------------------

TURN_HALLUCINATION = _declare(
    MetricSpec(
        "ragmon_turn_hallucination_ratio",
        Histogram,
        "H_t per turn; H_u = _sum / _count.",
        ("agent", "evaluator", "turn_bucket"),
        buckets=RATIO_BUCKETS,
    )
)
TURN_DRIFT = _declare(
    MetricSpec(
        "ragmon_turn_drift_ratio",
        Histogram,
        "D_t per turn (t >= 2); D_r = _sum / _count.",
        ("agent", "turn_bucket"),
        buckets=RATIO_BUCKETS,
    )
)
TURN_MEMORY = _declare(
    MetricSpec(
        "ragmon_turn_memory_tokens",
        Histogram,
        "M_t per turn.",
        ("agent",),
        buckets=MEMORY_BUCKETS,
    )
)
CONVERSATION_FINAL_MEMORY = _declare(
    MetricSpec(
        "ragmon_conversation_final_memory_tokens",
        Histogram,
        "M_T, when a conversation ends.",
        ("agent",),
        buckets=MEMORY_BUCKETS,
    )
)
TURN_OUTCOME = _declare(
    MetricSpec(
        "ragmon_turn_outcome_score",
        Histogram,
        "Outcome scores 0-10 from the LLM judge.",
        ("agent", "metric"),
        buckets=OUTCOME_BUCKETS,
    )
)
CONSTRAINT_CHECKS = _declare(
    MetricSpec(
        "ragmon_constraint_checks_total",
        Counter,
        "Constraint verdicts per turn.",
        ("agent", "outcome"),
    )
)
CONVERSATIONS_ACTIVE = _declare(
    MetricSpec("ragmon_conversations_active", Gauge, "Conversations held in memory.")
)
CONVERSATIONS_EVICTED = _declare(
    MetricSpec(
        "ragmon_conversations_evicted_total",
        Counter,
        "Conversations dropped from memory, by reason.",
        ("reason",),
    )
)
TURNS_RENUMBERED = _declare(
    MetricSpec(
        "ragmon_conversation_turns_renumbered_total",
        Counter,
        "Turns whose number moved up because an earlier-starting turn arrived after them.",
    )
)

# --- golden sets ----------------------------------------------------------------------------------

GOLDEN_METRIC = _declare(
    MetricSpec(
        "ragmon_golden_metric_ratio",
        Gauge,
        "Last golden-set run's value of a measure, per suite and mode.",
        ("suite", "mode", "metric"),
    )
)
GOLDEN_TARGET = _declare(
    MetricSpec(
        "ragmon_golden_target_ratio",
        Gauge,
        "The target a golden-set suite is held to, per measure.",
        ("suite", "metric"),
    )
)
GOLDEN_LATENCY = _declare(
    MetricSpec(
        "ragmon_golden_latency_seconds",
        Gauge,
        "Last golden-set run's request latency percentile (p50, p95, p99).",
        ("suite", "mode", "metric"),
    )
)
GOLDEN_RUNS = _declare(
    MetricSpec(
        "ragmon_golden_runs_total",
        Counter,
        "Golden-set runs by outcome: passed, failed (a target missed), error.",
        ("suite", "outcome"),
        preset={"outcome": GOLDEN_RUN_OUTCOMES},
    )
)
GOLDEN_LAST_SUCCESS = _declare(
    MetricSpec(
        "ragmon_golden_last_success_timestamp_seconds",
        Gauge,
        "Unix time at the end of the last golden-set run that completed.",
        ("suite",),
    )
)
GOLDEN_RUN_DURATION = _declare(
    MetricSpec(
        "ragmon_golden_run_duration_seconds",
        Gauge,
        "Duration of the last golden-set run.",
        ("suite",),
    )
)

CATALOG: tuple[AnySpec, ...] = tuple(_DECLARED)  # in the order of docs/exported-metrics.md's tables
