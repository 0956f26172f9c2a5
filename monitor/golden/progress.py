"""A one-line progress bar on stderr, drawn only when stderr is a terminal.

Scheduled runs, CI and Kubernetes jobs (no terminal) print nothing; logs stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``label  12/50 [#####.............]  24%`` rewritten in place; ``close()`` ends the line."""

    WIDTH = 24
    MIN_INTERVAL = 0.1  # seconds between redraws

    def __init__(
        self, label: str, total: int, *, enabled: bool | None = None, stream: TextIO | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self._stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.label = label
        self.total = total
        self.done = 0
        self._last_draw = 0.0
        self._drawn = -1

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (self.done >= self.total or now - self._last_draw >= self.MIN_INTERVAL):
            self._last_draw = now
            self._draw()

    def _draw(self) -> None:
        self._drawn = self.done
        total = max(self.total, 1)
        filled = int(self.WIDTH * min(self.done, total) / total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        percent = int(100 * min(self.done, total) / total)
        self._stream.write(f"\r{self.label}  {self.done}/{self.total} [{bar}] {percent:3d}%")
        self._stream.flush()

    def close(self) -> None:
        if self.enabled:
            if self._drawn != self.done:
                self._draw()
            self._stream.write("\n")
            self._stream.flush()


__all__ = ["Progress"]
