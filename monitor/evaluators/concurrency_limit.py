"""Adaptive concurrency for a judge endpoint: how many requests the server serves well at once.

Additive increase, multiplicative decrease with a latency signal, in the style of Netflix's
concurrency-limits (its ``AIMDLimit``, where a slow reply counts as a drop, and the gradient
idea of ``Gradient2Limit``: latency rising over what the server takes unloaded means requests
are queueing):

- the limit starts at 1 and stays within [1, ``max_limit``] (``judge.max_concurrency``);
- a reply that came back at the server's unloaded pace while the limit was in use (at least half
  of it in flight) raises the limit by ``1 / limit`` -- one more request per limit's worth of
  good replies, TCP's congestion avoidance;
- a drop -- a timeout, 429 or 503 -- halves it;
- rising latency cuts it by a tenth: a reply that shared the server and took more than
  ``tolerance`` times what the server takes for its size alone
  (:meth:`~monitor.evaluators.pace.ServerPace.slowdown`). Replies of requests that ran alone
  never cut it: their time is the server's own pace, not queueing.

A server computing requests one after another (llama_cpp.server) or splitting a few cores
between them (llama-server's slots on a CPU) settles at 1 or 2; one that serves requests in
parallel (OpenAI, vLLM on a GPU) climbs to ``max_limit``.

:meth:`ConcurrencyLimit.slot` waits for room under the limit and yields a :class:`Slot` that
records the most requests in flight at once during its life (``peak``): 1 means it ran alone
(:meth:`~ConcurrencyLimit.acquire_nowait` and :meth:`~ConcurrencyLimit.release` are the same
without waiting). One asyncio loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

DROP_FACTOR = 0.5
LATENCY_FACTOR = 0.9
DEFAULT_TOLERANCE = 1.5


@dataclass(eq=False)
class Slot:
    """One request under the limit: the most requests in flight at once while it ran."""

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
        tolerance: float = DEFAULT_TOLERANCE,
        on_change: Callable[[int], None] | None = None,
    ) -> None:
        if max_limit < 1:
            raise ValueError("max_limit must be at least 1")
        self.max_limit = max_limit
        self.tolerance = tolerance
        self._on_change = on_change
        self._estimate = 1.0
        self._active: set[Slot] = set()
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def limit(self) -> int:
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
        slot = Slot(peak=running)
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

    def replied(self, slot: Slot, slowdown: float | None) -> None:
        """A reply came: raise the limit, or cut it when latency rose under shared load."""
        if slowdown is not None and not slot.alone and slowdown > self.tolerance:
            self._set(self._estimate * LATENCY_FACTOR)
        elif slot.peak * 2 >= self.limit:
            self._set(self._estimate + 1.0 / self._estimate)

    def dropped(self) -> None:
        """A timeout, 429 or 503: halve the limit."""
        self._set(self._estimate * DROP_FACTOR)
