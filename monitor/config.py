"""Configuration: pydantic-settings models, the only reader of config files and the environment.

Precedence, highest first: environment (`RAGMON_` prefix, `__` between nesting levels), the YAML
file given with `--config`, then the defaults embedded here (which run the daemon on its own).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.exceptions import SettingsError

from monitor.conversation import ConversationConfig
from monitor.evaluate.judge_config import JudgeConfig
from monitor.evaluate.sampler import SamplingConfig
from monitor.golden.config import GoldenConfig

ENV_PREFIX = "RAGMON_"
ENV_NESTED_DELIMITER = "__"

InputFormat = Literal["native", "otlp_json", "otlp_proto", "auto"]


class ConfigError(Exception):
    """The configuration is invalid; `problems` pairs each bad field's dotted path with why.

    Each problem line ends with where the value came from: the environment variable when one is
    set for the field, else the file given with --config; lines about the file itself (field
    `--config`) or the environment as a whole carry no such hint.
    """

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"invalid configuration{where}:"]
        for field, why in problems:
            origin = _origin(field, source)
            lines.append(f"  {field}: {why}" + (f" ({origin})" if origin else ""))
        super().__init__("\n".join(lines))


def _origin(field: str, source: str | None) -> str | None:
    """Where a bad field's value was set, for the error line (None: nothing useful to say)."""
    if not field or not field[0].isalpha():  # "--config", "(environment)", "(root)"
        return None
    name = env_name(field)
    if name in os.environ:
        return f"env {name}"
    nested = sorted(k for k in os.environ if k.startswith(name + ENV_NESTED_DELIMITER))
    if nested:
        return f"env {nested[0]}" + (" ..." if len(nested) > 1 else "")
    section = _is_section(field)
    if source is not None:
        return f"set in {source}" if section else f"set in {source}; env {name} overrides it"
    return f"{name}__... variables" if section else f"env {name}"


def _is_section(dotted_field: str) -> bool:
    """Whether a dotted path names a whole section (`kafka`, `judge.redaction`), not a value."""
    model: Any = None
    annotation: Any = Settings
    for part in dotted_field.split("."):
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        model = annotation
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def env_name(dotted_field: str) -> str:
    """The environment variable that sets a field: `kafka.topics` -> `RAGMON_KAFKA__TOPICS`."""
    parts = [p for p in dotted_field.split(".") if not p.isdigit()]
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(p.upper() for p in parts)


class _Section(BaseModel):
    # allow_inf_nan=False: "inf" or ".nan" in a float setting is a typo, not "no limit"
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: not a usable file either way
        return False


