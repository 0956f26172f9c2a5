"""The OTLP stage (DESIGN.md section 1): re-key span exports per trace, assemble whole traces.

On Kafka it is a consumer group of its own, reading the OTLP input topics and the internal spans
topic:

- a raw export (from an OTLP input topic, or an OTLP message the scoring stage found on a native
  topic) is split per trace and each part is produced to the spans topic keyed by trace id, so
  every span of a trace reaches one replica whatever partition the Collector wrote it to; the
  input message is finished once every part is acknowledged;
- a spans-topic message goes into the assembler; each trace it releases is mapped onto a `Trace`
  and produced as native JSON to the traces topic keyed by conversation id (trace id without
  one), where the scoring stage reads it in order; the spans messages are finished once that
  trace is acknowledged, dead-lettered or deliberately skipped.

Log exports from `kafka.otlp_logs_topics` (GenAI events that carry the prompts and answers
with `event_only` content capture) take the same way: split per trace, keeping the records the
mapping reads, and produced to the spans topic keyed by trace id, marked as log records by a
header; the assembler keeps them beside the trace's spans and the mapping joins them to their
spans (`attach_log_events`). A trace whose spans are complete before its log records arrive
cannot be mapped yet (no question or answer): while log topics are configured it waits for
them, up to `otlp_assembly_max_seconds` after its first part, instead of being dead-lettered.
A re-assembly that maps to the same trace as before (log records that repeat what the spans
said) is not produced again.

The file source runs the same split and assembly in process and hands releases straight to
scoring. A trace that cannot be mapped is dead-lettered alone: its own spans, encoded in the
input's format, with the origin of the message it first came in.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from monitor import metrics_catalog as catalog
from monitor.config import KafkaConfig
from monitor.formats.assembly import Release, TraceAssembler
from monitor.formats.native import DecodeError, decode_native
from monitor.formats.otlp import (
    OtlpDecodeError,
    OtlpFormat,
    OtlpMappingError,
    detect_format,
)
from monitor.formats.otlp_logs import detect_logs_format
from monitor.formats.otlp_release import map_release, release_bytes
from monitor.formats.otlp_split import (
    LogsPart,
    Split,
    TracePart,
    encode_request,
    merge_parts,
    split_by_trace,
    split_logs_by_trace,
)
from monitor.logs import CountedWarning
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.offload import offload
from monitor.sinks.deadletter import HEADER_PREFIX
from monitor.sinks.writer import OutRecord, Refused, TopicWriter
from monitor.sources.offsets import OffsetTracker
from monitor.typing import DeadLetterSink

log = structlog.get_logger(__name__)

FORMAT_HEADER = HEADER_PREFIX + "input.format"
ORIGIN_TOPIC = HEADER_PREFIX + "original.topic"
ORIGIN_PARTITION = HEADER_PREFIX + "original.partition"
ORIGIN_OFFSET = HEADER_PREFIX + "original.offset"
ORIGIN_KEY = HEADER_PREFIX + "original.key"
REVISION_HEADER = HEADER_PREFIX + "trace.revision"
PART_KIND_HEADER = HEADER_PREFIX + "part.kind"
LOGS_KIND = b"logs"  # a spans-topic part holding log records, not spans
# Mapping failures that content still to come as log records can cure.
AWAITING_CONTENT = frozenset({"no_query", "no_answer"})

Finish = Callable[[Sequence[RawMessage]], None]
Reject = Callable[[RawMessage, DecodeError], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PartToken:
    """One part's bookkeeping: the message to finish, where its spans came from, their format."""

    message: RawMessage
    origin: RawMessage
    fmt: OtlpFormat


AssembledOutput = Callable[[list[tuple[Trace, Release[PartToken]]]], Awaitable[None]]
ScoredWhole = Callable[[str], Awaitable[bool]]


class OtlpIntake(Protocol):
    """Where the scoring stage hands OTLP messages it finds on its topics."""

    async def take(self, messages: Sequence[tuple[RawMessage, OtlpFormat]]) -> None: ...

    async def take_logs(self, messages: Sequence[tuple[RawMessage, OtlpFormat]]) -> None: ...

    async def tick(self) -> None: ...

    async def flush(self) -> None: ...


class OtlpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.traces = catalog.create(catalog.OTLP_ASSEMBLY_TRACES, registry)
        self.bytes = catalog.create(catalog.OTLP_ASSEMBLY_BYTES, registry)
        self.released = catalog.create(catalog.OTLP_TRACES_RELEASED, registry)
        self.shed = catalog.create(catalog.OTLP_ASSEMBLY_SHED, registry)


# ------------------------------------------------------------------------------ provenance


def part_headers(msg: RawMessage, fmt: OtlpFormat, logs: bool = False) -> list[tuple[str, bytes]]:
    """Headers of a part on the spans topic: the input's own, then where it came from (and,
    for log records, what it holds)."""
    kept = [(k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)]
    ours = [
        (ORIGIN_TOPIC, msg.topic.encode()),
        (ORIGIN_PARTITION, str(msg.partition).encode()),
        (ORIGIN_OFFSET, str(msg.offset).encode()),
        (FORMAT_HEADER, fmt.encode()),
    ]
    if msg.key is not None:
        ours.append((ORIGIN_KEY, msg.key))
    if logs:
        ours.append((PART_KIND_HEADER, LOGS_KIND))
    return kept + ours


def holds_logs(msg: RawMessage) -> bool:
    """A spans-topic message carrying log records."""
    return any(k == PART_KIND_HEADER and v == LOGS_KIND for k, v in msg.headers)


def part_token(msg: RawMessage) -> PartToken:
    """The token of a spans-topic message, its origin restored from the headers."""
    headers = dict(msg.headers)
    fmt_text = headers.get(FORMAT_HEADER, b"otlp_proto").decode("ascii", "replace")
    fmt: OtlpFormat = "otlp_json" if fmt_text == "otlp_json" else "otlp_proto"
    try:
        origin = RawMessage(
            topic=headers[ORIGIN_TOPIC].decode("utf-8", "replace"),
            partition=int(headers[ORIGIN_PARTITION]),
            offset=int(headers[ORIGIN_OFFSET]),
            key=headers.get(ORIGIN_KEY),
            value=None,
            headers=tuple((k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)),
        )
    except (KeyError, ValueError):  # written by someone else: the spans message is the origin
        origin = RawMessage(msg.topic, msg.partition, msg.offset, msg.key, None, msg.headers)
    return PartToken(msg, origin, fmt)


async def dead_letter(
    sink: DeadLetterSink,
    metrics: Metrics,
    origin: RawMessage,
    reason: str,
    error_class: str,
    detail: str,
    value: bytes | None = None,
) -> None:
    """Dead-letter (and count) what came in `origin`: its own value, or `value` in its place."""
    log.warning(
        "message dead-lettered",
        topic=origin.topic,
        partition=origin.partition,
        offset=origin.offset,
        reason=reason,
        error=detail,
    )
    await sink.send(origin, reason, error_class, detail, value=value)
    metrics.dead_letters.labels(reason).inc()


async def dead_letter_release(
    sink: DeadLetterSink,
    metrics: Metrics,
    release: Release[PartToken],
    reason: str,
    error: Exception,
    max_bytes: int,
) -> None:
    """Dead-letter one trace: its spans in the input's format, under its first origin."""
    merged = merge_parts(list(release.parts))
    detail = f"trace {release.trace_id}: {error}"
    value: bytes | None = None
    if len(merged) > max_bytes:  # its JSON would be larger still: not worth the CPU
        detail += f" (its {len(merged)} bytes of spans exceed {max_bytes} and are not attached)"
    else:
        value = await offload(
            len(merged), functools.partial(_in_input_format, merged, release.origin.fmt)
        )
    await dead_letter(
        sink, metrics, release.origin.origin, reason, type(error).__name__, detail, value
    )


def _in_input_format(merged: bytes, fmt: OtlpFormat) -> bytes:
    try:
        return encode_request(merged, fmt)
    except Exception:  # undecodable parts cannot be re-encoded: keep them as they are
        return merged


