"""``kafka:`` -- the brokers, the topics read and written, and how the consumers behave."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from monitor.config.base import Section

InputFormat = Literal["native", "otlp_json", "otlp_proto", "auto"]


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: not a usable file either way
        return False


class KafkaConfig(Section):
    bootstrap_servers: str = "localhost:9092"
    otlp_topics: list[str] = Field(
        default_factory=list, description="topics the OpenTelemetry Collector writes spans to"
    )
    otlp_logs_topics: list[str] = Field(
        default_factory=list,
        description="topics the OpenTelemetry Collector writes logs to: GenAI events that carry "
        "the content of `event_only` capture, joined to their spans",
    )
    topics: list[str] = Field(
        default_factory=lambda: ["rag_traces"],
        description="native trace topics; may be empty when otlp_topics is set",
    )
    group_id: str = Field(default="rag-monitor", min_length=1)
    dlq_topic: str = Field(default="rag_traces.dlq", min_length=1)
    format: InputFormat = "auto"
    client_id: str = "rag-monitor"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: SecretStr | None = None
    max_message_bytes: int = Field(default=1_048_576, gt=0)
    max_in_flight: int = Field(default=1000, gt=0, description="unfinished traces held at once")
    fetch_max_records: int = Field(default=500, gt=0)
    fetch_min_bytes: int = Field(
        default=65_536,
        gt=0,
        description="the broker holds a fetch until this much is ready, or fetch_max_wait_ms: "
        "at a steady rate the traces arriving meanwhile are read and scored together",
    )
    fetch_max_wait_ms: int = Field(
        default=500,
        gt=0,
        description="longest the broker holds a fetch for fetch_min_bytes (the most it adds to "
        "a trace's latency)",
    )
    commit_interval_seconds: float = Field(default=5.0, gt=0)
    session_timeout_ms: int = Field(default=30_000, gt=0)
    heartbeat_interval_ms: int = Field(default=3_000, gt=0)
    max_poll_interval_ms: int = Field(default=300_000, gt=0)
    ready_fetch_stale_seconds: float = Field(
        default=5.0,
        gt=0,
        description="/readyz fails when no fetch response came from the broker for this long "
        "(a stalled connection), unless reading is held back by backpressure",
    )
    stuck_seconds: float = Field(
        default=300.0,
        gt=0,
        description="a partition whose unfinished head has not finished for this long, or a "
        "write failing this long, makes its stage stuck: /readyz fails, ragmon_stuck_partitions",
    )
    otlp_group_id: str | None = Field(
        default=None, min_length=1, description="consumer group of the OTLP stage"
    )
    spans_topic: str | None = Field(
        default=None, min_length=1, description="internal: spans split per trace, keyed by trace id"
    )
    traces_topic: str | None = Field(
        default=None,
        min_length=1,
        description="internal: assembled traces (native JSON), keyed by conversation id",
    )
    single_replica: bool = Field(
        default=False,
        description="one process reads every partition: OTLP spans are assembled in the process "
        "and handed straight to scoring, without the spans and traces topics (the Helm chart "
        "turns it on when replicaCount is 1); never with several replicas",
    )
    internal_partitions: int = Field(default=12, gt=0, le=10_000)
    topic_partitions: int = Field(
        default=12, gt=0, le=10_000, description="partitions `topics create` gives other topics"
    )
    replication_factor: int | None = Field(
        default=None, ge=1, le=32, description="of topics created; unset: min(3, brokers)"
    )
    retention_ms: int = Field(default=7 * 86_400_000, ge=-1)
    dlq_retention_ms: int = Field(default=30 * 86_400_000, ge=-1)
    otlp_assembly_max_seconds: float = Field(
        default=60.0,
        gt=0,
        description="longest wait for a trace's root span and missing parents before it is "
        "released incomplete",
    )
    otlp_assembly_settle_seconds: float = Field(
        default=1.0,
        ge=0,
        description="a complete trace waits this long for spans read out of order",
    )
    otlp_late_span_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="after a release, late spans of the trace re-assemble and re-score it",
    )
    otlp_max_pending_traces: int = Field(
        default=10_000,
        gt=0,
        description="traces the OTLP assembler holds before their release (assembling, or "
        "waiting for their GenAI log records)",
    )
    otlp_max_kept_traces: int = Field(
        default=50_000,
        gt=0,
        description="released traces the OTLP assembler keeps for their late spans "
        "(otlp_late_span_grace_seconds); at a steady rate they number rate x grace",
    )
    otlp_max_spans_per_trace: int = Field(
        default=10_000,
        gt=0,
        description="a trace with more spans is dead-lettered (too_many_spans), never mapped",
    )
    otlp_max_pending_bytes: int = Field(
        default=256 * 2**20,
        gt=0,
        description="bytes of the traces the OTLP assembler holds, pending and kept together "
        "(their parts, and an estimate of their bookkeeping)",
    )
    otlp_score_plain_llm_calls: bool = Field(
        default=False,
        description="score OTLP traces that are plain LLM calls (no retrieval, and no pipeline "
        "span or no conversation) instead of skipping them as otlp_not_rag",
    )

    @field_validator("topics")
    @classmethod
    def _some_input(cls, topics: list[str], info: ValidationInfo) -> list[str]:
        if not topics and not info.data.get("otlp_topics"):
            raise PydanticCustomError(
                "too_short", "List should have at least 1 item (or set otlp_topics)"
            )
        return topics

    @model_validator(mode="before")
    @classmethod
    def _renamed_window(cls, data: Any) -> Any:
        # Before issue 12 a trace was released a fixed window after its first span.
        if isinstance(data, dict) and "otlp_assembly_window_seconds" in data:
            data = dict(data)
            window = data.pop("otlp_assembly_window_seconds")
            data.setdefault("otlp_assembly_max_seconds", window)
        return data

    @property
    def effective_otlp_group_id(self) -> str:
        return self.otlp_group_id or f"{self.group_id}.otlp"

    @property
    def effective_spans_topic(self) -> str:
        return self.spans_topic or f"{self.group_id}.otlp-spans"

    @property
    def effective_traces_topic(self) -> str:
        return self.traces_topic or f"{self.group_id}.otlp-traces"

    @property
    def otlp_stage_enabled(self) -> bool:
        """OTLP can arrive: the OTLP stage and its internal topics are needed."""
        return bool(self.otlp_topics or self.otlp_logs_topics) or self.format != "native"

    @property
    def uses_internal_topics(self) -> bool:
        """OTLP is re-keyed and assembled through the spans and traces topics (several
        replicas may share the work), not in process (`single_replica`)."""
        return self.otlp_stage_enabled and not self.single_replica

    @model_validator(mode="after")
    def _check_topics(self) -> KafkaConfig:
        internal = {self.effective_spans_topic, self.effective_traces_topic}
        if len(internal) < 2:
            raise ValueError("spans_topic and traces_topic must differ")
        consumed = set(self.topics) | set(self.otlp_topics) | set(self.otlp_logs_topics)
        if consumed & internal:
            raise ValueError("spans_topic and traces_topic are internal: not input topics")
        if set(self.topics) & set(self.otlp_topics):
            raise ValueError("a topic cannot be in both topics and otlp_topics")
        if set(self.otlp_logs_topics) & (set(self.topics) | set(self.otlp_topics)):
            raise ValueError(
                "otlp_logs_topics hold logs: a topic there cannot also be in topics or otlp_topics"
            )
        if (self.otlp_topics or self.otlp_logs_topics) and self.format == "native":
            raise ValueError("format native cannot read otlp_topics or otlp_logs_topics (use auto)")
        if self.dlq_topic in consumed | internal:
            raise ValueError("dlq_topic must not be one of the consumed topics")
        if self.otlp_group_id is not None and self.otlp_group_id == self.group_id:
            raise ValueError("otlp_group_id must differ from group_id")
        return self

    @model_validator(mode="after")
    def _check_stuck_bound(self) -> KafkaConfig:
        # A spans message may wait that long for its trace, and the grace period's late spans
        # for their revision, without anything being stuck.
        waits = self.otlp_assembly_max_seconds + self.otlp_late_span_grace_seconds
        if self.otlp_stage_enabled and self.stuck_seconds <= waits:
            raise ValueError(
                f"stuck_seconds ({self.stuck_seconds:g}) must be longer than "
                f"otlp_assembly_max_seconds + otlp_late_span_grace_seconds ({waits:g}): "
                "a trace may wait that long for its spans"
            )
        return self

    @model_validator(mode="after")
    def _check_fetch_wait(self) -> KafkaConfig:
        # A broker answers an idle consumer's fetch only after fetch_max_wait_ms: a wait near
        # the readiness limit would fail /readyz on every quiet partition.
        if self.fetch_max_wait_ms * 2 > self.ready_fetch_stale_seconds * 1000:
            raise ValueError(
                f"fetch_max_wait_ms ({self.fetch_max_wait_ms}) must be at most half of "
                f"ready_fetch_stale_seconds ({self.ready_fetch_stale_seconds:g} s): an idle "
                "partition's fetch is answered only after that wait"
            )
        return self

    @model_validator(mode="after")
    def _check_security(self) -> KafkaConfig:
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism is None:
                raise ValueError("sasl_mechanism is required with a SASL security_protocol")
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError("sasl_username and sasl_password are required with SASL")
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, name)
            if path is not None and not _is_file(Path(path)):
                raise ValueError(f"{name} {str(path)[:200]!r} is not a readable file")
        return self


def aiokafka_security_kwargs(kafka: KafkaConfig) -> dict[str, Any]:
    """Security settings in the form aiokafka's clients take them."""
    kwargs: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL"):
        kwargs["sasl_mechanism"] = kafka.sasl_mechanism
        kwargs["sasl_plain_username"] = kafka.sasl_username
        kwargs["sasl_plain_password"] = (
            kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
        )
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        kwargs["ssl_context"] = create_ssl_context(
            cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None,
            certfile=str(kafka.ssl_certfile) if kafka.ssl_certfile else None,
            keyfile=str(kafka.ssl_keyfile) if kafka.ssl_keyfile else None,
            password=kafka.ssl_password.get_secret_value() if kafka.ssl_password else None,
        )
    return kwargs
