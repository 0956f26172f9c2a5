"""Which traces get the costly LLM judge, and shedding load when it falls behind.

Decisions are deterministic by a hash of the conversation id (a conversation is judged whole or
not at all), at a per-agent rate. Priority traces (negative feedback, low tier-0 support, no
contexts, an answer in another language than its contexts or question) skip the rate. When the
judge queue fills, the effective rate is lowered instead of blocking consumption, and whatever
cannot be queued is shed and counted.
"""

from __future__ import annotations

import hashlib
import time
from typing import Literal

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.token_budget import TokenBudget
from monitor.models import EvaluationResult, Trace

CROSS_LANGUAGE = "cross_language"

Decision = Literal["sampled", "priority", "skipped", "rate_lowered"]
"""``rate_lowered``: the configured rate would have judged the trace, the load-lowered one did
not -- judge work shed under load, counted with the other shed reasons."""


def _unit_hash(key: str) -> float:
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Sampler:
    """Decides per trace; adapts a load factor in [min_rate_factor, 1] from queue depth."""

    def __init__(self, config: SamplingConfig, budget: TokenBudget | None = None) -> None:
        self.config = config
        self.load_factor = 1.0
        self._last_adjust = 0.0
        # Judge clients charge this budget as they spend (pass it to them); see token_budget.
        self.budget = budget if budget is not None else TokenBudget(config.token_budget_per_hour)

    def base_rate(self, agent: str) -> float:
        return self.config.agent_rates.get(agent, self.config.rate)

    def effective_rate(self, agent: str) -> float:
        return self.base_rate(agent) * self.load_factor

    def decide(self, trace: Trace, tier0: EvaluationResult) -> Decision:
        if self._is_priority(trace, tier0):
            return "priority"
        draw = _unit_hash(trace.conversation_id or trace.trace_id)
        if draw < self.effective_rate(trace.agent):
            return "sampled"
        return "rate_lowered" if draw < self.base_rate(trace.agent) else "skipped"

    def _is_priority(self, trace: Trace, tier0: EvaluationResult) -> bool:
        cfg = self.config
        # Documents without text are no retrieval failure, and the judge cannot use them either.
        if cfg.priority_no_contexts and not trace.contexts and not trace.contexts_without_text:
            return True
        threshold = cfg.priority_feedback_at_or_below
        if (
            threshold is not None
            and trace.feedback is not None
            and trace.feedback.score is not None
            and trace.feedback.score <= threshold
        ):
            return True
        # Tier 0 cannot compare words across languages (cross_language): only the judge, which
        # reads both, can tell whether such an answer is grounded.
        if CROSS_LANGUAGE in tier0.flags or any(
            score.reason == CROSS_LANGUAGE for score in tier0.scores.values()
        ):
            return True
        # `support` (continuous) ranks hallucination risk better than the faithfulness ratio.
        faithfulness = tier0.scores.get("support") or tier0.scores.get("faithfulness")
        return (
            faithfulness is not None
            and faithfulness.value is not None
            and faithfulness.value < cfg.priority_faithfulness_below
        )

    def observe_queue(self, depth: int, now: float | None = None) -> None:
        """Lower the rate while the judge queue is over 3/4 full; recover below 1/4."""
        now = time.monotonic() if now is None else now
        if now - self._last_adjust < 1.0:
            return
        fill = depth / self.config.queue_size
        if fill > 0.75:
            self.load_factor = max(self.config.min_rate_factor, self.load_factor * 0.5)
            self._last_adjust = now
        elif fill < 0.25 and self.load_factor < 1.0:
            self.load_factor = min(1.0, self.load_factor * 1.25)
            self._last_adjust = now

    def budget_allows(self) -> bool:
        return self.budget.allows()