# ------------------------------------------------------------------------------ assembling


class Assembly:
    """Parts in, mapped traces out: the assembler plus mapping, dead letters and skips."""

    def __init__(
        self,
        *,
        kafka: KafkaConfig,
        metrics: Metrics,
        otlp_metrics: OtlpMetrics,
        dead_letters: DeadLetterSink,
        output: AssembledOutput,
        finish: Finish,
        awaits_events: bool = False,
        scored_whole: ScoredWhole | None = None,
    ) -> None:
        """`awaits_events`: log records may bring a trace's content after its spans (log topics
        are read), so a trace that cannot be mapped for want of a question or answer waits.
        `scored_whole` says whether a trace id already has a result of the whole trace (the
        store), so that fragments of it read again are skipped, not dead-lettered."""
        self._metrics = metrics
        self._otlp = otlp_metrics
        self._dead_letters = dead_letters
        self._output = output
        self._finish = finish
        self._max_bytes = kafka.max_message_bytes
        self._plain_llm_calls = kafka.otlp_score_plain_llm_calls
        self._awaits_events = awaits_events
        self._scored_whole = scored_whole
        self._max_spans = kafka.otlp_max_spans_per_trace
        self._shedding = CountedWarning(
            log, "OTLP assembler shedding traces at its memory bound (kafka.otlp_max_pending_*)"
        )
        self._assembler: TraceAssembler[PartToken] = TraceAssembler(
            max_seconds=kafka.otlp_assembly_max_seconds,
            grace_seconds=kafka.otlp_late_span_grace_seconds,
            max_traces=kafka.otlp_max_pending_traces,
            max_bytes=kafka.otlp_max_pending_bytes,
            settle_seconds=kafka.otlp_assembly_settle_seconds,
            on_shed=self._shed,
            max_spans=kafka.otlp_max_spans_per_trace,
        )
        self._late = metrics.traces_skipped.labels("otlp_late_spans")
        self._not_rag = metrics.traces_skipped.labels("otlp_not_rag")
        self._no_spans = metrics.traces_skipped.labels("otlp_no_spans")
        self._decoded = metrics.traces_decoded.labels("otlp")

    @property
    def assembler(self) -> TraceAssembler[PartToken]:
        return self._assembler

    def _shed(self, reason: str) -> None:
        self._otlp.shed.labels(reason).inc()
        self._shedding.count(reason, **self._held())

    def _held(self) -> dict[str, int]:
        return {
            "pending": self._assembler.pending,
            "kept": self._assembler.kept,
            "bytes": self._assembler.bytes,
        }

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
                await self._reject(release, "too_many_spans", error)
                self._finish([t.message for t in release.tokens])
            detail = f"trace {trace_id}: {error}"
            value = data if len(data) <= self._max_bytes else None
            if value is not None:
                value = await offload(len(data), functools.partial(encode_request, data, token.fmt))
            await dead_letter(
                self._dead_letters,
                self._metrics,
                token.origin,
                "too_many_spans",
                type(error).__name__,
                detail,
                value,
            )
            self._finish([token.message])

    async def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        await self._handle(self._assembler.pop_ready(now), now)
        self._shedding.flush(**self._held())

    async def flush(self) -> None:
        now = time.monotonic()
        await self._handle(self._assembler.flush(now), now, final=True)

    def drop_pending(self, keep: set[Hashable]) -> int:
        dropped = self._assembler.drop_pending(keep)
        self._update_gauges()
        return dropped

    async def _handle(
        self, releases: list[Release[PartToken]], now: float, final: bool = False
    ) -> None:
        traces: list[tuple[Trace, Release[PartToken]]] = []
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
            except OtlpDecodeError as exc:
                self._count_release(release)
                await self._reject(release, "otlp_undecodable", exc)
                self._finish(tokens)
                continue
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
                await self._reject(release, "otlp_unmappable", exc)
                self._finish(tokens)
                continue
            if mapped is None:
                self._count_release(release)
                self._not_rag.inc()
                self._finish(tokens)
                continue
            result, digest = mapped
            if release.revision > 1 and release.note == digest:
                log.debug("re-assembly changes nothing", trace_id=release.trace_id)
                self._finish(tokens)  # already produced as it is: not released again
                continue
            self._count_release(release)
            if release.revision == 1:
                self._decoded.inc()
            traces.append((result, release))
            notes.append((release.trace_id, digest))
        if traces:
            await self._output(traces)
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

    async def _reject(self, release: Release[PartToken], reason: str, error: Exception) -> None:
        await dead_letter_release(
            self._dead_letters, self._metrics, release, reason, error, self._max_bytes
        )

    def _update_gauges(self) -> None:
        self._otlp.traces.labels("pending").set(self._assembler.pending)
        self._otlp.traces.labels("kept").set(self._assembler.kept)
        self._otlp.bytes.set(self._assembler.bytes)


