"""The consume loop: one for every source, Kafka consumer group or file alike.

Fetch a batch; begin every message in the offset tracker (it is finished by whichever stage
completes its work); let the router say which stage takes each message, and reject what none
can; hand each stage its share, in the order the data flows; tick every stage (time-driven
work); commit what is finished when due. A fetch that finds nothing waits no longer than a
stage's next time-driven work is due (`Timed`: a trace settling in the assembler). At a stop,
or at the end of a file, every stage drains in the same order (what it holds goes on, or is
left uncommitted for the next owner), and what is finished is committed.

A write the cluster refuses for good (`ProduceRejected`) stops the loop: the daemon stops, the
message stays uncommitted. Rebalances of a Kafka consumer are passed to every stage.

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence

from aiokafka.structs import TopicPartition

from monitor.formats.errors import DecodeError
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.sinks.produce import ProduceRejected
from monitor.sources.offsets import OffsetTracker
from monitor.stages.reject import Rejecter
from monitor.stages.router import Router
from monitor.typing import Source, Stage, Timed


class ConsumeLoop:
    def __init__(
        self,
        *,
        name: str,
        tracker: OffsetTracker,
        router: Router,
        stages: Sequence[Stage],
        rejecter: Rejecter,
        metrics: Metrics,
        stopping: Callable[[], bool],
        on_fatal: Callable[[ProduceRejected], None],
        drain_deadline: Callable[[], float],
        beat: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`stages` in the order the data flows through them; `beat` runs at the top of every
        round (heartbeat, readiness, upkeep); `drain_deadline` is when draining must end once
        the daemon is stopping (a file that ended drains without one)."""
        self.name = name
        self._tracker = tracker
        self._router = router
        self._stages = list(stages)
        self._timed = [stage for stage in self._stages if isinstance(stage, Timed)]
        self._rejecter = rejecter
        self._metrics = metrics
        self._stopping = stopping
        self._on_fatal = on_fatal
        self._drain_deadline = drain_deadline
        self._beat = beat
        self._busy: set[TopicPartition] = set()

    async def run(self, source: Source) -> None:
        """Consume until a stop or the end of the input, then drain and commit."""
        while not self._stopping():
            if self._beat is not None:
                await self._beat()
            batch = await source.fetch(self._due_in())
            if batch is None:
                break  # the input ended
            try:
                if batch and not self._stopping():
                    await self.handle(batch)
                else:
                    await self._tick()
            except ProduceRejected as exc:
                self._on_fatal(exc)
                break
            await source.commit_if_due()
        deadline = self._drain_deadline() if self._stopping() else math.inf
        for stage in self._stages:
            await stage.drain(deadline)

    async def handle(self, batch: Sequence[RawMessage]) -> None:
        """One fetched batch, through the stages, then every stage's tick."""
        self._busy = {msg.tp for msg in batch}
        try:
            consumed: dict[str, int] = {}
            for msg in batch:
                consumed[msg.topic] = consumed.get(msg.topic, 0) + 1
                self._tracker.begin(msg.tp, msg.offset)
            for topic, count in consumed.items():
                self._metrics.messages_consumed.labels(topic).inc(count)
            routes = self._router.route(batch)
            for stage in self._stages:
                share = routes.to.pop(stage.name, None)
                if share:
                    await stage.handle_batch(share)
            for name, unrouted in routes.to.items():
                off = DecodeError("otlp_undecodable", f"OTLP input is off (no {name} stage)")
                routes.rejected += [(routed.message, off) for routed in unrouted]
            for msg, error in routes.rejected:
                await self._rejecter.reject(msg, error)
            await self._tick()
        finally:
            self._busy = set()

    async def _tick(self) -> None:
        for stage in self._stages:
            await stage.tick()

    def _due_in(self) -> float | None:
        """How long the fetch may wait before a stage's tick has work due (a trace settled):
        released on time, not up to a fetch's whole wait later."""
        now = time.monotonic()
        waits = [wait for stage in self._timed if (wait := stage.due_in(now)) is not None]
        return min(waits, default=None)

    def busy(self, partitions: set[TopicPartition]) -> bool:
        """Work of these partitions is being handed on right now (a revocation waits for it)."""
        return bool(partitions & self._busy)

    async def on_revoked(self, partitions: set[TopicPartition]) -> None:
        for stage in self._stages:
            stage.on_revoked(partitions)

    async def on_assigned(self, assignment: set[TopicPartition]) -> None:
        for stage in self._stages:
            stage.on_assigned(assignment)
