"""``judge:`` -- the tier-1 LLM judge's endpoint, limits and redaction.

Environment names follow the settings convention: ``RAGMON_JUDGE__BASE_URL``,
``RAGMON_JUDGE__MODEL``, ``RAGMON_JUDGE__API_KEY``, ``RAGMON_JUDGE__EXTRA_HEADERS`` (JSON object),
``RAGMON_JUDGE__REDACTION__PATTERNS`` (JSON list) and so on.

Secrets: ``api_key`` and every value of ``extra_headers`` are :class:`pydantic.SecretStr`, so a
configuration dump (``check-config``) masks them and nothing that formats the model leaks them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from monitor.config.base import Section


class RedactionConfig(Section):
    """What is removed from trace text before it is sent to the judge (on by default)."""

    enabled: bool = True
    patterns: list[str] = Field(
        default_factory=list,
        description="extra regular expressions (Python syntax); every match is replaced",
    )
    replacement: str = "[REDACTED]"

    @field_validator("patterns")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        for i, pattern in enumerate(patterns):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {i} is not a valid regular expression: {exc}") from None
            if compiled.match(""):
                raise ValueError(f"pattern {i} matches the empty string")
        return patterns


class JudgeConfig(Section):
    """An OpenAI-compatible chat endpoint (OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp)."""

    enabled: bool = Field(
        default=False,
        description="run the judge; true by itself uses the client's default endpoint "
        "(OpenAI); setting base_url turns it on too (and then reads true)",
    )
    backend: Literal["llm", "ragas"] = Field(
        default="llm",
        description="llm: rag-monitor's own prompts (at most 2 calls); ragas: ragas's prompts "
        "(pip install 'rag-monitor[ragas]')",
    )
    base_url: str | None = Field(
        default=None, description="e.g. https://api.openai.com/v1 or http://vllm:8000/v1"
    )
    model: str = Field(default="gpt-4o-mini", min_length=1)
    api_key: SecretStr | None = None
    extra_headers: dict[str, SecretStr] = Field(
        default_factory=dict, description="sent with every request; values are secrets"
    )
    azure_api_version: str | None = Field(
        default=None, description="set for Azure OpenAI (base_url = the resource endpoint)"
    )
    embedding_model: str | None = Field(
        default="text-embedding-3-small",
        min_length=1,
        description="embeddings model, for semantic similarity (golden runs, ragas); null: "
        "semantic similarity and answer correctness are unmeasured",
    )
    embedding_base_url: str | None = Field(
        default=None,
        description="embeddings endpoint when it is not base_url (llama.cpp serves embeddings "
        "from a second process started with --embeddings)",
    )
    embedding_api_key: SecretStr | None = Field(
        default=None,
        description="key for embedding_base_url (api_key is never sent to another endpoint)",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=16,
        le=131_072,
        description="bound on the reply of every chat call; null: per task, sized from the "
        "task's output schema and the input (at most 4096)",
    )
    response_format: Literal["auto", "json_schema", "json_object"] = Field(
        default="auto",
        description="structured output: json_schema (strict), json_object (carrying the schema "
        "as llama.cpp servers take it), or auto: json_schema, falling back once on a rejection "
        "that names the response format, remembered",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="a fixed time limit for every judge request; null: each request's deadline "
        "follows its size (expected prompt processing and generation at the server's observed "
        "speed), within timeout_floor_seconds and timeout_ceiling_seconds",
    )
    timeout_floor_seconds: float = Field(
        default=30.0, gt=0, description="the shortest deadline a request gets (null timeout)"
    )
    timeout_ceiling_seconds: float = Field(
        default=600.0,
        gt=0,
        description="the longest deadline a request gets, and the deadline of the first "
        "requests, before the server's speed is known (null timeout)",
    )
    max_retries: int = Field(default=4, ge=0, le=20)
    backoff_base_seconds: float = Field(default=0.5, ge=0)
    backoff_max_seconds: float = Field(default=30.0, ge=0)
    circuit_failure_threshold: int = Field(default=5, ge=1)
    circuit_reset_seconds: float = Field(default=30.0, gt=0)
    max_concurrency: int = Field(
        default=4,
        ge=1,
        description="upper bound of the judge's adaptive concurrency: requests in flight to "
        "one endpoint (and traces judged at once)",
    )
    max_context_chunks: int = Field(default=5, ge=1, description="K: chunks judged per trace")
    max_chars_per_chunk: int = Field(default=2000, ge=100)
    cache_ttl_seconds: float = Field(default=3600.0, ge=0, description="0 disables the cache")
    cache_max_entries: int = Field(default=10_000, ge=0, description="0 disables the cache")
    input_price_per_million: float = Field(default=0.0, ge=0, description="dollars")
    output_price_per_million: float = Field(default=0.0, ge=0, description="dollars")
    seed: int | None = 7
    redaction: RedactionConfig = Field(default_factory=RedactionConfig)

    @field_validator("base_url", "embedding_base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _check_timeout_bounds(self) -> JudgeConfig:
        if self.timeout_floor_seconds > self.timeout_ceiling_seconds:
            raise ValueError(
                "timeout_floor_seconds must not exceed timeout_ceiling_seconds "
                f"({self.timeout_floor_seconds:g} > {self.timeout_ceiling_seconds:g})"
            )
        return self

    @model_validator(mode="after")
    def _check_azure(self) -> JudgeConfig:
        if self.azure_api_version and not self.base_url:
            raise ValueError(
                "azure_api_version needs base_url (the Azure OpenAI resource endpoint)"
            )
        if self.base_url is not None:
            # Setting an endpoint turns the judge on: say so in the effective configuration
            # (check-config), instead of showing enabled: false for a judge that runs.
            self.enabled = True
        return self

    @property
    def active(self) -> bool:
        """Whether the daemon should run the judge: enabled explicitly, or an endpoint is set."""
        return self.enabled or self.base_url is not None

    @property
    def longest_request_seconds(self) -> float:
        """The time limit of a request no size-based deadline applies to (the HTTP client's own
        bound, ragas's requests): ``timeout_seconds`` when set, else the ceiling."""
        if self.timeout_seconds is not None:
            return self.timeout_seconds
        return self.timeout_ceiling_seconds

    def header_values(self) -> dict[str, str]:
        """The extra headers in the form the HTTP client takes (never log this)."""
        return {name: value.get_secret_value() for name, value in self.extra_headers.items()}

    def secrets(self) -> list[str]:
        """Every secret value of this configuration (for scrubbing error text)."""
        out = [v.get_secret_value() for v in self.extra_headers.values()]
        for key in (self.api_key, self.embedding_api_key):
            if key is not None:
                out.append(key.get_secret_value())
        return [s for s in out if s]
