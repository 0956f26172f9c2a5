"""Adaptive concurrency for a judge endpoint: how many requests the server serves well at once.

Additive increase, multiplicative decrease with a latency signal, in the style of Netflix's
concurrency-limits (its ``AIMDLimit``, where a slow reply counts as a drop, and the gradient
idea of ``Gradient2Limit``: latency rising with concurrency means requests are queueing):

- the limit starts at 1 and stays within [1, ``max_limit``] (``judge.max_concurrency``);
- a drop -- a timeout, 429 or 503 -- halves it;
- every reply is sorted by level: 1 when no other request was in flight while it ran, else the
  number in flight when it was sent (itself included: a server queues a request behind those
  already there), and each level keeps a moving average of the replies' latency (seconds over
  the average work of recent replies, :meth:`~monitor.evaluators.pace.ServerPace.observe`, so
  that a run of long requests is not taken for queueing). A reply at level ``k`` whose level's
  latency exceeds that of requests alone by more than ``1 + 0.25 (k-1)`` times cuts the limit
  by a tenth: each extra request in flight added more than a quarter of a request's time to
  every request, so the server mostly queues them (a server computing one request at a time
  doubles the latency of two, one serving them in parallel keeps it). So that "alone" stays
  current, after :data:`PROBE_EVERY` replies without one that ran alone the limit is 1 until
  one has (as BBR probes its round-trip time); until :data:`ALONE_WANTED` replies alone are
  known, after :data:`EARLY_PROBE_EVERY` already. The endpoint's first reply is left out of
  the latencies: it pays for what a server does once (paging the model in from disk, an empty
  prompt cache), and as the only reply alone for a while it would set a baseline so high that
  queueing never showed (llama_cpp.server, which computes one request at a time, then ran at
  the maximum, every request waiting for three others);
- any other reply of a request that ran with the limit in full use raises it by ``1 / limit``
  -- one more request per limit's worth of good replies, TCP's congestion avoidance. Replies at
  lower levels say nothing about the limit (Netflix raises already at half of it; a judge that
  is not kept busy has no reason to ask a slow server for more).

A server computing requests one after another (llama_cpp.server) or splitting its cores between
them (llama-server's slots on a CPU) doubles the latency of two requests at once and settles at 1
or 2 (now and then 3); one that serves requests in parallel (OpenAI, vLLM on a GPU) climbs to
``max_limit``.

:meth:`ConcurrencyLimit.slot` waits for room under the limit and yields a :class:`Slot` that
records the level it was sent at and ``peak`` (1: the request ran alone);
:meth:`~ConcurrencyLimit.acquire_nowait` and :meth:`~ConcurrencyLimit.release` are the same
without waiting. One asyncio loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

DROP_FACTOR = 0.5
LATENCY_FACTOR = 0.9
LEVEL_WEIGHT = 0.1  # weight of a new reply in its level's average latency
QUEUE_SLOPE = 0.25  # each request beyond the first may add a quarter of a request's time
PROBE_EVERY = 50  # replies without one that ran alone, after which one runs alone again
ALONE_WANTED = 3  # replies alone wanted for a baseline; until then probes come early
EARLY_PROBE_EVERY = 5  # replies without one that ran alone while the baseline is young


@dataclass(eq=False)
class Slot:
    """One request under the limit: how many were in flight when it was sent (itself included:
    ``sent_at_level``), and the most in flight at once while it ran (``peak``)."""

    sent_at_level: int
    peak: int

    @property
    def alone(self) -> bool:
        return self.peak <= 1


class ConcurrencyLimit:
    """An adaptive limit on requests in flight (see the module documentation)."""

    def __init__(
        self,
        max_limit: int,
        *,
        on_change: Callable[[int], None] | None = None,
    ) -> None:
        if max_limit < 1:
            raise ValueError("max_limit must be at least 1")
        self.max_limit = max_limit
        self._latency: dict[int, float] = {}  # level -> average latency of its replies
        self._replies: dict[int, int] = {}  # level -> replies counted
        self._since_alone = 0
        self._probing = False
        self._warmed_up = False  # the endpoint's first reply came (its latency left out)
        self._on_change = on_change
        self._estimate = 1.0
        self._active: set[Slot] = set()
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def limit(self) -> int:
        if self._probing:
            return 1
        return max(1, min(self.max_limit, int(self._estimate)))

    @property
    def in_flight(self) -> int:
        return len(self._active)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        """Wait until a request may go, and hold its place while it runs."""
        while (slot := self.acquire_nowait()) is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        try:
            yield slot
        finally:
            self.release(slot)

    def acquire_nowait(self) -> Slot | None:
        """A place for one request now, or None when the limit is reached."""
        if len(self._active) >= self.limit:
            return None
        running = len(self._active) + 1
        for other in self._active:
            other.peak = max(other.peak, running)
        slot = Slot(sent_at_level=running, peak=running)
        self._active.add(slot)
        return slot

    def release(self, slot: Slot) -> None:
        self._active.discard(slot)
        self._wake()

    def _wake(self) -> None:
        """Let the waiters check again for room (in the order they came)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _set(self, estimate: float) -> None:
        before = self.limit
        self._estimate = min(float(self.max_limit), max(1.0, estimate))
        if self.limit != before:
            if self._on_change is not None:
                self._on_change(self.limit)
            self._wake()

    def replied(self, slot: Slot, latency: float | None) -> None:
        """A reply came, with its latency per unit of work: cut the limit when its level
        queues, else raise it."""
        # a request waits for those ahead of it; alone means nothing shared its time at all
        level = 1 if slot.alone else max(2, min(slot.sent_at_level, self.max_limit))
        if not self._warmed_up:
            self._warmed_up, latency = True, None
        if latency is not None:
            # a plain mean of a level's first replies, then a moving average
            count = self._replies[level] = self._replies.get(level, 0) + 1
            before = self._latency.get(level, latency)
            weight = max(LEVEL_WEIGHT, 1.0 / count)
            self._latency[level] = before + weight * (latency - before)
        if self._queueing(level):
            self._set(self._estimate * LATENCY_FACTOR)
        elif slot.peak >= self.limit:
            self._set(self._estimate + 1.0 / self._estimate)
        self._probe_now_and_then(slot)

    def _queueing(self, level: int) -> bool:
        """Whether requests at `level` mostly wait: their latency passes that of a request alone
        by more than :data:`QUEUE_SLOPE` of a request's per extra request in flight."""
        here, alone = self._latency.get(level), self._latency.get(1)
        if level < 2 or here is None or alone is None or alone <= 0:
            return False
        return here > alone * (1.0 + QUEUE_SLOPE * (level - 1))

    def _probe_now_and_then(self, slot: Slot) -> None:
        """Keep the latency alone current: after :data:`PROBE_EVERY` replies without one that
        ran alone, let requests drain until one does (as BBR probes its round-trip time)."""
        before = self.limit
        if slot.alone:
            self._since_alone = 0
            self._probing = False
        else:
            self._since_alone += 1
            young = self._replies.get(1, 0) < ALONE_WANTED
            every = EARLY_PROBE_EVERY if young else PROBE_EVERY
            self._probing = self._probing or self._since_alone >= every
        if self.limit != before:
            if self._on_change is not None:
                self._on_change(self.limit)
            self._wake()

    @property
    def slowdown(self) -> float:
        """:meth:`slowdown_at` the current limit."""
        return self.slowdown_at(self.limit)

    def slowdown_at(self, level: int) -> float:
        """Latency of requests at `level` over that of requests alone (1: no queueing; 1 before
        both are known)."""
        alone, there = self._latency.get(1), self._latency.get(level)
        return there / alone if alone and there else 1.0

    def dropped(self) -> None:
        """A timeout, 429 or 503: halve the limit."""
        self._set(self._estimate * DROP_FACTOR)
