"""The root of the configuration: every section, and where values come from."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from monitor.config.conversation import ConversationConfig
from monitor.config.golden import GoldenConfig
from monitor.config.judge import JudgeConfig
from monitor.config.kafka import KafkaConfig
from monitor.config.process import (
    HttpConfig,
    LogConfig,
    MetricsConfig,
    ShutdownConfig,
    TelemetryConfig,
)
from monitor.config.scoring import EstimatesConfig, SamplingConfig, ScoringConfig
from monitor.config.sinks import RedactionSinksConfig, ResultsConfig, StoreConfig

ENV_PREFIX = "RAGMON_"
ENV_NESTED_DELIMITER = "__"


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
    estimates: EstimatesConfig = Field(default_factory=EstimatesConfig)
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
