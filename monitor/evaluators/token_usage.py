"""Counting the tokens a judge endpoint reports: one path for the judge, golden judges and ragas.

Every response that carries ``usage`` is charged once by :meth:`TokenMeter.charge`: to the
evaluation's :class:`TokenTally` (the ``tokens`` of its result), to the judge metrics (input and
output tokens, cost at the configured prices per million) and to the shared
:class:`~monitor.evaluators.token_budget.TokenBudget`. Retries and failed parses are charged too:
the endpoint spent those tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.token_budget import TokenBudget
from monitor.models import Usage


@dataclass
class TokenTally:
    """Tokens reported by the responses of one evaluation (all its calls and attempts)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reported: bool = False

    def usage(self) -> Usage | None:
        if not self.reported:
            return None
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)


@dataclass(frozen=True)
class TokenMeter:
    """Charges the tokens of each response of one evaluator's endpoint."""

    config: JudgeConfig
    metrics: JudgeMetrics
    evaluator: str
    budget: TokenBudget | None = None

    def charge(self, usage: object, tally: TokenTally | None) -> None:
        """Charge a response's `usage`: the SDK's object or the mapping of a raw JSON body;
        None (some servers send no usage) charges nothing."""
        if usage is None:
            return
        tin = _tokens(usage, "prompt_tokens")
        tout = _tokens(usage, "completion_tokens")
        if tally is not None:
            tally.input_tokens += tin
            tally.output_tokens += tout
            tally.reported = True
        cfg = self.config
        cost = (tin * cfg.input_price_per_million + tout * cfg.output_price_per_million) / 1e6
        self.metrics.tokens(self.evaluator, tin, tout, cost)
        if self.budget is not None:
            self.budget.spend(tin + tout, self.evaluator)


def _tokens(usage: object, name: str) -> int:
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
    return value if isinstance(value, int) and value > 0 else 0
