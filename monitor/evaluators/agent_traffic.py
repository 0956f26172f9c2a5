"""Each agent's traffic over the last hour, for the sampler's floor of drawn traces an hour.

Counted per minute: the traffic an hour is the completed minutes' traces of the last hour over
the time they cover (from the agent's first trace, when that is less than an hour ago), or the
current minute's so far scaled to an hour when that is more (traffic that rises is followed
within the minute; a new agent's first traces, counted so, read as little traffic). It depends
on how many traces came and when, never on a trace's content or on its conversation's draw, so
a rate derived from it keeps the draw a known-chance sample.

`scale` re-reads the counts when the replica's share of the input changes (see
monitor.evaluators.sampler): counts are then estimates, so they are floats.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MINUTE = 60.0
WINDOW_MINUTES = 60
MIN_OBSERVED_SECONDS = 30.0
"""Completed minutes covering less time than this (an agent first seen late in its first
minute) are not yet read as a rate."""


@dataclass(slots=True)
class _Minutes:
    first_seen: float
    current: int
    count: float = 0.0
    completed: deque[tuple[int, float]] = field(default_factory=deque)
    completed_total: float = 0.0

    def advance(self, minute: int) -> None:
        if minute == self.current:
            return
        self.completed.append((self.current, self.count))
        self.completed_total += self.count
        self.current, self.count = minute, 0
        oldest = minute - WINDOW_MINUTES
        while self.completed and self.completed[0][0] < oldest:
            self.completed_total -= self.completed.popleft()[1]

    def per_hour(self) -> float:
        """The larger of: the completed minutes of the last hour over the time they cover,
        scaled to an hour; the current minute's count scaled to an hour."""
        current = self.count * WINDOW_MINUTES
        start = max(self.first_seen, (self.current - WINDOW_MINUTES) * MINUTE)
        observed = self.current * MINUTE - start
        if observed < MIN_OBSERVED_SECONDS:
            return current
        return max(current, self.completed_total * (WINDOW_MINUTES * MINUTE / observed))

    def scale(self, factor: float) -> None:
        self.count *= factor
        self.completed = deque((minute, count * factor) for minute, count in self.completed)
        self.completed_total = sum(count for _, count in self.completed)


class AgentTraffic:
    """Traces an hour per agent, for at most `max_agents` agents (others are not tracked)."""

    def __init__(self, max_agents: int) -> None:
        self._max_agents = max_agents
        self._agents: dict[str, _Minutes] = {}

    def count(self, agent: str, now: float) -> float | None:
        """Count one trace of `agent` read at `now` (seconds) and return the agent's traffic an
        hour, this trace counted; None when the agent is not tracked (past `max_agents`)."""
        minute = int(now // MINUTE)
        minutes = self._agents.get(agent)
        if minutes is None:
            if len(self._agents) >= self._max_agents:
                return None
            minutes = self._agents[agent] = _Minutes(first_seen=now, current=minute)
        minutes.advance(minute)
        minutes.count += 1
        return minutes.per_hour()

    def scale(self, factor: float) -> None:
        """Every agent's counts times `factor`: the traffic as it would have been counted had
        the replica read `factor` times as much of the input."""
        for minutes in self._agents.values():
            minutes.scale(factor)
