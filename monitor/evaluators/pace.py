"""How fast a judge endpoint serves a request of a given size, learnt from its replies.

Every accepted reply that reports ``usage`` is one observation: the seconds the request took,
its prompt tokens ``p`` and completion tokens ``c``. :class:`ServerPace` fits

    seconds ≈ p / prompt_rate + c / generation_rate

by exponentially weighted least squares (the last few dozen replies count; older ones fade), so
the model follows a server that gets faster or slower, at the concurrency the judge runs it at.
When the two rates cannot be told apart (too few replies, replies all of one shape, such as
embeddings, which generate nothing, or a fit that has prompt tokens read slower than tokens are
generated, which no server does) one rate is fitted with prompt tokens assumed
:data:`PROMPT_TOKEN_SHARE` as costly as generated ones.

What it is for:

- :meth:`ServerPace.deadline`: how long to wait for a request of ``prompt_chars`` characters and
  ``max_tokens`` of reply -- the expected time (prompt tokens estimated from the characters at
  the learnt tokens-per-character ratio; the reply at its bound) times :data:`SAFETY`, at least
  the configured floor, doubled for each time the same call has already timed out, at most the
  ceiling; the ceiling while nothing is known;
- :meth:`ServerPace.observe` returns a reply's latency relative to the size of recent requests
  (seconds over their average work in generated-token equivalents, a prompt token counting as
  the fitted ratio of the two speeds): the latency signal of
  :class:`~monitor.evaluators.concurrency_limit.ConcurrencyLimit`, steady while the mix of
  request sizes drifts;
- the exported speeds (``ragmon_judge_tokens_per_second``).

Pure arithmetic; the caller measures the seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROMPT_TOKEN_SHARE = 0.1
"""What a prompt token costs relative to a generated one when the two cannot be fitted apart
(CPU servers read prompts about ten times faster than they generate; GPUs more)."""
FORGET = 0.9  # weight of the past per observation: about the last 10-30 replies count
RATIO_WEIGHT = 0.3  # weight of a new reply in the learnt tokens-per-character ratio
SAFETY = 3.0  # a deadline allows three times the expected time
INITIAL_TOKENS_PER_CHAR = 0.5  # between English (about 0.25) and Japanese (about 1)
_MIN_SHARE_OF_VARIANCE = 0.05  # below it, prompt and reply sizes move together: one rate


@dataclass
class _Sums:
    """Exponentially weighted sums of the least-squares fit (p, c -> seconds)."""

    pp: float = 0.0
    pc: float = 0.0
    cc: float = 0.0
    ps: float = 0.0
    cs: float = 0.0
    count: int = 0

    def add(self, p: float, c: float, seconds: float) -> None:
        self.pp = self.pp * FORGET + p * p
        self.pc = self.pc * FORGET + p * c
        self.cc = self.cc * FORGET + c * c
        self.ps = self.ps * FORGET + p * seconds
        self.cs = self.cs * FORGET + c * seconds
        self.count += 1

    def fit(self) -> tuple[float, float] | None:
        """(seconds per prompt token, seconds per generated token), or None with no data."""
        if self.count == 0:
            return None
        det = self.pp * self.cc - self.pc * self.pc
        if self.count >= 3 and det > _MIN_SHARE_OF_VARIANCE * self.pp * self.cc:
            per_prompt = (self.ps * self.cc - self.cs * self.pc) / det
            per_generated = (self.cs * self.pp - self.ps * self.pc) / det
            # a server reads prompt tokens in batches, never slower than it generates: a fit
            # that says otherwise is noise (sizes that hardly vary), so one rate is fitted
            if 0 < per_prompt <= per_generated:
                return per_prompt, per_generated
        # one rate: seconds ≈ (share·p + c)·k, least squares in k
        r = PROMPT_TOKEN_SHARE
        weight = r * r * self.pp + 2 * r * self.pc + self.cc
        if weight <= 0:
            return None
        per_generated = (r * self.ps + self.cs) / weight
        if per_generated <= 0:
            return None
        return r * per_generated, per_generated


class ServerPace:
    """The learnt pace of one endpoint (see the module documentation)."""

    def __init__(self, floor_seconds: float, ceiling_seconds: float) -> None:
        self.floor_seconds = floor_seconds
        self.ceiling_seconds = ceiling_seconds
        self.tokens_per_char = INITIAL_TOKENS_PER_CHAR
        self._sums = _Sums()
        self._fit: tuple[float, float] | None = None
        self._mean_work: float | None = None

    @property
    def known(self) -> bool:
        return self._fit is not None

    def expected(self, prompt_tokens: float, completion_tokens: float) -> float | None:
        """Seconds a request of this size takes, by the fit; None before any reply."""
        if self._fit is None:
            return None
        per_prompt, per_generated = self._fit
        return prompt_tokens * per_prompt + completion_tokens * per_generated

    def prompt_tokens(self, prompt_chars: int) -> float:
        return prompt_chars * self.tokens_per_char

    def deadline(self, prompt_chars: int, max_tokens: int, timeouts: int = 0) -> float:
        """Seconds to wait for a request of `prompt_chars` characters and `max_tokens` of reply,
        whose call has timed out `timeouts` times already (see the module documentation)."""
        expected = self.expected(self.prompt_tokens(prompt_chars), max_tokens)
        if expected is None:
            return self.ceiling_seconds
        seconds = max(self.floor_seconds, expected * SAFETY)
        return min(self.ceiling_seconds, seconds * 2.0 ** min(timeouts, 20))

    def observe(
        self, seconds: float, prompt_chars: int, prompt_tokens: int, completion_tokens: int
    ) -> float | None:
        """Learn from one accepted reply; returns its latency relative to the size of recent
        requests: its seconds over the moving average of their work (generated-token
        equivalents, a prompt token counting as the fitted ratio of the two speeds). Not over
        its own work: a request waiting in a server's queue waits for the others' work."""
        if prompt_chars > 0 and prompt_tokens > 0:
            ratio = prompt_tokens / prompt_chars
            self.tokens_per_char += RATIO_WEIGHT * (ratio - self.tokens_per_char)
        if seconds <= 0 or not math.isfinite(seconds) or prompt_tokens + completion_tokens <= 0:
            return None
        share = PROMPT_TOKEN_SHARE
        if self._fit is not None:
            per_prompt, per_generated = self._fit
            share = per_prompt / per_generated
        self._sums.add(prompt_tokens, completion_tokens, seconds)
        self._fit = self._sums.fit()
        work = prompt_tokens * share + completion_tokens
        self._mean_work = (
            work
            if self._mean_work is None
            else self._mean_work + RATIO_WEIGHT * (work - self._mean_work)
        )
        return seconds / self._mean_work

    def tokens_per_second(self) -> tuple[float, float] | None:
        """(prompt tokens per second, generated tokens per second) of one request."""
        if self._fit is None:
            return None
        per_prompt, per_generated = self._fit
        return 1.0 / per_prompt, 1.0 / per_generated
