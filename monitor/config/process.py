"""The daemon process itself: ``http``, ``log``, ``telemetry``, ``shutdown``, ``metrics``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from monitor.config.base import Section


class HttpConfig(Section):
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


class LogConfig(Section):
    format: Literal["json", "console", "auto"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


class TelemetryConfig(Section):
    """The daemon's own OpenTelemetry spans; off unless an OTLP endpoint is set."""

    otlp_endpoint: str | None = None
    service_name: str = "rag-monitor"


class ShutdownConfig(Section):
    deadline_seconds: float = Field(default=20.0, gt=0)


class MetricsConfig(Section):
    max_agents: int = Field(
        default=50, gt=0, description="distinct agent label values; the rest export as 'other'"
    )
