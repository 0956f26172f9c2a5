"""The processing seam: what the daemon does with each valid trace.

The source and decoding stages hand every valid trace to a `TraceProcessor`; scoring,
conversation tracking and storage plug in here. `RecordingProcessor` is the stage of the bare
daemon: it remembers what it received.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Protocol

import structlog

from monitor.models import Trace

log = structlog.get_logger(__name__)


class TraceProcessor(Protocol):
    async def process(self, trace: Trace) -> None:
        """Handle one trace; raising marks it failed (it is dead-lettered, never dropped)."""
        ...


class RecordingProcessor:
    """Counts traces per agent and keeps the most recent ones."""

    def __init__(self, keep: int = 1000) -> None:
        self.recent: deque[Trace] = deque(maxlen=keep)
        self.per_agent: Counter[str] = Counter()
        self.total = 0

    async def process(self, trace: Trace) -> None:
        self.recent.append(trace)
        self.per_agent[trace.agent] += 1
        self.total += 1
        log.debug("trace recorded", agent=trace.agent, turn=trace.turn)
