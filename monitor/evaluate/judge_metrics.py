"""Prometheus metrics of the LLM judge; names and labels are the README's metrics table.

| metric | labels |
|---|---|
| ``ragmon_judge_requests_total`` | ``evaluator``, ``outcome`` |
| ``ragmon_judge_request_duration_seconds`` | ``evaluator`` |
| ``ragmon_judge_input_tokens_total``, ``ragmon_judge_output_tokens_total`` | ``evaluator`` |
| ``ragmon_judge_cost_dollars_total`` | ``evaluator`` |
| ``ragmon_judge_cache_lookups_total`` | ``outcome`` (hit, miss) |
| ``ragmon_judge_circuit_open`` | ``evaluator``, ``endpoint`` (chat, embeddings) |

``outcome`` of a request: ok, error, timeout, rate_limited, malformed. A request is one HTTP
chat-completions attempt: a call retried three times counts four.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

RequestOutcome = Literal["ok", "error", "timeout", "rate_limited", "malformed"]
REQUEST_OUTCOMES: tuple[RequestOutcome, ...] = (
    "ok",
    "error",
    "timeout",
    "rate_limited",
    "malformed",
)
Endpoint = Literal["chat", "embeddings"]
ENDPOINTS: tuple[Endpoint, ...] = ("chat", "embeddings")
JUDGE_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)


class JudgeMetrics:
    """The judge's series in `registry` (one instance per registry; evaluators share it)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.requests = Counter(
            "ragmon_judge_requests",
            "Chat-completion requests sent to the judge endpoint, by outcome.",
            ["evaluator", "outcome"],
            registry=r,
        )
        self.request_duration = Histogram(
            "ragmon_judge_request_duration_seconds",
            "Latency of one chat-completion request to the judge endpoint.",
            ["evaluator"],
            buckets=JUDGE_LATENCY_BUCKETS,
            registry=r,
        )
        self.input_tokens = Counter(
            "ragmon_judge_input_tokens",
            "Prompt tokens reported in the judge responses' usage.",
            ["evaluator"],
            registry=r,
        )
        self.output_tokens = Counter(
            "ragmon_judge_output_tokens",
            "Completion tokens reported in the judge responses' usage.",
            ["evaluator"],
            registry=r,
        )
        self.cost = Counter(
            "ragmon_judge_cost_dollars",
            "Cost of the judge's tokens at the configured prices per million tokens.",
            ["evaluator"],
            registry=r,
        )
        self.cache_lookups = Counter(
            "ragmon_judge_cache_lookups",
            "Judge cache lookups, hit or miss.",
            ["outcome"],
            registry=r,
        )
        self.circuit_open = Gauge(
            "ragmon_judge_circuit_open",
            "1 while the judge's circuit breaker is open (calls are not made), per endpoint.",
            ["evaluator", "endpoint"],
            registry=r,
        )
        for outcome in ("hit", "miss"):
            self.cache_lookups.labels(outcome=outcome)

    def register_evaluator(self, evaluator: str) -> None:
        """Create the evaluator's series at zero, so dashboards see them before any traffic."""
        for outcome in REQUEST_OUTCOMES:
            self.requests.labels(evaluator=evaluator, outcome=outcome)
        self.request_duration.labels(evaluator=evaluator)
        self.input_tokens.labels(evaluator=evaluator)
        self.output_tokens.labels(evaluator=evaluator)
        self.cost.labels(evaluator=evaluator)
        for endpoint in ENDPOINTS:
            self.circuit_open.labels(evaluator=evaluator, endpoint=endpoint).set(0)

    def request(self, evaluator: str, outcome: RequestOutcome, seconds: float) -> None:
        self.requests.labels(evaluator=evaluator, outcome=outcome).inc()
        self.request_duration.labels(evaluator=evaluator).observe(seconds)

    def tokens(self, evaluator: str, input_tokens: int, output_tokens: int, cost: float) -> None:
        if input_tokens:
            self.input_tokens.labels(evaluator=evaluator).inc(input_tokens)
        if output_tokens:
            self.output_tokens.labels(evaluator=evaluator).inc(output_tokens)
        if cost:
            self.cost.labels(evaluator=evaluator).inc(cost)

    def cache(self, hit: bool) -> None:
        self.cache_lookups.labels(outcome="hit" if hit else "miss").inc()

    def circuit(self, evaluator: str, is_open: bool, endpoint: Endpoint = "chat") -> None:
        self.circuit_open.labels(evaluator=evaluator, endpoint=endpoint).set(1 if is_open else 0)
