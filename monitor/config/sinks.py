"""Where results go: ``store``, ``results`` (the results topic) and ``redact`` (per sink)."""

from __future__ import annotations

from pydantic import Field, SecretStr

from monitor.config.base import Section


class StoreConfig(Section):
    url: SecretStr = Field(
        default=SecretStr("sqlite+aiosqlite:///ragmon.db"),
        description="SQLAlchemy async URL; may hold a password, so it is treated as a secret",
    )
    enabled: bool = True


class ResultsConfig(Section):
    topic: str | None = Field(default="rag_eval_results", description="None: do not publish")


class RedactionSinksConfig(Section):
    """Sinks besides the judge that get redacted text (patterns: `judge.redaction`)."""

    store: bool = True
    results_topic: bool = True
    review: bool = True