def split_or_reject(msg: RawMessage, fmt: OtlpFormat) -> Split | DecodeError:
    try:
        return split_by_trace(msg.value or b"", fmt)
    except OtlpDecodeError as exc:
        return DecodeError("otlp_undecodable", str(exc))


async def split_offloaded(msg: RawMessage, fmt: OtlpFormat) -> Split | DecodeError:
    """`split_or_reject`, in a worker thread for a large message."""
    return await offload(msg.value_size, functools.partial(split_or_reject, msg, fmt))


async def dead_letter_rejected(
    sink: DeadLetterSink, metrics: Metrics, origin: RawMessage, split: Split
) -> None:
    """Dead-letter the traces of a message that cannot be used, each alone (the message's other
    traces go on): its spans as they came, in the input's format."""
    for rejected in split.rejected:
        what = f"trace {rejected.trace_id}" if rejected.trace_id else "spans without a trace id"
        detail = f"{what}: {rejected.detail}"
        await dead_letter(
            sink, metrics, origin, "otlp_undecodable", "OtlpDecodeError", detail, rejected.data
        )


def split_logs_or_reject(msg: RawMessage, fmt: OtlpFormat) -> list[LogsPart] | DecodeError:
    try:
        return split_logs_by_trace(msg.value or b"", fmt)
    except OtlpDecodeError as exc:
        return DecodeError("otlp_undecodable", str(exc))


class LocalIntake:
    """The file source's OTLP path: split and assembled in process, releases scored directly."""

    def __init__(
        self,
        assembly: Assembly,
        tracker: OffsetTracker,
        metrics: Metrics,
        reject: Reject,
        dead_letters: DeadLetterSink,
    ) -> None:
        self._assembly = assembly
        self._tracker = tracker
        self._metrics = metrics
        self._no_spans = metrics.traces_skipped.labels("otlp_no_spans")
        self._reject = reject
        self._dead_letters = dead_letters

    async def take(self, messages: Sequence[tuple[RawMessage, OtlpFormat]]) -> None:
        now = time.monotonic()
        for msg, fmt in messages:
            split = await split_offloaded(msg, fmt)
            if isinstance(split, DecodeError):
                await self._reject(msg, split)
                continue
            await dead_letter_rejected(self._dead_letters, self._metrics, msg, split)
            parts = split.parts
            if not parts:
                self._no_spans.inc()
                self._tracker.finish(msg.tp, msg.offset)
                continue
            self._tracker.add_units(msg.tp, msg.offset, len(parts) - 1)  # one unit per trace
            token = PartToken(msg, msg, fmt)
            for part in parts:
                await self._assembly.add(part, token, now)

    async def take_logs(self, messages: Sequence[tuple[RawMessage, OtlpFormat]]) -> None:
        now = time.monotonic()
        for msg, fmt in messages:
            parts = split_logs_or_reject(msg, fmt)
            if isinstance(parts, DecodeError):
                await self._reject(msg, parts)
                continue
            if not parts:  # no record the mapping reads
                self._tracker.finish(msg.tp, msg.offset)
                continue
            self._tracker.add_units(msg.tp, msg.offset, len(parts) - 1)
            token = PartToken(msg, msg, fmt)
            for part in parts:
                await self._assembly.add_events(part, token, now)

    async def tick(self) -> None:
        await self._assembly.tick()

    async def flush(self) -> None:
        await self._assembly.flush()


