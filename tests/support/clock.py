"""A clock a test sets by hand, for code that takes a `clock` callable (seconds)."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
