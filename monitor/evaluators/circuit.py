"""A circuit breaker for a judge endpoint: closed -> open -> half-open -> closed.

- **closed**: requests flow; `failure_threshold` consecutive failures open the circuit.
- **open**: no request is made for `reset_seconds`.
- **half-open**: after that, exactly one request (the probe) is let through; its success closes
  the circuit, its failure opens it again for another `reset_seconds`. Callers that arrive while
  the probe is out wait for its verdict (:meth:`CircuitBreaker.admit`) instead of failing: after
  a server restart the traces that came in during the probe are judged, not marked
  ``circuit_open``.

A failure is an attempt that says the endpoint is unusable (connection refused or reset, 5xx,
401/403, a timeout of a request that ran alone); the caller decides. Any other answer (200, 429,
400, 404/501 for an unsupported route) counts as a success: the endpoint is up.

``admit(wait=True)`` (offline scoring, which must judge everything it was given) also waits out
an open circuit: the caller sleeps until the probe may go instead of failing, so a server that
restarts mid-run loses nothing. Only after :data:`PATIENT_PROBES` probes in a row have failed
does it stop waiting (the endpoint is down, not restarting), so a dead server ends the run
instead of hanging it. Not thread-safe; meant for one asyncio loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal

CircuitState = Literal["closed", "open", "half_open"]
PATIENT_PROBES = 3


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int,
        reset_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_change: Callable[[CircuitState], None] | None = None,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.reset_seconds = reset_seconds
        self.failed_probes = 0  # probes in a row that failed (reset by any success)
        self._clock = clock
        self._sleep = sleep
        self._on_change = on_change
        self._state: CircuitState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self._probe_settled: asyncio.Event | None = None

    @property
    def state(self) -> CircuitState:
        return self._state

    def _set(self, state: CircuitState) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)

    def blocked(self) -> bool:
        """True while the circuit is open and its reset time has not come: a request now would
        be refused. Half-open is not blocked: a caller may probe, or wait for the probe."""
        return self._state == "open" and self._clock() - self._opened_at < self.reset_seconds

    def allow(self) -> bool:
        """Reserve one attempt without waiting: True to go ahead (the caller then reports how it
        went); False while open, or while another caller's probe is out."""
        if self._state == "closed":
            return True
        if self._state == "open":
            if self._clock() - self._opened_at < self.reset_seconds:
                return False
            self._set("half_open")
        if self._probe_in_flight:
            return False
        self._probe_in_flight = True
        self._probe_settled = asyncio.Event()
        return True

    async def admit(self, *, wait: bool = False) -> bool:
        """Reserve one attempt, waiting for an outstanding probe's verdict: True to go ahead,
        False when the circuit is (or the probe left it) open. With `wait`, an open circuit is
        waited out too, until :data:`PATIENT_PROBES` probes in a row have failed."""
        while True:
            if self.allow():
                return True
            settled = self._probe_settled
            if self._state == "half_open" and settled is not None:
                await settled.wait()
            elif wait and self._state == "open" and self.failed_probes < PATIENT_PROBES:
                await self._sleep(max(0.0, self._opened_at + self.reset_seconds - self._clock()))
            else:
                return False

    def record_success(self) -> None:
        self._failures = 0
        self.failed_probes = 0
        self._settle_probe()
        self._set("closed")

    def record_failure(self) -> None:
        self._failures += 1
        if self._state == "half_open":
            self.failed_probes += 1
            self._open()
            self._settle_probe()
        elif self._state == "closed" and self._failures >= self.failure_threshold:
            self._open()

    def abandon(self) -> None:
        """The attempt ended without telling anything (cancelled): free the probe slot, and let
        one waiting caller probe instead."""
        if self._state == "half_open" and self._probe_in_flight:
            self._settle_probe()

    def _settle_probe(self) -> None:
        self._probe_in_flight = False
        settled, self._probe_settled = self._probe_settled, None
        if settled is not None:
            settled.set()

    def _open(self) -> None:
        self._opened_at = self._clock()
        self._set("open")
