"""The shutdown deadline: how the time `shutdown.deadline_seconds` gives is spent.

From the stop request on, in-flight work may finish until the drain deadline; what is still
running then (a trace waiting for the judge, a write that keeps failing) is cancelled and left
for the next owner of its partitions to read again. The rest of the time closes what is open:
the final offset commit, leaving the consumer groups, the producers, the store. Each of those
waits only until the close deadline, so a broker or database that is away cannot hold the
process. `rag-monitor run` adds a last guard that ends the process a little later, still within
`shutdown.deadline_seconds`, whatever still runs (`monitor.cli.daemon`).

A producer is closed within `PRODUCER_CLOSE_SECONDS`: once in-flight work is drained or
cancelled, nothing waits for what it still holds (records the broker would not take, of work
that is read again), and waiting for them would take the time the store and the conversation
state need to close.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

import structlog

log = structlog.get_logger(__name__)

Close = Callable[[], Awaitable[object]]
T = TypeVar("T")

MAX_CLOSE_RESERVE_SECONDS = 5.0
MAX_EXIT_MARGIN_SECONDS = 2.0
PRODUCER_CLOSE_SECONDS = 1.0


class ShutdownClock:
    """The deadlines of one shutdown, counted from the first `start` (the stop request)."""

    def __init__(self, deadline_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.deadline_seconds = deadline_seconds
        self._clock = clock
        self._started: float | None = None

    @property
    def started(self) -> bool:
        return self._started is not None

    def start(self) -> None:
        """The shutdown begins now (later calls change nothing)."""
        if self._started is None:
            self._started = self._clock()

    @property
    def reserve_seconds(self) -> float:
        """What is kept for closing: a quarter of the deadline, at most 5 s."""
        return min(MAX_CLOSE_RESERVE_SECONDS, self.deadline_seconds / 4)

    @property
    def margin_seconds(self) -> float:
        """Between the close deadline and `shutdown.deadline_seconds`: for the interpreter to
        exit (a final garbage collection of the whole heap), and for the last guard to end it
        if it does not (a fifth, at most 2 s)."""
        return min(MAX_EXIT_MARGIN_SECONDS, self.deadline_seconds / 5)

    @property
    def guard_seconds(self) -> float:
        """When, after the start, the last guard ends the process whatever still runs."""
        return self.deadline_seconds - self.margin_seconds / 2

    def deadline(self) -> float:
        """When everything must be closed (monotonic); the shutdown starts if it had not."""
        self.start()
        assert self._started is not None
        return self._started + self.deadline_seconds - self.margin_seconds

    def drain_deadline(self) -> float:
        """Until when in-flight work may finish (monotonic)."""
        return self.deadline() - self.reserve_seconds

    def left(self) -> float:
        return max(0.0, self.deadline() - self._clock())

    @asynccontextmanager
    async def bounding(
        self, what: str, component: AbstractAsyncContextManager[T], at_most: float | None = None
    ) -> AsyncIterator[T]:
        """`component` entered, and exited (closed) waiting no longer than `bounded` says."""
        entered = await component.__aenter__()
        try:
            yield entered
        finally:
            await self.bounded(what, lambda: component.__aexit__(None, None, None), at_most)()

    def bounded(self, what: str, close: Close, at_most: float | None = None) -> Close:
        """`close`, waited for at most until the deadline, and at most `at_most` seconds (then
        given up on, with a warning)."""

        async def closing() -> None:
            wait = self.left() if at_most is None else min(at_most, self.left())
            try:
                await asyncio.wait_for(close(), timeout=max(wait, 0.01))
            except TimeoutError:
                log.warning("shutdown: no longer waiting for it to close", what=what)

        return closing
