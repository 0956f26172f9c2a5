"""The shutdown deadline: how the time `shutdown.deadline_seconds` gives is spent.

From the stop request on, in-flight work may finish until the drain deadline; what is still
running then (a trace waiting for the judge, a write that keeps failing) is cancelled and left
for the next owner of its partitions to read again. The rest of the time closes what is open:
the final offset commit, leaving the consumer groups, the producers, the store. Each of those
waits only until the deadline, so a broker or database that is away cannot hold the process.
`rag-monitor run` adds a last guard that ends the process at the deadline whatever still runs
(`monitor.cli.daemon`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Close = Callable[[], Awaitable[object]]

MAX_CLOSE_RESERVE_SECONDS = 5.0


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

    def deadline(self) -> float:
        """When everything must be closed (monotonic); the shutdown starts if it had not."""
        self.start()
        assert self._started is not None
        return self._started + self.deadline_seconds

    def drain_deadline(self) -> float:
        """Until when in-flight work may finish (monotonic)."""
        return self.deadline() - self.reserve_seconds

    def left(self) -> float:
        return max(0.0, self.deadline() - self._clock())

    def bounded(self, what: str, close: Close) -> Close:
        """`close`, waited for at most until the deadline (then given up on, with a warning)."""

        async def closing() -> None:
            try:
                await asyncio.wait_for(close(), timeout=max(self.left(), 0.01))
            except TimeoutError:
                log.warning("shutdown deadline: no longer waiting for it to close", what=what)

        return closing
