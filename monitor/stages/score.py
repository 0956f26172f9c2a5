"""From raw messages to processed traces: decode, dead-letter what is bad, dispatch the rest.

Every message is begun in the offset tracker when read and finished only when all the traces it
carried are processed, deliberately skipped or dead-lettered, so committed offsets never pass
unfinished work. Only a fault of the trace itself dead-letters it (`monitor.faults`): a store or
broker that is away holds the trace (the sinks retry; here it is processed again until it goes
through), and a trace whose partition was revoked is left for the next owner, which reads it
again. A fetched batch is decoded at once and handed to one task; at most
`max_in_flight` traces are unfinished at a time, beyond which reading waits (the cheap stages
keep up; the costly judge sheds load on its own).

Traces of one conversation are processed one at a time, in the order of their start (within a
batch; across batches in the order read), while different conversations run concurrently. OTLP
messages go to the OTLP intake: re-keyed through the spans topic on Kafka, assembled in process
for the file source.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
from aiokafka.structs import TopicPartition
from opentelemetry import trace as otel_trace
from opentelemetry.context import Context

from monitor.config import InputFormat
from monitor.faults import DataFault, ServiceFault, owned_while
from monitor.formats.assembly import Release
from monitor.formats.native import DecodeError, decode_native
from monitor.formats.otlp import OtlpFormat, detect_format
from monitor.formats.otlp_logs import detect_logs_format
from monitor.log_throttle import Throttled
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.offload import offload
from monitor.sinks.produce import ProduceRejected
from monitor.sources.offsets import OffsetTracker
from monitor.stages.assemble import OtlpIntake, PartToken
from monitor.stages.conversation import turn_order_key
from monitor.telemetry import context_from_headers
from monitor.typing import DeadLetterSink, TraceProcessor

log = structlog.get_logger(__name__)

MAX_EXEMPLAR_ID_CHARS = 64
BATCH_WORKERS = 32  # OpenMetrics caps exemplar labels at 128 characters in all
SERVICE_RETRY_SECONDS = 1.0  # before processing again a trace a service fault held


@dataclass(frozen=True, slots=True)
class _Work:
    trace: Trace
    tokens: tuple[RawMessage, ...]
    parent: Context | None = None
    # the generation of each of the tokens' partitions when they were read (`owned`)
    generations: tuple[tuple[TopicPartition, int], ...] = ()


class Ingest:
    def __init__(
        self,
        *,
        input_format: InputFormat,
        max_message_bytes: int,
        processor: TraceProcessor,
        dead_letters: DeadLetterSink,
        tracker: OffsetTracker,
        metrics: Metrics,
        tracer: otel_trace.Tracer | None,
        max_in_flight: int,
        otlp: OtlpIntake | None = None,
        assembled_topics: frozenset[str] = frozenset(),
        text_lines: bool = False,
        on_fatal: Callable[[ProduceRejected], None] | None = None,
    ) -> None:
        """`otlp` takes OTLP messages (None: input is native only); `assembled_topics` hold
        native traces the OTLP stage assembled (never OTLP, already counted as decoded).
        `text_lines`: messages are lines of a text file (the file source), so with the `auto`
        format bytes that are not JSON are a native decoding error (invalid_utf8, invalid_json),
        never OTLP protobuf. `on_fatal` hears of a write the cluster refuses for good (the trace
        then stays unfinished, its offset uncommitted)."""
        self._format = input_format
        self._text_lines = text_lines
        self._max_bytes = max_message_bytes
        self._processor = processor
        self._dead_letters = dead_letters
        self._tracker = tracker
        self._metrics = metrics
        self._tracer = tracer  # None: tracing is off and costs nothing per message
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._capacity = asyncio.Event()
        self._waiting = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._otlp = otlp
        self._assembled_topics = assembled_topics
        # The last batch's work per conversation, which the next batch's work of it waits for.
        self._tails: dict[str, asyncio.Future[None]] = {}
        self._decoded_native = metrics.traces_decoded.labels("native")
        self._on_fatal = on_fatal
        self._draining = False
        self._data_faults: dict[str, Throttled] = {}

    def attach_otlp(self, otlp: OtlpIntake) -> None:
        """Where OTLP messages go (set after construction: an in-process intake feeds back)."""
        self._otlp = otlp

    @property
    def in_flight(self) -> int:
        """Traces dispatched but not finished."""
        return self._in_flight

    async def handle_batch(self, messages: Sequence[RawMessage]) -> None:
        """Take fetched messages; returns once they are dispatched (not necessarily processed).

        The good traces are dispatched before the bad messages are dead-lettered, so a
        dead-letter topic that does not answer holds up only the bad ones (and the commits).
        """
        work: list[_Work] = []
        bad: list[tuple[RawMessage, DecodeError]] = []
        otlp: list[tuple[RawMessage, OtlpFormat]] = []
        logs: list[tuple[RawMessage, OtlpFormat]] = []
        consumed: dict[str, int] = {}
        decoded = 0
        for msg in messages:
            consumed[msg.topic] = consumed.get(msg.topic, 0) + 1
            self._tracker.begin(msg.tp, msg.offset)
            item = await self._decode(msg, otlp, logs)
            if isinstance(item, DecodeError):
                bad.append((msg, item))
            elif item is not None:
                work.append(item)
                decoded += msg.topic not in self._assembled_topics
        for topic, count in consumed.items():
            self._metrics.messages_consumed.labels(topic).inc(count)
        if work:
            self._decoded_native.inc(decoded)
            await self._dispatch(work)
        if otlp or logs:
            if self._otlp is None:
                off = DecodeError("otlp_undecodable", "OTLP input is off")
                bad += [(msg, off) for msg, _ in otlp + logs]
            else:
                if otlp:
                    await self._otlp.take(otlp)
                if logs:
                    await self._otlp.take_logs(logs)
        for msg, error in bad:
            await self.reject(msg, error)

    async def _decode(
        self,
        msg: RawMessage,
        otlp: list[tuple[RawMessage, OtlpFormat]],
        logs: list[tuple[RawMessage, OtlpFormat]],
    ) -> _Work | DecodeError | None:
        """A native trace ready to process; what is wrong with a message to dead-letter; None
        when the message is OTLP (then added to `otlp`, or to `logs` for an OTLP/JSON logs
        export in the `auto` format)."""
        if msg.value is not None and msg.value_size > self._max_bytes:
            return DecodeError("too_large", f"{msg.value_size} bytes, limit {self._max_bytes}")
        fmt: InputFormat = self._format
        if msg.topic in self._assembled_topics:
            fmt = "native"
        elif fmt == "auto":
            fmt = detect_format(msg.value or b"")
            if fmt == "otlp_proto" and self._text_lines:
                fmt = "native"  # a line of text is never protobuf: let the decoder name the fault
            if fmt == "native" and detect_logs_format(msg.value or b"") == "otlp_json":
                logs.append((msg, "otlp_json"))  # GenAI events as OTLP/JSON logs
                return None
        if fmt == "otlp_json" or fmt == "otlp_proto":
            otlp.append((msg, fmt))
            return None
        parent = None
        if self._tracer is not None:
            with self._tracer.start_as_current_span(
                "rag-monitor decode", context=context_from_headers(msg.headers)
            ) as span:
                span.set_attribute("messaging.kafka.offset", msg.offset)
                parent = otel_trace.set_span_in_context(span)
        try:
            trace = await offload(
                msg.value_size, functools.partial(decode_native, msg.value, self._max_bytes)
            )
        except DecodeError as exc:
            return exc
        return self._work(trace, (msg,), parent)

    def _work(
        self, trace: Trace, tokens: tuple[RawMessage, ...], parent: Context | None = None
    ) -> _Work:
        generations = tuple((t.tp, self._tracker.generation(t.tp)) for t in tokens)
        return _Work(trace, tokens, parent, generations)

    def _owned(self, item: _Work) -> bool:
        """The trace's partitions are still ours (not revoked since it was read)."""
        return all(self._tracker.generation(tp) == g for tp, g in item.generations)

    async def tick(self) -> None:
        """Let the OTLP intake release what is due (assembled traces, in process)."""
        if self._otlp is not None:
            await self._otlp.tick()

    async def dispatch_assembled(self, items: list[tuple[Trace, Release[PartToken]]]) -> None:
        """Traces assembled in process (the file source): scored like native ones."""
        await self._dispatch(
            [
                self._work(trace, tuple(t.message for t in release.tokens))
                for trace, release in items
            ]
        )

    @property
    def waiting_for_capacity(self) -> bool:
        """Reading is paused because `max_in_flight` traces are unfinished (backpressure)."""
        return self._waiting

    async def _dispatch(self, work: list[_Work]) -> None:
        while self._in_flight and self._in_flight + len(work) > self._max_in_flight:
            self._capacity.clear()
            self._waiting = True
            try:
                await self._capacity.wait()
            finally:
                self._waiting = False
        self._in_flight += len(work)
        self._metrics.in_flight.set(self._in_flight)
        task = asyncio.create_task(self._process_batch(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process_batch(self, work: list[_Work]) -> None:
        # Concurrent across conversations (the sinks are I/O-bound), through a few workers
        # rather than a task per trace: task creation would cost more than the decoding. One
        # conversation's traces run in one worker, in start order, after the conversation's
        # traces of earlier batches.
        groups: dict[str, list[_Work]] = {}
        for item in work:
            groups.setdefault(item.trace.partition_key, []).append(item)
        loop = asyncio.get_running_loop()
        chained: list[tuple[str, list[_Work], asyncio.Future[None] | None, asyncio.Future[None]]]
        chained = []
        for key, items in groups.items():
            if len(items) > 1:
                items.sort(key=lambda w: turn_order_key(w.trace))
            done: asyncio.Future[None] = loop.create_future()
            chained.append((key, items, self._tails.get(key), done))
            self._tails[key] = done
        queue = iter(chained)

        async def worker() -> None:
            for key, items, previous, done in queue:
                try:
                    if previous is not None and not previous.done():
                        await asyncio.wait([previous])
                    for item in items:
                        await self._process_and_release(item)
                finally:
                    done.set_result(None)
                    if self._tails.get(key) is done:
                        del self._tails[key]

        workers = min(len(chained), BATCH_WORKERS)
        if workers == 1:
            await worker()
        else:
            await asyncio.gather(*(worker() for _ in range(workers)))

    async def _process_and_release(self, item: _Work) -> None:
        try:
            await self._process(item)
        finally:
            self._release(1)

    def _release(self, count: int) -> None:
        self._in_flight -= count
        self._metrics.in_flight.set(self._in_flight)
        self._capacity.set()

    async def _process(self, item: _Work) -> None:
        """Process one trace and finish its messages, unless it was cancelled (shutdown) or a
        write failed for good: then its offsets stay uncommitted, to be read again."""
        trace = item.trace
        structlog.contextvars.bind_contextvars(trace_id=trace.trace_id)
        started = time.perf_counter()
        agent = self._metrics.agent_label(trace.agent)
        finished = True
        try:
            with owned_while(lambda: self._owned(item)):
                await self._process_held(item)
            self._metrics.traces_processed.labels(agent, "ok").inc()
        except ProduceRejected as exc:
            if self._on_fatal is None:
                raise
            self._on_fatal(exc)
            finished = False
        except ServiceFault as exc:
            finished = False  # its offset stays uncommitted: read again, here or elsewhere
            log.info("trace left unfinished; it will be read again", reason=str(exc))
        except DataFault as exc:
            self._metrics.traces_processed.labels(agent, "error").inc()
            throttled = self._data_faults.get(exc.reason)
            if throttled is None:
                throttled = self._data_faults[exc.reason] = Throttled(
                    "trace dead-lettered by a fault of its own"
                )
            throttled.note(reason=exc.reason, error=str(exc))
            await self._dead_letter_trace(item, exc.reason, exc)
        except Exception as exc:
            log.exception("processing failed; dead-lettering the trace")
            self._metrics.traces_processed.labels(agent, "error").inc()
            await self._dead_letter_trace(item, "processing_error", exc)
        finally:
            elapsed = time.perf_counter() - started
            exemplar = (
                {"trace_id": trace.trace_id}
                if len(trace.trace_id) <= MAX_EXEMPLAR_ID_CHARS
                else None
            )
            self._metrics.processing_seconds.observe(elapsed, exemplar=exemplar)
        if finished:  # not when cancelled (shutdown): then it is read again
            self._finish(item.tokens)

    async def _process_held(self, item: _Work) -> None:
        """Process the trace; while a service it needs is away (a fault the sinks could not wait
        out), again after a pause, as long as the trace is ours and the daemon is not stopping."""
        while True:
            try:
                if self._tracer is not None:
                    with self._tracer.start_as_current_span(
                        "rag-monitor process", context=item.parent
                    ):
                        await self._processor.process(item.trace)
                else:
                    await self._processor.process(item.trace)
                return
            except ServiceFault:
                if self._draining or not self._owned(item):
                    raise
            await asyncio.sleep(SERVICE_RETRY_SECONDS)

    async def _dead_letter_trace(self, item: _Work, reason: str, exc: Exception) -> None:
        detail = f"{type(exc).__name__}: {exc}"
        value = item.trace.model_dump_json().encode()
        for token in item.tokens:
            await self._dead_letter(token, reason, type(exc).__name__, detail, value=value)

    async def reject(self, msg: RawMessage, error: DecodeError, finish: bool = True) -> None:
        """Dead-letter a message that cannot be decoded (and finish it)."""
        if not self._text_lines:  # a file's dead letters are lines on stderr: reported already
            log.warning(
                "message dead-lettered",
                topic=msg.topic,
                partition=msg.partition,
                offset=msg.offset,
                reason=error.reason,
                error=error.detail,
            )
        await self._dead_letter(msg, error.reason, type(error).__name__, error.detail)
        if finish:
            self._tracker.finish(msg.tp, msg.offset)

    async def _dead_letter(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        await self._dead_letters.send(msg, reason, error_class, detail, value=value)
        self._metrics.dead_letters.labels(reason).inc()

    def finish_messages(self, tokens: Sequence[RawMessage]) -> None:
        self._finish(tokens)

    def _finish(self, tokens: Sequence[RawMessage]) -> None:
        for token in tokens:
            self._tracker.finish(token.tp, token.offset)

    async def drain(self, deadline: float) -> bool:
        """Release what the in-process OTLP intake still holds and wait for in-flight work until
        `deadline` (monotonic). Returns False when the deadline passed with work still running.
        """
        self._draining = True  # a trace a service fault holds is left for the next start
        if self._otlp is not None:
            await self._otlp.flush()
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True

    def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