class SpanForwarder:
    """The Kafka intake of raw exports: split per trace, produced to the spans topic."""

    def __init__(
        self,
        writer: TopicWriter,
        spans_topic: str,
        metrics: Metrics,
        finish: Finish,
        reject: Reject,
        dead_letters: DeadLetterSink,
    ) -> None:
        self._writer = writer
        self._topic = spans_topic
        self._finish = finish
        self._reject = reject
        self._metrics = metrics
        self._dead_letters = dead_letters
        self._no_spans = metrics.traces_skipped.labels("otlp_no_spans")

    async def take(self, messages: Sequence[tuple[RawMessage, OtlpFormat]]) -> None:
        await self._forward(messages, logs=False)

    async def take_logs(self, messages: Sequence[tuple[RawMessage, OtlpFormat]]) -> None:
        """Log exports: the records the mapping reads, per trace, to the spans topic."""
        await self._forward(messages, logs=True)

    async def _forward(self, messages: Sequence[tuple[RawMessage, OtlpFormat]], logs: bool) -> None:
        records: list[OutRecord] = []
        sources: dict[int, tuple[RawMessage, OtlpFormat]] = {}
        done: list[RawMessage] = []
        for msg, fmt in messages:
            parts = split_logs_or_reject(msg, fmt) if logs else await self._split(msg, fmt)
            if isinstance(parts, DecodeError):
                await self._reject(msg, parts)
                continue
            if not parts and not logs:  # a logs export without GenAI events is simply done
                self._no_spans.inc()
                self._finish([msg])
                continue
            headers = part_headers(msg, fmt, logs=logs)
            for part in parts:
                records.append(OutRecord(self._topic, part.trace_id.encode(), part.data, headers))
                sources[id(records[-1])] = (msg, fmt)
            done.append(msg)
        if records:
            for refused in await self._writer.send_all(records):
                msg, fmt = sources[id(refused.record)]
                await self._refused(msg, fmt, refused, logs)
        self._finish(done)

    async def _split(self, msg: RawMessage, fmt: OtlpFormat) -> list[TracePart] | DecodeError:
        split = await split_offloaded(msg, fmt)
        if isinstance(split, DecodeError):
            return split
        await dead_letter_rejected(self._dead_letters, self._metrics, msg, split)
        return split.parts

    async def _refused(
        self, msg: RawMessage, fmt: OtlpFormat, refused: Refused, logs: bool
    ) -> None:
        """A part the spans topic will not take (too large): dead-lettered, its trace's spans
        in the input's format (the other traces of the message went on)."""
        record = refused.record
        trace_id = (record.key or b"").decode("ascii", "replace")
        value = record.value
        if not logs:
            value = await offload(len(value), functools.partial(encode_request, value, fmt))
        detail = (
            f"trace {trace_id}: its part of {len(record.value)} bytes is too large for the spans"
            f" topic ({type(refused.error).__name__})"
        )
        await dead_letter(
            self._dead_letters,
            self._metrics,
            msg,
            "too_large",
            type(refused.error).__name__,
            detail,
            value,
        )

    async def tick(self) -> None:
        return None

    async def flush(self) -> None:
        return None


