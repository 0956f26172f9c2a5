"""A scored run of the daemon timed two ways, for ``bench/ingest.py`` and ``bench/ingest_trees.py``.

- **burst**: traces/s from the first message read to the last trace processed. It includes
  the run's start and its last trace's latency: an OTLP trace leaves the assembler
  ``kafka.otlp_assembly_settle_seconds`` (1 s) after its last span, and a single replica
  splits and assembles a whole fetch before it scores its first trace; a run of a few
  seconds pays both once in full.
- **sustained**: traces/s between the moments 10% and 90% of the expected traces were
  processed: the steady-state rate of a continuous stream, where that latency overlaps the
  work of the traces behind it instead of adding to it.

The window is steady only when the daemon is still reading its input through it. An OTLP
daemon reads ahead: on 6,000 turns (300 exports) both OTLP topologies had read the whole input
before 10% of it was scored, so the window counted traces split and assembled before it, at
0.79-0.81 of the run's CPU per trace, and its rate came out 1.5x the burst rate; a single
replica reads about 15,000 turns ahead of its scoring. So every run also reports the window's
CPU per trace as a share of the whole run's (:attr:`ScoredRun.window_share`); below
:data:`STEADY_SHARE` the sustained figure is flagged as not steady, and ``bench/ingest.py``
scores 30,000 turns by default, where the OTLP windows were at 0.90-0.97 (native 1.0-1.02).

The counter is polled every 5 ms (a Prometheus counter has no event to wait on); each poll
that sees it rise records the wall clock, this process's CPU time, the count and the messages
read from the input topics, so a window's rate is the traces counted between its two edge
polls over the time between them, exact even when one poll sees a whole batch land. It
imports only what every tree since before issue 26 has (``monitor.daemon``, a daemon's
``metrics.messages_consumed`` and ``traces_processed``), so ``bench/ingest_trees.py`` can run
it against an older checkout.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from pydantic import SecretStr

from monitor.daemon import Daemon, SourceSpec

if TYPE_CHECKING:
    from monitor.config import Settings

SUSTAINED = (0.1, 0.9)  # the window's edges, as fractions of the expected traces
# A window whose CPU per trace is below this share of the whole run's counts traces whose work
# was done before it (read and assembled ahead): not a steady state.
STEADY_SHARE = 0.9
POLL_SECONDS = 0.005


@dataclass(frozen=True)
class Mark:
    """One poll that saw the counter rise: perf_counter, process CPU time, the count, and the
    messages read by then from the run's input topics."""

    seconds: float
    cpu: float
    count: float
    read: float = 0.0


def crossing(marks: list[Mark], count: float) -> Mark:
    """The first mark at or past `count`."""
    for mark in marks:
        if mark.count >= count:
            return mark
    raise ValueError(f"the count never reached {count:g} (last {marks[-1].count:g})")


def window(
    marks: list[Mark], expected: int, edges: tuple[float, float] = SUSTAINED
) -> tuple[Mark, Mark]:
    """The marks where the count first reached each edge's fraction of `expected`."""
    low, high = (crossing(marks, fraction * expected) for fraction in edges)
    if high.seconds <= low.seconds:
        raise ValueError(
            f"one poll saw the count pass {edges[0]:.0%} and {edges[1]:.0%} of {expected:,}: "
            "too few traces for a window"
        )
    return low, high


@dataclass(frozen=True)
class ScoredRun:
    """A scored run's start (the first message read) and every rise of the processed count."""

    expected: int
    start: Mark
    marks: list[Mark]

    @property
    def last(self) -> Mark:
        return crossing(self.marks, self.expected)

    @property
    def burst(self) -> float:
        """Traces/s from the first message read to the last trace processed."""
        return self.expected / (self.last.seconds - self.start.seconds)

    @property
    def sustained(self) -> float:
        """Traces/s between the 10% and the 90% marks."""
        low, high = window(self.marks, self.expected)
        return (high.count - low.count) / (high.seconds - low.seconds)

    @property
    def cpu_ms(self) -> float:
        """This process's CPU per trace (ms) from the first message read to the last trace."""
        return (self.last.cpu - self.start.cpu) * 1000 / self.expected

    @property
    def sustained_cpu_ms(self) -> float:
        """This process's CPU per trace (ms) between the 10% and the 90% marks."""
        low, high = window(self.marks, self.expected)
        return (high.cpu - low.cpu) * 1000 / (high.count - low.count)

    @property
    def window_share(self) -> float:
        """The window's CPU per trace over the whole run's: below :data:`STEADY_SHARE`, the
        window counted traces read and assembled before it, and its rate is not a steady
        state's."""
        return self.sustained_cpu_ms / self.cpu_ms

    @property
    def steady(self) -> bool:
        return self.window_share >= STEADY_SHARE

    def seconds_to(self, fraction: float) -> float:
        """Seconds from the first message read until `fraction` of the traces were processed."""
        return crossing(self.marks, fraction * self.expected).seconds - self.start.seconds

    def read_by(self, fraction: float) -> float:
        """The share of the input read when `fraction` of the traces were processed."""
        return crossing(self.marks, fraction * self.expected).read / self.last.read


def now(count: float, read: float = 0.0) -> Mark:
    return Mark(time.perf_counter(), time.process_time(), count, read)


def counter_total(counter: MetricWrapperBase, **labels: str) -> float:
    """One counter's total over its series matching `labels` (every agent, topic), read
    without collecting the whole registry: that cost about 0.1 ms of this process's CPU per
    trace scored at a 5 ms poll."""
    return sum(
        sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
        and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def until(
    done: Callable[[], Coroutine[Any, Any, object]], daemon_task: asyncio.Task[int]
) -> None:
    """Wait for `done`; a daemon that stops early raises here instead of hanging."""
    waiting = asyncio.create_task(done())
    await asyncio.wait([waiting, daemon_task], return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        daemon_task.result()
        raise RuntimeError("the daemon stopped before the last trace")


async def poll(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110  (no event to wait on)
        await asyncio.sleep(POLL_SECONDS)


async def scored(
    settings: Settings,
    expected: int,
    results_topic: str | None,
    on_first_read: Callable[[], object] | None = None,
) -> ScoredRun:
    """A run of the default scoring stage (SQLite store in a temporary file, results to
    `results_topic` or none) until `expected` traces were processed; `on_first_read` is called
    when the measured span starts (a profiler attaching)."""
    with tempfile.TemporaryDirectory() as workdir:
        settings = settings.model_copy(deep=True)
        settings.store.url = SecretStr(f"sqlite+aiosqlite:///{Path(workdir) / 'results.db'}")
        settings.results.topic = results_topic
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        task = asyncio.create_task(daemon.run())
        # From the first message read, not the first trace scored: a single replica splits and
        # assembles a whole fetch before its first trace is scored.
        consumed, processed = daemon.metrics.messages_consumed, daemon.metrics.traces_processed
        await until(lambda: poll(lambda: counter_total(consumed) > 0), task)
        if on_first_read is not None:
            on_first_read()
        start = now(0)
        marks: list[Mark] = []
        inputs = [*settings.kafka.topics, *settings.kafka.otlp_topics]

        def done() -> bool:
            count = counter_total(processed, outcome="ok")
            if count > (marks[-1].count if marks else 0):
                read = sum(counter_total(consumed, topic=topic) for topic in inputs)
                marks.append(now(count, read))
            return count >= expected

        await until(lambda: poll(done), task)
        daemon.request_stop()
        await task
    return ScoredRun(expected, start, marks)
