"""Progress of a long offline run, on stderr: done/total, rate and time left.

On a terminal, one line rewritten in place (every second and whenever an item finishes); in a
log file or CI, one line a minute, so a run of hours shows it is alive without flooding the
log. Nothing is printed for a run that ends before its first line is due.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import IO

TTY_INTERVAL_SECONDS = 1.0
LOG_INTERVAL_SECONDS = 60.0
MIN_REDRAW_SECONDS = 0.1  # a fast run does not redraw the terminal line for every item


def duration(seconds: float) -> str:
    """`seconds` as a person reads a wait: 45 s, 12 min, 2 h 05 min."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """Counts finished items of `total` and reports them on `stream` (see the module docs).

    `detail` adds a note to each line (the judge's current concurrency, say)."""

    def __init__(
        self,
        total: int,
        stream: IO[str],
        *,
        label: str = "scored",
        tty: bool | None = None,
        detail: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float | None = None,
    ) -> None:
        self.total = total
        self.done = 0
        self._stream = stream
        self._label = label
        self._tty = stream.isatty() if tty is None else tty
        self.interval = interval or (TTY_INTERVAL_SECONDS if self._tty else LOG_INTERVAL_SECONDS)
        self._detail = detail
        self._clock = clock
        self._started = clock()
        self._drawn_at: float | None = None

    def line(self) -> str:
        """``scored 7/20 traces, 1.4/min, about 9 min left[, detail]``."""
        elapsed = self._clock() - self._started
        parts = [f"{self._label} {self.done}/{self.total} traces"]
        if self.done and elapsed > 0:
            per_minute = self.done / elapsed * 60
            parts.append(f"{per_minute:.1f}/min")
            left = (self.total - self.done) / (self.done / elapsed)
            parts.append(f"about {duration(left)} left")
        if self._detail is not None:
            parts.append(self._detail())
        return ", ".join(parts)

    def advance(self) -> None:
        self.done += 1
        drawn_at = self._drawn_at
        if self._tty and (drawn_at is None or self._clock() - drawn_at >= MIN_REDRAW_SECONDS):
            self._draw()

    def _draw(self) -> None:
        if self._tty:
            self._stream.write("\r\033[K" + self.line())
        else:
            self._stream.write(self.line() + "\n")
        self._stream.flush()
        self._drawn_at = self._clock()

    async def report(self) -> None:
        """Draw every interval until cancelled (run it as a task beside the work)."""
        while True:
            await asyncio.sleep(self.interval)
            self._draw()

    def finish(self) -> None:
        """End the in-place line, so what follows starts on a line of its own."""
        if self._tty and self._drawn_at is not None:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()
