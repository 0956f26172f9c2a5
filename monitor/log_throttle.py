"""At most one log line per interval for an event that can repeat at the rate of the input."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class Throttled:
    """Logs the first occurrence of an event at once, then at most one line per `interval`
    seconds saying how many occurred since the last line (with the latest one's fields)."""

    def __init__(
        self, event: str, interval: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.event = event
        self.interval = interval
        self._clock = clock
        self._unlogged = 0
        self._last: float | None = None

    def note(self, **fields: Any) -> bool:
        """Count one occurrence; True when it was logged."""
        self._unlogged += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return False
        log.warning(self.event, occurrences=self._unlogged, per_seconds=self.interval, **fields)
        self._unlogged = 0
        self._last = now
        return True
