"""Prometheus metrics of the LLM judge (declared in `monitor.metrics_catalog`).

``outcome`` of a request: ok, error, timeout, rate_limited, malformed, truncated (cut at
``max_tokens``). A request is one HTTP chat-completions attempt: a call retried three times
counts four. The pace gauges (concurrency limit, tokens per second, slowdown) are set by the
judge client as it learns the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog

if TYPE_CHECKING:
    from monitor.evaluators.pace import ServerPace

RequestOutcome = catalog.JudgeRequestOutcome
Endpoint = catalog.JudgeEndpoint


class JudgeMetrics:
    """The judge's series in `registry` (one instance per registry; evaluators share it)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.requests = catalog.create(catalog.JUDGE_REQUESTS, r)
        self.request_duration = catalog.create(catalog.JUDGE_REQUEST_DURATION, r)
        self.input_tokens = catalog.create(catalog.JUDGE_INPUT_TOKENS, r)
        self.output_tokens = catalog.create(catalog.JUDGE_OUTPUT_TOKENS, r)
        self.cost = catalog.create(catalog.JUDGE_COST, r)
        self.cache_lookups = catalog.create(catalog.JUDGE_CACHE_LOOKUPS, r)
        self.circuit_open = catalog.create(catalog.JUDGE_CIRCUIT_OPEN, r)
        self.concurrency = catalog.create(catalog.JUDGE_CONCURRENCY_LIMIT, r)
        self.tokens_per_second = catalog.create(catalog.JUDGE_TOKENS_PER_SECOND, r)
        self.slowdown = catalog.create(catalog.JUDGE_SLOWDOWN, r)

    def register_evaluator(self, evaluator: str) -> None:
        """Create the evaluator's series at zero, so dashboards see them before any traffic."""
        catalog.zero(catalog.JUDGE_REQUESTS, self.requests, evaluator=evaluator)
        catalog.zero(catalog.JUDGE_REQUEST_DURATION, self.request_duration, evaluator=evaluator)
        catalog.zero(catalog.JUDGE_INPUT_TOKENS, self.input_tokens, evaluator=evaluator)
        catalog.zero(catalog.JUDGE_OUTPUT_TOKENS, self.output_tokens, evaluator=evaluator)
        catalog.zero(catalog.JUDGE_COST, self.cost, evaluator=evaluator)
        catalog.zero(catalog.JUDGE_CIRCUIT_OPEN, self.circuit_open, evaluator=evaluator)

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

    def concurrency_limit(self, evaluator: str, endpoint: Endpoint, limit: int) -> None:
        self.concurrency.labels(evaluator=evaluator, endpoint=endpoint).set(limit)

    def pace(self, evaluator: str, pace: ServerPace, slowdown: float) -> None:
        """The chat endpoint's learnt speeds, and its latency at the current concurrency over
        its latency alone."""
        speeds = pace.tokens_per_second()
        if speeds is not None:
            for phase, value in zip(catalog.JUDGE_PACE_PHASES, speeds, strict=True):
                self.tokens_per_second.labels(evaluator=evaluator, phase=phase).set(value)
        self.slowdown.labels(evaluator=evaluator).set(slowdown)
