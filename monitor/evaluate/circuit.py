"""A circuit breaker for the judge endpoint: closed -> open -> half-open -> closed.

- **closed**: requests flow; `failure_threshold` consecutive failures open the circuit.
- **open**: no request is made for `reset_seconds`.
- **half-open**: after that, exactly one request (the probe) is let through; its success closes
  the circuit, its failure opens it again for another `reset_seconds`.

A failure is an attempt that says the endpoint is unusable (connection refused or reset, timeout,
5xx, 401/403/404); the caller decides. Any other answer (200, 429, 400) counts as a success: the
endpoint is up. Not thread-safe; meant for one asyncio loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

CircuitState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int,
        reset_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[CircuitState], None] | None = None,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.reset_seconds = reset_seconds
        self._clock = clock
        self._on_change = on_change
        self._state: CircuitState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False

    @property
    def state(self) -> CircuitState:
        return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def _set(self, state: CircuitState) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)

    def blocked(self) -> bool:
        """True when a request now would be refused (without reserving anything)."""
        if self._state == "open":
            return self._clock() - self._opened_at < self.reset_seconds
        if self._state == "half_open":
            return self._probe_in_flight
        return False

    def allow(self) -> bool:
        """Reserve one attempt: True to go ahead (the caller then reports how it went)."""
        if self._state == "closed":
            return True
        if self._state == "open":
            if self._clock() - self._opened_at < self.reset_seconds:
                return False
            self._set("half_open")
        if self._probe_in_flight:
            return False
        self._probe_in_flight = True
        return True

    def record_success(self) -> None:
        self._failures = 0
        self._probe_in_flight = False
        self._set("closed")

    def record_failure(self) -> None:
        self._failures += 1
        if self._state == "half_open":
            self._probe_in_flight = False
            self._open()
        elif self._state == "closed" and self._failures >= self.failure_threshold:
            self._open()

    def abandon(self) -> None:
        """The attempt ended without telling anything (cancelled): free the probe slot."""
        if self._state == "half_open" and self._probe_in_flight:
            self._probe_in_flight = False

    def _open(self) -> None:
        self._opened_at = self._clock()
        self._set("open")