class TracesTopicOutput:
    """Assembled traces to the traces topic, keyed by conversation (at-least-once)."""

    def __init__(
        self,
        writer: TopicWriter,
        topic: str,
        finish: Finish,
        dead_letters: DeadLetterSink,
        metrics: Metrics,
        max_bytes: int,
    ) -> None:
        self._writer = writer
        self._topic = topic
        self._finish = finish
        self._dead_letters = dead_letters
        self._metrics = metrics
        self._max_bytes = max_bytes

    async def __call__(self, items: list[tuple[Trace, Release[PartToken]]]) -> None:
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
                await dead_letter_release(
                    self._dead_letters,
                    self._metrics,
                    release,
                    "too_large",
                    error,
                    self._max_bytes,
                )
                self._finish(released)
                continue
            headers = [(REVISION_HEADER, str(release.revision).encode())]
            records.append(
                OutRecord(self._topic, trace.partition_key.encode("utf-8"), value, headers)
            )
            releases[id(records[-1])] = release
            tokens.extend(released)
        if records:
            for refused in await self._writer.send_all(records):
                error = DecodeError(
                    "too_large",
                    f"the traces topic refused the assembled trace of {len(refused.record.value)}"
                    f" bytes ({type(refused.error).__name__})",
                )
                await dead_letter_release(
                    self._dead_letters,
                    self._metrics,
                    releases[id(refused.record)],
                    "too_large",
                    error,
                    self._max_bytes,
                )
        self._finish(tokens)

    async def forward_native(self, items: Sequence[tuple[RawMessage, Trace]]) -> None:
        """Native traces found on an OTLP topic: passed on unchanged, keyed by conversation."""
        origins: dict[int, RawMessage] = {}
        records: list[OutRecord] = []
        for msg, trace in items:
            kept = [(k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)]
            records.append(
                OutRecord(self._topic, trace.partition_key.encode(), msg.value or b"", kept)
            )
            origins[id(records[-1])] = msg
        for refusal in await self._writer.send_all(records) if records else []:
            error_class = type(refusal.error).__name__
            detail = f"the traces topic refused it ({error_class})"
            await dead_letter(
                self._dead_letters,
                self._metrics,
                origins[id(refusal.record)],
                "too_large",
                error_class,
                detail,
            )
        self._finish([msg for msg, _ in items])


# ------------------------------------------------------------------------------ Kafka stage


