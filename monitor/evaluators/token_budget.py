"""The judge's token spend per hour, shared by everything that calls the judge endpoint.

One :class:`TokenBudget` per process: the sampler asks it whether a trace may still be judged
(``sampling.token_budget_per_hour``), and every judge client charges it the tokens each response
reports -- the trace judge, the turn judge, golden-set judges and ragas alike, failed and retried
attempts included -- so the bound holds for all the tokens the endpoint bills, not only those
that ended up in a trace's result. It also keeps the process's totals, by evaluator.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable


class TokenBudget:
    """Tokens spent in the current hour window against an optional limit (None: unbounded)."""

    def __init__(
        self, per_hour: int | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.per_hour = per_hour
        self._clock = clock
        self._window_start = clock()
        self._used = 0
        self.totals: Counter[str] = Counter()  # tokens by evaluator, since start

    def _roll(self) -> None:
        now = self._clock()
        if now - self._window_start >= 3600:
            self._window_start = now
            self._used = 0

    @property
    def used(self) -> int:
        """Tokens spent in the current hour window."""
        self._roll()
        return self._used

    def allows(self) -> bool:
        """Whether more judge work may start now."""
        return self.per_hour is None or self.used < self.per_hour

    def spend(self, tokens: int, evaluator: str = "llm") -> None:
        if tokens <= 0:
            return
        self._roll()
        self._used += tokens
        self.totals[evaluator] += tokens
