"""Which traces get the costly LLM judge, and shedding load when it falls behind.

Two independent selections. The **uniform draw**: a hash of the conversation id against a
per-agent rate (a conversation is judged whole or not at all), decided without looking at the
trace, so the traces it selects are a sample of all traffic and population estimates can rest
on them (monitor.estimates). **Priorities** (negative feedback, low tier-0 support, no contexts,
an answer in another language than its contexts or question) are judged beyond the rate, for
review and their own counters, up to `sampling.priority_max_share` of the agent's traffic (a
credit of up to `priority_burst` judgements, refilled by that share per trace); what the cap
skips is counted. A priority trace that the draw selected is a uniform one: the draw never
depends on the priority.

The cap is a chance, not a queue position: a priority trace outside the draw is judged with
probability q = min(1, credit) (a second hash, of its trace id, against q) and q is spent
whether or not it was. So every judged trace has a known chance of having been judged,
rate + (1 - rate) q, decided before its own scores were seen, and the estimates can weigh
priority traces by its inverse (monitor.estimates); a first-come token bucket would judge by
arrival order, which no probability describes.

A quiet agent's draw may be too small for its estimates and alerts to say anything within an
hour (the alerts wait for 20 drawn traces): with `sampling.min_drawn_per_hour`, an agent whose
traffic of the last hour would give fewer drawn traces at its rate gets the rate that gives
that many (up to 1). The floor is the deployment's: each replica counts only the traffic it
consumes, so it asks for the floor times its share of the input (`set_input_share`: its
partitions of the score stage's topics over all of them), and since conversations hash evenly
over the partitions the replicas together draw about the floor. For the same reason a replica's
traffic follows its share: when the share changes (a rebalance), the traffic it counted is
re-read at the new share (times new / old), so the rate does not lag the assignment by the
hour its counts cover. The rate follows the agent's
traffic (monitor.evaluators.agent_traffic) and the replica's share, never a trace's own content
or draw, and each trace records the rate it was drawn at, so the estimates weigh it as they
weigh any other rate.

When the judge queue fills, the effective rate is lowered instead of blocking consumption (the
rate in force is recorded as the trace's inclusion probability), and whatever cannot be queued
is shed and counted.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.agent_traffic import AgentTraffic
from monitor.evaluators.token_budget import TokenBudget
from monitor.models import EvaluationResult, PriorityReason, Selection, Trace

CROSS_LANGUAGE = "cross_language"
MAX_PRIORITY_BUCKETS = 1024
"""Agents with a priority bucket of their own; any further agent shares one (the agent field
is the producer's, so its values are not bounded)."""
PRIORITY_REASONS: tuple[PriorityReason, ...] = get_args(PriorityReason)

Decision = Literal["sampled", "priority", "priority_capped", "skipped", "rate_lowered"]
"""``sampled``: in the uniform draw (whether or not a priority too); ``priority``: judged for a
priority rule only; ``priority_capped``: a priority the cap skipped; ``rate_lowered``: the
configured rate would have drawn the trace, the load-lowered one did not -- judge work shed
under load, counted with the other shed reasons."""


def unit_hash(key: str) -> float:
    """A uniform number in [0, 1) from `key`, the same on every replica and every run."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True, slots=True)
class Choice:
    """What the sampler decided for one trace: the selection a result records, and the
    decision the metrics count."""

    selection: Selection
    decision: Decision


class Sampler:
    """Decides per trace; adapts a load factor in [min_rate_factor, 1] from queue depth."""

    def __init__(
        self,
        config: SamplingConfig,
        budget: TokenBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.load_factor = 1.0
        self._last_adjust = 0.0
        self._priority_credit: dict[str, float] = {}
        # Judge clients charge this budget as they spend (pass it to them); see token_budget.
        self.budget = budget if budget is not None else TokenBudget(config.token_budget_per_hour)
        self._clock = clock
        self._traffic = (
            AgentTraffic(MAX_PRIORITY_BUCKETS) if config.min_drawn_per_hour is not None else None
        )
        self._per_hour: dict[str, float] = {}  # each tracked agent's traffic, last counted
        self._input_share = 1.0
        self._counted_share = 1.0  # the share the traffic was counted at

    @property
    def input_share(self) -> float:
        return self._input_share

    def set_input_share(self, share: float) -> None:
        """This replica's share of the input it scores, in [0, 1] (1 alone, 0 with no partition
        assigned): its floor is `sampling.min_drawn_per_hour` times it, from the next trace on.

        The traffic counted so far is re-read at the new share: a replica that goes from all
        the partitions to half of them will see half the traffic from now on, and its floor is
        halved, so its rate stays (read from the old counts as they were, it would halve, and
        rise back only as the hour's counts aged). A share of 0 (between a revocation and the
        next assignment) reads nothing and changes no count; the next share is compared with
        the last one traffic was counted at."""
        share = min(1.0, max(0.0, share))
        self._input_share = share
        if share == 0.0:
            return
        if share != self._counted_share:
            factor = share / self._counted_share
            if self._traffic is not None:
                self._traffic.scale(factor)
            self._per_hour = {agent: rate * factor for agent, rate in self._per_hour.items()}
        self._counted_share = share

    def configured_rate(self, agent: str) -> float:
        return self.config.agent_rates.get(agent, self.config.rate)

    def base_rate(self, agent: str) -> float:
        """The agent's rate before load shedding: its configured rate, or the higher one this
        replica's floor of drawn traces an hour asks for at the agent's traffic here."""
        configured = self.configured_rate(agent)
        floor = self.config.min_drawn_per_hour
        per_hour = self._per_hour.get(agent)
        if floor is None or per_hour is None:
            return configured
        return max(configured, min(1.0, floor * self._input_share / per_hour))

    def count_traffic(self, agent: str) -> None:
        """Count one trace of `agent` towards the traffic its floor rate follows."""
        if self._traffic is None:
            return
        per_hour = self._traffic.count(agent, self._clock())
        if per_hour is not None:
            self._per_hour[agent] = per_hour

    def effective_rate(self, agent: str) -> float:
        return self.base_rate(agent) * self.load_factor

    def decide(self, trace: Trace, tier0: EvaluationResult) -> Decision:
        return self.select(trace, tier0).decision

    def select(self, trace: Trace, tier0: EvaluationResult, count: bool = True) -> Choice:
        """Decide `trace`; `count` it towards its agent's traffic unless it is a trace seen
        before (a revision)."""
        if count:
            self.count_traffic(trace.agent)
        return self.choose(
            trace.agent,
            self.draw(trace),
            self.priority_reason(trace, tier0),
            self.priority_draw(trace),
        )

    @staticmethod
    def draw(trace: Trace) -> float:
        """The trace's uniform draw: its conversation's (or, without one, its own) hash."""
        return unit_hash(trace.conversation_id or trace.trace_id)

    @staticmethod
    def priority_draw(trace: Trace) -> float:
        """The trace's own uniform number for the priority cap, independent of `draw`."""
        return unit_hash(f"priority:{trace.trace_id}")

    def choose(
        self,
        agent: str,
        draw: float,
        priority: PriorityReason | None,
        priority_draw: float,
    ) -> Choice:
        """Decide one trace of `agent` from its draws and the priority rule it matched."""
        rate = self.effective_rate(agent)
        uniform = draw < rate
        capped = False
        cfg = self.config
        bucket = agent
        if (
            agent not in self._priority_credit
            and len(self._priority_credit) >= MAX_PRIORITY_BUCKETS
        ):
            bucket = ""
        credit = min(
            float(cfg.priority_burst),
            self._priority_credit.get(bucket, float(cfg.priority_burst)) + cfg.priority_max_share,
        )
        chance: float | None = None
        if priority is not None:
            chance = min(1.0, credit)
            if not uniform:
                capped = priority_draw >= chance
                credit -= chance
        self._priority_credit[bucket] = credit
        selection = Selection(
            uniform=uniform,
            inclusion_probability=rate,
            priority=priority,
            priority_capped=capped,
            priority_probability=chance,
        )
        decision: Decision
        if uniform:
            decision = "sampled"
        elif priority is not None:
            decision = "priority_capped" if capped else "priority"
        else:
            decision = "rate_lowered" if draw < self.base_rate(agent) else "skipped"
        return Choice(selection, decision)

    def priority_reason(self, trace: Trace, tier0: EvaluationResult) -> PriorityReason | None:
        """The first priority rule the trace matches, or None."""
        cfg = self.config
        # Documents without text are no retrieval failure, and the judge cannot use them either.
        if cfg.priority_no_contexts and not trace.contexts and not trace.contexts_without_text:
            return "no_contexts"
        threshold = cfg.priority_feedback_at_or_below
        if (
            threshold is not None
            and trace.feedback is not None
            and trace.feedback.score is not None
            and trace.feedback.score <= threshold
        ):
            return "negative_feedback"
        # Tier 0 cannot compare words across languages (cross_language): only the judge, which
        # reads both, can tell whether such an answer is grounded.
        if CROSS_LANGUAGE in tier0.flags or any(
            score.reason == CROSS_LANGUAGE for score in tier0.scores.values()
        ):
            return "cross_language"
        # `support` (continuous) ranks hallucination risk better than the faithfulness ratio.
        faithfulness = tier0.scores.get("support") or tier0.scores.get("faithfulness")
        if (
            faithfulness is not None
            and faithfulness.value is not None
            and faithfulness.value < cfg.priority_faithfulness_below
        ):
            return "low_support"
        return None

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
