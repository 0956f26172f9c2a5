"""The processing seam: what the daemon does with each valid trace.

The source and decoding stages hand every valid trace to a `TraceProcessor`; scoring,
conversation tracking and storage plug in here.
"""

from __future__ import annotations

from typing import Protocol

from monitor.models import Trace


class TraceProcessor(Protocol):
    async def process(self, trace: Trace) -> None:
        """Handle one trace; raising marks it failed (it is dead-lettered, never dropped)."""
        ...