class KafkaConfig(_Section):
    bootstrap_servers: str = "localhost:9092"
    otlp_topics: list[str] = Field(
        default_factory=list, description="topics the OpenTelemetry Collector writes spans to"
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
    otlp_max_pending_traces: int = Field(default=10_000, gt=0)
    otlp_max_pending_bytes: int = Field(default=256 * 2**20, gt=0)

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
        return bool(self.otlp_topics) or self.format != "native"

    @model_validator(mode="after")
    def _check_topics(self) -> KafkaConfig:
        internal = {self.effective_spans_topic, self.effective_traces_topic}
        if len(internal) < 2:
            raise ValueError("spans_topic and traces_topic must differ")
        consumed = set(self.topics) | set(self.otlp_topics)
        if consumed & internal:
            raise ValueError("spans_topic and traces_topic are internal: not input topics")
        if set(self.topics) & set(self.otlp_topics):
            raise ValueError("a topic cannot be in both topics and otlp_topics")
        if self.otlp_topics and self.format == "native":
            raise ValueError("format native cannot read otlp_topics (use auto)")
        if self.dlq_topic in consumed | internal:
            raise ValueError("dlq_topic must not be one of the consumed topics")
        if self.otlp_group_id is not None and self.otlp_group_id == self.group_id:
            raise ValueError("otlp_group_id must differ from group_id")
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


class HttpConfig(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=9820, ge=0, le=65535)
    health_stall_seconds: float = Field(
        default=60.0, gt=0, description="/healthz fails when the consume loop is stuck this long"
    )
    review_token: SecretStr | None = Field(
        default=None, description="bearer token that /review and /review.json require"
    )
    trace_url_template: str | None = Field(
        default=None, description="link for trace ids on /review, e.g. a tracing UI; {trace_id}"
    )

    @field_validator("review_token")
    @classmethod
    def _non_empty_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("review_token must not be empty (leave it unset for no token)")
        return value


class LogConfig(_Section):
    format: Literal["json", "console", "auto"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


class TelemetryConfig(_Section):
    """The daemon's own OpenTelemetry spans; off unless an OTLP endpoint is set."""

    otlp_endpoint: str | None = None
    service_name: str = "rag-monitor"


class ShutdownConfig(_Section):
    deadline_seconds: float = Field(default=20.0, gt=0)


class MetricsConfig(_Section):
    max_agents: int = Field(
        default=50, gt=0, description="distinct agent label values; the rest export as 'other'"
    )


class ScoringConfig(_Section):
    must_not_contain: list[str] = Field(
        default_factory=list, description="terms no answer may contain (flagged by tier 0)"
    )
    rolling_window_seconds: float = Field(default=300.0, gt=0)


class StoreConfig(_Section):
    url: SecretStr = Field(
        default=SecretStr("sqlite+aiosqlite:///ragmon.db"),
        description="SQLAlchemy async URL; may hold a password, so it is treated as a secret",
    )
    enabled: bool = True


class ResultsConfig(_Section):
    topic: str | None = Field(default="rag_eval_results", description="None: do not publish")


class RedactionSinksConfig(_Section):
    """Sinks besides the judge that get redacted text (patterns: `judge.redaction`)."""

    store: bool = True
    results_topic: bool = True
    review: bool = True


class Settings(BaseSettings):
    """Everything the daemon reads at start-up."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        validate_default=True,
        allow_inf_nan=False,
    )

    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    results: ResultsConfig = Field(default_factory=ResultsConfig)
    redact: RedactionSinksConfig = Field(default_factory=RedactionSinksConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    conversations: ConversationConfig = Field(default_factory=ConversationConfig)
    golden: GoldenConfig = Field(default_factory=GoldenConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return env_settings, init_settings


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([("--config", f"cannot read {path}: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([("--config", f"{path} is not UTF-8 (byte {exc.start})")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([("--config", f"{path} is not valid YAML: {exc}")]) from None
    except RecursionError:
        raise ConfigError([("--config", f"{path} is nested too deeply")]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([("--config", f"{path} must hold a mapping at the top level")])
    bad_keys = [repr(k) for k in data if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(
            [("--config", f"{path}: top-level keys must be names, not {bad_keys[0]}")]
        )
    return data


def load_settings(config_file: Path | None = None) -> Settings:
    """Build the effective settings, raising ConfigError that names every bad field."""
    file_values = _read_yaml(config_file) if config_file is not None else {}
    source = str(config_file) if config_file is not None else None
    try:
        return Settings(**file_values)
    except RecursionError:
        raise ConfigError(
            [("(environment or file)", "a value is nested too deeply")], source
        ) from None
    except SettingsError as exc:
        raise ConfigError(
            _undecodable_env_values() or [("(environment)", str(exc))], source
        ) from None
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "(root)"
            problems.append((field, error["msg"]))
        raise ConfigError(problems, source) from None


def _undecodable_env_values() -> list[tuple[str, str]]:
    """Name the RAGMON_ variables holding a list or mapping that is not valid JSON."""
    problems = []
    for key, value in os.environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        path = key[len(ENV_PREFIX) :].lower().split(ENV_NESTED_DELIMITER)
        model: type[BaseModel] = Settings
        annotation: Any = None
        for part in path:
            field = model.model_fields.get(part)
            if field is None:
                break
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
        if get_origin(annotation) in (list, dict):
            try:
                json.loads(value)
            except ValueError:
                problems.append((".".join(path), f'{key} must be JSON, for example ["a", "b"]'))
    return problems


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data, with every secret replaced by asterisks."""
    dumped: dict[str, Any] = settings.model_dump(mode="json")
    return dumped


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
