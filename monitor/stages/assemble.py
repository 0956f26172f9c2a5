"""The assemble stage: span parts in, whole traces out.

Parts of one trace (its spans, and the log records that carry its GenAI content) are collected
by the assembler (`monitor.formats.assembly`, whose rules say when a trace is whole) until it is
released; a release is mapped onto a `Trace` stamped with what assembly knew (`Trace.assembly`)
and handed to an `AssembledOutput`: on Kafka the traces topic, keyed by conversation id (trace id
without one), where the score stage reads it in order (`TracesTopicOutput`); in process the
score stage itself. The messages a trace's parts came in are finished once it is written,
dead-lettered or deliberately skipped.

A trace whose content (question or answer) may still come as log records waits for them, up to
`kafka.otlp_assembly_max_seconds` after its first part, when log topics are read. A
re-assembly that maps to the same trace as before (log records that repeat what the spans said)
is not handed on again. A trace that cannot be mapped is dead-lettered alone: its own spans,
encoded in the input's format, with the origin of the message it first came in; unless it is
a fragment of a trace the store already holds whole (spans read again after a crash), which is
skipped as late spans. A trace of more spans than `kafka.otlp_max_spans_per_trace` is
dead-lettered, and so are its later parts.

Reading waits for room (backpressure): before a message's parts are added, while the traces not
yet released would pass `ROOM` of `kafka.otlp_max_pending_traces` and some of them are due within
the settle time, the stage releases what falls due instead of taking more. A backlog (a restart
after an outage, a replay) is read as fast as traces settle and leave, and waits in Kafka, where
reading it all at once would shed traces before they were whole. Traces that wait for a missing
root (released at `kafka.otlp_assembly_max_seconds`) are not waited for: that bound still sheds.

On Kafka, the spans of a partition that went to another replica during a rebalance are its now:
their traces still assembling are forgotten (their parts are uncommitted, read again there);
nothing is released between the revocation and the new assignment, so no trace is released by
two replicas.

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import structlog
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog
from monitor.config import KafkaConfig
from monitor.formats.assembly import Release, TraceAssembler
from monitor.formats.errors import DecodeError, OtlpMappingError
from monitor.formats.otlp_release import map_release, release_bytes
from monitor.formats.otlp_split import LogsPart, TracePart
from monitor.logs import CountedWarning
from monitor.messages import RawMessage, Routed
from monitor.metrics import Metrics
from monitor.offload import offload
from monitor.sinks.writer import OutRecord, TopicWriter
from monitor.sources.offsets import OffsetTracker
from monitor.stages import offloaded
from monitor.stages.parts import REVISION_HEADER, PartToken, header_shapes, part_token
from monitor.stages.ports import Assembled, AssembledOutput, SplitMessage
from monitor.stages.reject import Rejecter, in_input_format
from monitor.typing import WholeTraceCheck

RELEASE_CHUNK = 256
"""Traces mapped and handed on at a time when many are due at once (a settle interval's worth
at a high rate), or `kafka.max_in_flight` if less: the next chunk is mapped once the output
has room for this one. Handed on whole, a second's worth of traces would exceed the in-flight
bound (the scoring stage admits a batch larger than its room once nothing else is in flight)."""

log = structlog.get_logger(__name__)

# Mapping failures that content still to come as log records can cure.
AWAITING_CONTENT = frozenset({"no_query", "no_answer"})
ROOM = 0.9  # share of kafka.otlp_max_pending_traces the unreleased traces may fill while reading
T = TypeVar("T")


def configured_assembler(kafka: KafkaConfig, on_shed: Callable[[str], None]) -> TraceAssembler[T]:
    """The assembler with the bounds and times the `kafka.otlp_*` settings give."""
    return TraceAssembler(
        max_seconds=kafka.otlp_assembly_max_seconds,
        grace_seconds=kafka.otlp_late_span_grace_seconds,
        max_traces=kafka.otlp_max_pending_traces,
        max_bytes=kafka.otlp_max_pending_bytes,
        max_kept=kafka.otlp_max_kept_traces,
        settle_seconds=kafka.otlp_assembly_settle_seconds,
        on_shed=on_shed,
        max_spans=kafka.otlp_max_spans_per_trace,
    )


class OtlpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.traces = catalog.create(catalog.OTLP_ASSEMBLY_TRACES, registry)
        self.bytes = catalog.create(catalog.OTLP_ASSEMBLY_BYTES, registry)
        self.released = catalog.create(catalog.OTLP_TRACES_RELEASED, registry)
        self.shed = catalog.create(catalog.OTLP_ASSEMBLY_SHED, registry)
        self.paused = catalog.create(catalog.OTLP_ASSEMBLY_PAUSED, registry)


class AssembleStage:
    name = "assemble"

    def __init__(
        self,
        *,
        kafka: KafkaConfig,
        metrics: Metrics,
        otlp_metrics: OtlpMetrics,
        rejecter: Rejecter,
        tracker: OffsetTracker,
        output: AssembledOutput,
        awaits_events: bool = False,
        scored_whole: WholeTraceCheck | None = None,
        flush_at_drain: bool = False,
        read_before: Callable[[RawMessage], bool] | None = None,
    ) -> None:
        """`awaits_events`: log records may bring a trace's content after its spans (log topics
        are read), so a trace that cannot be mapped for want of a question or answer waits.
        `scored_whole` says whether a trace id already has a result of the whole trace (the
        store), so that fragments of it read again are skipped, not dead-lettered.
        `flush_at_drain`: everything held is released at the end (a file replay); otherwise
        what is still assembling is left for the next owner of its partitions.
        `read_before` says whether an input message was read by an earlier process (a crash
        or a rebalance before its commit): where one input message carries parts of several
        traces (a single replica assembling exports in process), a trace released from such a
        message may be one the store already holds whole, re-read whole or in part."""
        self._metrics = metrics
        self._otlp = otlp_metrics
        self._rejecter = rejecter
        self._tracker = tracker
        self._output = output
        self._max_bytes = kafka.max_message_bytes
        self._plain_llm_calls = kafka.otlp_score_plain_llm_calls
        self._awaits_events = awaits_events
        self._scored_whole = scored_whole
        self._flush_at_drain = flush_at_drain
        self._read_before = read_before
        self._max_spans = kafka.otlp_max_spans_per_trace
        self._release_chunk_size = min(RELEASE_CHUNK, kafka.max_in_flight)
        self._rebalancing = False
        self._shedding = CountedWarning(
            log,
            "OTLP assembler shedding traces at its memory bound "
            "(kafka.otlp_max_pending_*, kafka.otlp_max_kept_traces)",
        )
        self._assembler: TraceAssembler[PartToken] = configured_assembler(kafka, self._shed)
        self._late = metrics.traces_skipped.labels("otlp_late_spans")
        self._not_rag = metrics.traces_skipped.labels("otlp_not_rag")
        self._no_spans = metrics.traces_skipped.labels("otlp_no_spans")
        self._decoded = metrics.traces_decoded.labels("otlp")

    @property
    def assembler(self) -> TraceAssembler[PartToken]:
        return self._assembler

    # ------------------------------------------------------------------------------ input

    async def handle_batch(self, batch: Sequence[Routed]) -> None:
        """Parts read from the spans topic (each message one trace's part, as the re-key stage
        wrote it), grouped by partition for rebalances."""
        now = time.monotonic()
        for routed in batch:
            msg = routed.message
            token = part_token(msg)
            if routed.logs:
                parts = offloaded.split_logs(msg, "otlp_proto")
                if isinstance(parts, DecodeError):
                    await self._rejecter.reject(msg, parts, origin=token.origin, value=msg.value)
                    continue
                await self._add_all(parts, token, now, group=msg.tp, events=True)
                continue
            shapes = header_shapes(msg)
            if shapes and msg.key is not None and msg.value is not None:
                # written by the re-key stage, checked there: not parsed until it is mapped
                part = TracePart(msg.key.decode("ascii", "replace"), msg.value, shapes)
                await self._add_all([part], token, now, group=msg.tp)
                continue
            split = await offloaded.split(msg, "otlp_proto")
            if isinstance(split, DecodeError):
                await self._rejecter.reject(msg, split, origin=token.origin, value=msg.value)
                continue
            await self._rejecter.reject_split(token.origin, split)
            if not split.parts:
                self._no_spans.inc()
            await self._add_all(split.parts, token, now, group=msg.tp)

    async def take_parts(self, items: Sequence[SplitMessage]) -> None:
        """Parts split off input messages in process (the re-key stage's `InProcess`)."""
        now = time.monotonic()
        for item in items:
            token = PartToken.of_input(item.message, item.format)
            await self._add_all(item.parts, token, now, events=item.logs)

    async def _add_all(
        self,
        parts: Sequence[TracePart] | Sequence[LogsPart],
        token: PartToken,
        now: float,
        group: Hashable = None,
        events: bool = False,
    ) -> None:
        """Add a message's parts, one unit of its work each (none: it is finished)."""
        msg = token.message
        if not parts:
            self._tracker.finish(msg.tp, msg.offset)
            return
        self._tracker.add_units(msg.tp, msg.offset, len(parts) - 1)
        now = await self._room_for(len(parts), now)
        for part in parts:
            if isinstance(part, TracePart):
                await self.add(part, token, now, group)
            else:
                await self.add_events(part, token, now, group)

    async def _room_for(self, incoming: int, now: float) -> float:
        """Wait, releasing what falls due, while `incoming` more traces would take the unreleased
        ones past `ROOM` of the bound and some are due within the settle time (see the module's
        docstring); the time to add them at."""
        assembler = self._assembler
        room = max(1, int(ROOM * assembler.max_traces))
        paused_at = None
        while assembler.pending and assembler.pending + incoming > room and not self._rebalancing:
            due = assembler.due_in(time.monotonic())
            if due is None or due > assembler.settle_seconds:
                break
            if paused_at is None:
                paused_at = time.monotonic()
            before = assembler.pending
            await asyncio.sleep(due)
            await self.tick()
            if due == 0.0 and assembler.pending >= before:
                break  # nothing the assembler calls due could leave: never spin
        if paused_at is None:
            return now
        resumed = time.monotonic()
        self._otlp.paused.inc(resumed - paused_at)
        return resumed

    async def add(
        self, part: TracePart, token: PartToken, now: float, group: Hashable = None
    ) -> None:
        outcome = self._assembler.add(part.trace_id, part.data, part.shapes, token, now, group)
        await self._added(outcome, token, part.trace_id, part.data)

    async def add_events(
        self, part: LogsPart, token: PartToken, now: float, group: Hashable = None
    ) -> None:
        outcome = self._assembler.add(part.trace_id, part.data, (), token, now, group, events=True)
        await self._added(outcome, token, part.trace_id, part.data)

    async def _added(self, outcome: str, token: PartToken, trace_id: str, data: bytes) -> None:
        if outcome == "late":
            self._late.inc()
            self._finish([token.message])
        elif outcome == "duplicate":
            self._finish([token.message])
        elif outcome == "rejected":
            error = DecodeError(
                "too_many_spans",
                f"more than {self._max_spans} spans (kafka.otlp_max_spans_per_trace)",
            )
            for release in self._assembler.take_rejected():  # what it held before this part
                await self._rejecter.reject_release(release, "too_many_spans", error)
                self._finish([t.message for t in release.tokens])
            value = None
            if len(data) <= self._max_bytes:
                value = await in_input_format(data, token.fmt)
            await self._rejecter.dead_letter(
                token.origin,
                "too_many_spans",
                type(error).__name__,
                f"trace {trace_id}: {error}",
                value,
            )
            self._finish([token.message])

    # ----------------------------------------------------------------------------- output

    async def tick(self, now: float | None = None) -> None:
        """Release what is due (nothing while a rebalance is under way)."""
        if self._rebalancing:
            return
        now = time.monotonic() if now is None else now
        await self._release(self._assembler.pop_ready(now), now)
        self._shedding.flush(**self._held())

    def due_in(self, now: float) -> float | None:
        """Seconds until a trace is due for release (None while a rebalance is under way)."""
        return None if self._rebalancing else self._assembler.due_in(now)

    async def drain(self, deadline: float) -> bool:
        if self._flush_at_drain:
            await self.flush()
        return True

    async def flush(self) -> None:
        """Release everything held (the end of a replay)."""
        now = time.monotonic()
        await self._release(self._assembler.flush(now), now, final=True)

    async def _release(
        self, releases: list[Release[PartToken]], now: float, final: bool = False
    ) -> None:
        size = self._release_chunk_size
        for start in range(0, len(releases), size):
            await self._release_chunk(releases[start : start + size], now, final)

    async def _release_chunk(
        self, releases: list[Release[PartToken]], now: float, final: bool = False
    ) -> None:
        traces: list[Assembled] = []
        notes: list[tuple[str, int]] = []
        for release in releases:
            tokens = [t.message for t in release.tokens]
            if not release.parts:  # log records whose spans never came
                self._no_spans.inc()
                self._finish(tokens)
                continue
            try:
                mapped = await offload(
                    release_bytes(release),
                    functools.partial(map_release, release, self._plain_llm_calls),
                )
            except OtlpMappingError as exc:
                if (
                    self._awaits_events
                    and not final
                    and exc.reason in AWAITING_CONTENT
                    and self._assembler.hold(release, now)
                ):
                    log.debug("trace waits for its log records", trace_id=release.trace_id)
                    continue
                if await self._fragment_of_a_whole_trace(release):
                    self._late.inc()
                    self._finish(tokens)
                    continue
                self._count_release(release)
                await self._rejecter.reject_release(release, "otlp_unmappable", exc)
                self._finish(tokens)
                continue
            except DecodeError as exc:
                self._count_release(release)
                await self._rejecter.reject_release(release, "otlp_undecodable", exc)
                self._finish(tokens)
                continue
            if mapped is None:
                self._count_release(release)
                self._not_rag.inc()
                self._finish(tokens)
                continue
            result, digest = mapped
            if await self._stored_before(release):
                self._late.inc()
                self._finish(tokens)
                continue
            if release.revision > 1 and release.note == digest:
                log.debug("re-assembly changes nothing", trace_id=release.trace_id)
                self._finish(tokens)  # already handed on as it is: not released again
                continue
            self._count_release(release)
            if release.revision == 1:
                self._decoded.inc()
            traces.append((result, release))
            notes.append((release.trace_id, digest))
        if traces:
            await self._output.take_assembled(traces)
            for trace_id, digest in notes:
                self._assembler.note(trace_id, digest)
        self._update_gauges()

    async def _fragment_of_a_whole_trace(self, release: Release[PartToken]) -> bool:
        """An unmappable first release, incomplete, of a trace already scored whole: spans read
        again after a crash or a rebalance, not a bad trace (skipped as `otlp_late_spans`)."""
        if release.complete or release.revision > 1 or self._scored_whole is None:
            return False
        if not await self._scored_whole(release.trace_id):
            return False
        log.info("fragment of a trace already scored whole; skipped", trace_id=release.trace_id)
        return True

    async def _stored_before(self, release: Release[PartToken]) -> bool:
        """A first release with parts re-read from messages an earlier process had read, of a
        trace the store holds whole: those spans are all or part of a trace already scored
        (its other messages were finished and committed), skipped as `otlp_late_spans`; a
        fragment scored again would overwrite the whole trace's result."""
        if release.revision > 1 or self._read_before is None or self._scored_whole is None:
            return False
        if not any(self._read_before(token.message) for token in release.tokens):
            return False
        if not await self._scored_whole(release.trace_id):
            return False
        log.info(
            "spans re-read of a trace already scored whole; skipped", trace_id=release.trace_id
        )
        return True

    def _count_release(self, release: Release[PartToken]) -> None:
        outcome = (
            "revised"
            if release.revision > 1
            else ("complete" if release.complete else "incomplete")
        )
        self._otlp.released.labels(outcome).inc()
        log.debug(
            "trace released",
            trace_id=release.trace_id,
            revision=release.revision,
            reason=release.reason,
            complete=release.complete,
            parts=len(release.parts),
            event_parts=len(release.event_parts),
        )

    # -------------------------------------------------------------------------- rebalances

    def on_revoked(self, partitions: set[TopicPartition]) -> None:
        """Nothing is released until the new assignment is known: a trace of a partition that
        goes elsewhere would be assembled twice."""
        self._rebalancing = True

    def on_assigned(self, assignment: set[TopicPartition]) -> None:
        """Traces still assembling from partitions that went to another replica are its now
        (their parts are uncommitted); those of partitions that came back stay, and the parts
        read again join them as duplicates."""
        dropped = self._assembler.drop_pending(set(assignment))
        self._update_gauges()
        self._rebalancing = False
        if dropped:
            log.info("traces being assembled left to the partitions' new owner", traces=dropped)

    # ---------------------------------------------------------------------------- upkeep

    def _finish(self, messages: Sequence[RawMessage]) -> None:
        for msg in messages:
            self._tracker.finish(msg.tp, msg.offset)

    def _shed(self, reason: str) -> None:
        self._otlp.shed.labels(reason).inc()
        self._shedding.count(reason, **self._held())

    def _held(self) -> dict[str, int]:
        return {
            "pending": self._assembler.pending,
            "kept": self._assembler.kept,
            "bytes": self._assembler.bytes,
        }

    def _update_gauges(self) -> None:
        self._otlp.traces.labels("pending").set(self._assembler.pending)
        self._otlp.traces.labels("kept").set(self._assembler.kept)
        self._otlp.bytes.set(self._assembler.bytes)


class TracesTopicOutput:
    """Assembled traces to the traces topic, keyed by conversation (at-least-once); a trace
    the topic cannot take (too large) is dead-lettered as its spans."""

    def __init__(
        self,
        writer: TopicWriter,
        topic: str,
        rejecter: Rejecter,
        tracker: OffsetTracker,
        max_bytes: int,
    ) -> None:
        self._writer = writer
        self._topic = topic
        self._rejecter = rejecter
        self._tracker = tracker
        self._max_bytes = max_bytes

    async def take_assembled(self, items: Sequence[Assembled]) -> None:
        records: list[OutRecord] = []
        releases: dict[int, Release[PartToken]] = {}
        tokens: list[RawMessage] = []
        for trace, release in items:
            value = trace.model_dump_json(exclude_none=True).encode("utf-8")
            released = [t.message for t in release.tokens]
            if len(value) > self._max_bytes:
                error = DecodeError(
                    "too_large", f"assembled trace is {len(value)} bytes, limit {self._max_bytes}"
                )
                await self._rejecter.reject_release(release, "too_large", error)
                self._finish(released)
                continue
            headers = [(REVISION_HEADER, str(release.revision).encode())]
            record = OutRecord(self._topic, trace.partition_key.encode("utf-8"), value, headers)
            records.append(record)
            releases[id(record)] = release
            tokens.extend(released)
        for refused in await self._writer.send_all(records) if records else []:
            error = DecodeError(
                "too_large",
                f"the traces topic refused the assembled trace of {len(refused.record.value)}"
                f" bytes ({type(refused.error).__name__})",
            )
            await self._rejecter.reject_release(releases[id(refused.record)], "too_large", error)
        self._finish(tokens)

    def _finish(self, messages: Sequence[RawMessage]) -> None:
        for msg in messages:
            self._tracker.finish(msg.tp, msg.offset)
