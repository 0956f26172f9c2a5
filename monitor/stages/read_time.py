"""When the trace being processed was read from its source: set by the score stage around each
trace, read by the scoring stage.

Its tier-0 predictions for the population estimates are made with the calibration of the epoch
the trace was read in, not of the moment it is scored: a trace waits for its conversation's
earlier turns, and a judged turn holds them until the judge answers, so the scoring time
depends on whether the conversation was drawn for the judge; the read time does not
(monitor.estimates.calibration).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_read_at: ContextVar[float | None] = ContextVar("ragmon_trace_read_at", default=None)


@contextmanager
def read_at(monotonic: float) -> Iterator[None]:
    """Within this block (and tasks started in it), the current trace was read at `monotonic`
    (a `time.monotonic()` reading)."""
    token = _read_at.set(monotonic)
    try:
        yield
    finally:
        _read_at.reset(token)


def current_read_at() -> float | None:
    """When the trace being processed was read (None outside the score stage)."""
    return _read_at.get()