class KafkaOtlpStage:
    """What the OTLP consumer group does with each fetched batch."""

    def __init__(
        self,
        *,
        kafka: KafkaConfig,
        metrics: Metrics,
        otlp_metrics: OtlpMetrics,
        tracker: OffsetTracker,
        writer: TopicWriter,
        dead_letters: DeadLetterSink,
        scored_whole: ScoredWhole | None = None,
    ) -> None:
        self._kafka = kafka
        self._metrics = metrics
        self._tracker = tracker
        self._dead_letters = dead_letters
        self.spans_topic = kafka.effective_spans_topic
        self.output = TracesTopicOutput(
            writer,
            kafka.effective_traces_topic,
            self._finish,
            dead_letters,
            metrics,
            kafka.max_message_bytes,
        )
        self.assembly = Assembly(
            kafka=kafka,
            metrics=metrics,
            otlp_metrics=otlp_metrics,
            dead_letters=dead_letters,
            output=self.output,
            finish=self._finish,
            awaits_events=bool(kafka.otlp_logs_topics),
            scored_whole=scored_whole,
        )
        self._logs_topics = frozenset(kafka.otlp_logs_topics)
        self.forwarder = SpanForwarder(
            writer, self.spans_topic, metrics, self._finish, self._reject, dead_letters
        )
        self._no_spans = metrics.traces_skipped.labels("otlp_no_spans")
        self._decoded_native = metrics.traces_decoded.labels("native")
        self._busy: set[TopicPartition] = set()
        self._rebalancing = False

    def busy(self, partitions: set[TopicPartition]) -> bool:
        """Work of these partitions is being written right now (revocation waits for it)."""
        return bool(partitions & self._busy)

    async def handle_batch(self, messages: Sequence[RawMessage]) -> None:
        """Take fetched messages. The batch's bad input messages are dead-lettered after its
        good ones are forwarded, so a dead-letter topic that does not answer holds up only
        them (and the commits)."""
        now = time.monotonic()
        bad: list[tuple[RawMessage, DecodeError]] = []
        raw: list[tuple[RawMessage, OtlpFormat]] = []
        logs: list[tuple[RawMessage, OtlpFormat]] = []
        native: list[tuple[RawMessage, Trace]] = []
        consumed: dict[str, int] = {}
        self._busy = {msg.tp for msg in messages}
        try:
            for msg in messages:
                consumed[msg.topic] = consumed.get(msg.topic, 0) + 1
                self._tracker.begin(msg.tp, msg.offset)
                if msg.topic == self.spans_topic:
                    await self._take_part(msg, now)
                    continue
                size = len(msg.value) if msg.value is not None else 0
                if size > self._kafka.max_message_bytes:
                    limit = self._kafka.max_message_bytes
                    bad.append((msg, DecodeError("too_large", f"{size} bytes, limit {limit}")))
                    continue
                if msg.topic in self._logs_topics:
                    logs.append((msg, self._logs_format(msg)))
                    continue
                fmt = (
                    self._kafka.format
                    if self._kafka.format != "auto"
                    else detect_format(msg.value or b"")
                )
                if fmt == "native":
                    decode = functools.partial(
                        decode_native, msg.value, self._kafka.max_message_bytes
                    )
                    try:
                        native.append((msg, await offload(msg.value_size, decode)))
                    except DecodeError as exc:
                        bad.append((msg, exc))
                    continue
                raw.append((msg, fmt))
            for topic, count in consumed.items():
                self._metrics.messages_consumed.labels(topic).inc(count)
            if raw:
                await self.forwarder.take(raw)
            if logs:
                await self.forwarder.take_logs(logs)
            if native:
                self._decoded_native.inc(len(native))
                await self.output.forward_native(native)
            for msg, error in bad:
                await self._reject(msg, error)
            await self.assembly.tick(now)
        finally:
            self._busy = set()

    def _logs_format(self, msg: RawMessage) -> OtlpFormat:
        if self._kafka.format in ("otlp_json", "otlp_proto"):
            return "otlp_json" if self._kafka.format == "otlp_json" else "otlp_proto"
        return detect_logs_format(msg.value or b"")

    async def _take_part(self, msg: RawMessage, now: float) -> None:
        if holds_logs(msg):
            await self._take_logs_part(msg, now)
            return
        split = await split_offloaded(msg, "otlp_proto")
        if isinstance(split, DecodeError):
            await self._reject(msg, split)
            return
        token = part_token(msg)
        await dead_letter_rejected(self._dead_letters, self._metrics, token.origin, split)
        if not split.parts:
            self._no_spans.inc()
            self._finish([msg])
            return
        self._tracker.add_units(msg.tp, msg.offset, len(split.parts) - 1)
        for part in split.parts:
            await self.assembly.add(part, token, now, group=msg.tp)

    async def _take_logs_part(self, msg: RawMessage, now: float) -> None:
        parts = split_logs_or_reject(msg, "otlp_proto")
        if isinstance(parts, DecodeError):
            await self._reject(msg, parts)
            return
        if not parts:
            self._finish([msg])
            return
        self._tracker.add_units(msg.tp, msg.offset, len(parts) - 1)
        token = part_token(msg)
        for part in parts:
            await self.assembly.add_events(part, token, now, group=msg.tp)

    async def tick(self) -> None:
        if not self._rebalancing:
            await self.assembly.tick()

    def on_revoked(self, partitions: set[TopicPartition]) -> None:
        """Nothing is released until the new assignment is known: a trace of a partition that
        goes elsewhere would be assembled twice."""
        self._rebalancing = True

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Traces still assembling from partitions that went to another replica are its now
        (their parts are uncommitted); those of partitions that came back stay, and the parts
        read again join them as duplicates."""
        dropped = self.assembly.drop_pending(set(assigned))
        self._rebalancing = False
        if dropped:
            log.info("traces being assembled left to the partitions' new owner", traces=dropped)

    def _finish(self, messages: Sequence[RawMessage]) -> None:
        for msg in messages:
            self._tracker.finish(msg.tp, msg.offset)

    async def _reject(self, msg: RawMessage, error: DecodeError) -> None:
        origin = part_token(msg).origin if msg.topic == self.spans_topic else msg
        log.warning(
            "message dead-lettered",
            topic=origin.topic,
            partition=origin.partition,
            offset=origin.offset,
            reason=error.reason,
            error=error.detail,
        )
        value = msg.value if msg.topic == self.spans_topic else None
        await self._dead_letters.send(
            origin, error.reason, type(error).__name__, error.detail, value=value
        )
        self._metrics.dead_letters.labels(error.reason).inc()
        self._finish([msg])
