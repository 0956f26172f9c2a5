"""The re-key stage: OTLP exports in, parts keyed by trace out.

An export (spans, or GenAI events as log records) is split into one export request per trace
(resource and scope kept, so nothing the mapping reads is lost); the parts go to a
`PartsOutput`: on Kafka the spans topic, keyed by trace id, so that every span of a trace reaches
one replica whatever partition the Collector wrote it to (`SpansTopicOutput`); in process the
assemble stage itself (`InProcess`). A trace whose spans cannot be used is dead-lettered alone
(the export's other traces go on); an export that is not decodable at all is dead-lettered
whole. Native traces found among OTLP input go on to be scored in conversation order (on Kafka
through the traces topic, keyed by conversation).

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

from aiokafka.structs import TopicPartition

from monitor.formats.errors import DecodeError
from monitor.formats.otlp_split import LogsPart, TracePart
from monitor.messages import RawMessage, Routed
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sinks.writer import OutRecord, Refused, TopicWriter
from monitor.sources.offsets import OffsetTracker
from monitor.stages import offloaded
from monitor.stages.parts import part_headers, shapes_header, without_our_headers
from monitor.stages.ports import PartsOutput, SplitMessage
from monitor.stages.reject import Rejecter, in_input_format


class RekeyStage:
    name = "rekey"

    def __init__(
        self,
        output: PartsOutput,
        rejecter: Rejecter,
        tracker: OffsetTracker,
        metrics: Metrics,
    ) -> None:
        self._output = output
        self._rejecter = rejecter
        self._tracker = tracker
        self._no_spans = metrics.traces_skipped.labels("otlp_no_spans")
        self._decoded_native = metrics.traces_decoded.labels("native")

    async def handle_batch(self, batch: Sequence[Routed]) -> None:
        """Split the batch's exports and hand the parts on, then its natives; the messages
        that cannot be used are dead-lettered after the good ones went on, so a dead-letter
        topic that does not answer holds up only them (and the commits)."""
        split: list[SplitMessage] = []
        natives: list[tuple[RawMessage, Trace]] = []
        bad: list[tuple[RawMessage, DecodeError]] = []
        for routed in batch:
            msg = routed.message
            if routed.format == "native":
                trace = await offloaded.decoded(msg)
                if isinstance(trace, DecodeError):
                    bad.append((msg, trace))
                else:
                    natives.append((msg, trace))
                continue
            parts = await self._parts(routed)
            if isinstance(parts, DecodeError):
                bad.append((msg, parts))
            elif parts:
                split.append(SplitMessage(msg, routed.format, parts, routed.logs))
            else:  # nothing to assemble: a logs export without GenAI events, an empty export
                if not routed.logs:
                    self._no_spans.inc()
                self._tracker.finish(msg.tp, msg.offset)
        if split:
            await self._output.take_parts(split)
        if natives:
            self._decoded_native.inc(len(natives))
            await self._output.take_natives(natives)
        for msg, error in bad:
            await self._rejecter.reject(msg, error)

    async def _parts(self, routed: Routed) -> list[TracePart] | list[LogsPart] | DecodeError:
        msg, fmt = routed.message, routed.format
        assert fmt != "native"
        if routed.logs:
            return offloaded.split_logs(msg, fmt)
        split = await offloaded.split(msg, fmt)
        if isinstance(split, DecodeError):
            return split
        await self._rejecter.reject_split(msg, split)
        return split.parts

    async def tick(self) -> None:
        return None

    async def drain(self, deadline: float) -> bool:
        return True  # nothing is held here: every batch is handed on before the next

    def on_revoked(self, partitions: set[TopicPartition]) -> None:
        return None

    def on_assigned(self, assignment: set[TopicPartition]) -> None:
        return None


class SpansTopicOutput:
    """Parts to the spans topic keyed by trace id, natives to the traces topic keyed by
    conversation (at-least-once: an input message is finished once all it became is
    acknowledged). A record the topic refuses as too large is dead-lettered, the rest go on."""

    def __init__(
        self,
        writer: TopicWriter,
        spans_topic: str,
        traces_topic: str,
        rejecter: Rejecter,
        tracker: OffsetTracker,
    ) -> None:
        self._writer = writer
        self._spans_topic = spans_topic
        self._traces_topic = traces_topic
        self._rejecter = rejecter
        self._tracker = tracker

    async def take_parts(self, items: Sequence[SplitMessage]) -> None:
        records: list[OutRecord] = []
        sources: dict[int, SplitMessage] = {}
        for item in items:
            headers = part_headers(item.message, item.format, logs=item.logs)
            for part in item.parts:
                shapes = shapes_header(part.shapes) if isinstance(part, TracePart) else []
                key = part.trace_id.encode()
                record = OutRecord(self._spans_topic, key, part.data, [*headers, *shapes])
                records.append(record)
                sources[id(record)] = item
        for refused in await self._writer.send_all(records):
            await self._refused_part(sources[id(refused.record)], refused)
        self._finish(item.message for item in items)

    async def _refused_part(self, item: SplitMessage, refused: Refused) -> None:
        """A part too large for the spans topic: dead-lettered, its trace's spans in the input's
        format (the other traces of the message went on)."""
        record = refused.record
        trace_id = (record.key or b"").decode("ascii", "replace")
        value = record.value if item.logs else await in_input_format(record.value, item.format)
        error_class = type(refused.error).__name__
        detail = (
            f"trace {trace_id}: its part of {len(record.value)} bytes is too large for the spans"
            f" topic ({error_class})"
        )
        await self._rejecter.dead_letter(item.message, "too_large", error_class, detail, value)

    async def take_natives(self, items: Sequence[tuple[RawMessage, Trace]]) -> None:
        """Passed on unchanged, keyed by conversation."""
        origins: dict[int, RawMessage] = {}
        records: list[OutRecord] = []
        for msg, trace in items:
            record = OutRecord(
                self._traces_topic,
                trace.partition_key.encode(),
                msg.value or b"",
                without_our_headers(msg),
            )
            records.append(record)
            origins[id(record)] = msg
        for refusal in await self._writer.send_all(records):
            error_class = type(refusal.error).__name__
            detail = f"the traces topic refused it ({error_class})"
            await self._rejecter.dead_letter(
                origins[id(refusal.record)], "too_large", error_class, detail
            )
        self._finish(msg for msg, _ in items)

    def _finish(self, messages: Iterable[RawMessage]) -> None:
        for msg in messages:
            self._tracker.finish(msg.tp, msg.offset)


class InProcess:
    """The re-key stage's output without Kafka between the stages: parts straight into the
    assemble stage, natives straight to the score stage (the file source)."""

    def __init__(
        self,
        parts: Callable[[Sequence[SplitMessage]], Awaitable[None]],
        natives: Callable[[Sequence[tuple[RawMessage, Trace]]], Awaitable[None]] | None = None,
    ) -> None:
        """`natives` None: the router sends no native traces this way."""
        self._parts = parts
        self._natives = natives

    async def take_parts(self, items: Sequence[SplitMessage]) -> None:
        await self._parts(items)

    async def take_natives(self, items: Sequence[tuple[RawMessage, Trace]]) -> None:
        if self._natives is None:
            raise RuntimeError("native traces reached an OTLP-only re-key stage")
        await self._natives(items)
