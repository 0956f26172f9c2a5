"""From raw messages to processed traces: decode, dead-letter what is bad, dispatch the rest.

Every message is begun in the offset tracker when read and finished only when all the traces it
carried are processed, deliberately skipped or dead-lettered, so committed offsets never pass
unfinished work. A fetched batch is decoded at once and its traces processed in order by one
task; at most `max_in_flight` traces are unfinished at a time, beyond which reading waits (the
cheap stages keep up; the costly judge sheds load on its own).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from opentelemetry import trace as otel_trace
from opentelemetry.context import Context

from monitor.config import InputFormat
from monitor.export.metrics import Metrics
from monitor.models import Trace
from monitor.source.deadletter import DeadLetterSink
from monitor.source.messages import RawMessage
from monitor.source.native import DecodeError, decode_native
from monitor.source.offsets import OffsetTracker
from monitor.source.otlp import (
    Assembled,
    OtlpDecodeError,
    OtlpFormat,
    TraceAssembler,
    decode_otlp,
    detect_format,
)
from monitor.stage import TraceProcessor
from monitor.telemetry import context_from_headers

log = structlog.get_logger(__name__)

MAX_EXEMPLAR_ID_CHARS = 64
BATCH_WORKERS = 32  # OpenMetrics caps exemplar labels at 128 characters in all


@dataclass(frozen=True, slots=True)
class _Work:
    trace: Trace
    tokens: tuple[RawMessage, ...]
    parent: Context | None = None


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
        assembly_window_seconds: float,
        max_pending_traces: int,
        text_lines: bool = False,
    ) -> None:
        """`text_lines`: messages are lines of a text file (the file source), so with the `auto`
        format bytes that are not JSON are a native decoding error (invalid_utf8, invalid_json),
        never OTLP protobuf."""
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
        self._assembler: TraceAssembler[RawMessage] = TraceAssembler(
            window_seconds=assembly_window_seconds, max_pending_traces=max_pending_traces
        )
        self._decoded_native = metrics.traces_decoded.labels("native")
        self._decoded_otlp = metrics.traces_decoded.labels("otlp")

    @property
    def in_flight(self) -> int:
        """Traces dispatched but not finished."""
        return self._in_flight

    async def handle_batch(self, messages: Sequence[RawMessage]) -> None:
        """Take fetched messages; returns once they are dispatched (not necessarily processed)."""
        work: list[_Work] = []
        consumed: dict[str, int] = {}
        for msg in messages:
            consumed[msg.topic] = consumed.get(msg.topic, 0) + 1
            self._tracker.begin(msg.tp, msg.offset)
            item = await self._decode(msg)
            if item is not None:
                work.append(item)
        for topic, count in consumed.items():
            self._metrics.messages_consumed.labels(topic).inc(count)
        if work:
            self._decoded_native.inc(len(work))
            await self._dispatch(work)

    async def _decode(self, msg: RawMessage) -> _Work | None:
        """A native trace ready to process; None when the message was rejected or assembles."""
        if msg.value is not None and msg.value_size > self._max_bytes:
            error = DecodeError("too_large", f"{msg.value_size} bytes, limit {self._max_bytes}")
            await self._reject(msg, error)
            return None
        fmt = self._format if self._format != "auto" else detect_format(msg.value or b"")
        if fmt == "otlp_proto" and self._text_lines and self._format == "auto":
            fmt = "native"  # a line of text is never protobuf: let the decoder name the fault
        if fmt != "native":
            await self._add_otlp(msg, fmt)
            return None
        parent = None
        if self._tracer is not None:
            with self._tracer.start_as_current_span(
                "rag-monitor decode", context=context_from_headers(msg.headers)
            ) as span:
                span.set_attribute("messaging.kafka.offset", msg.offset)
                parent = otel_trace.set_span_in_context(span)
        try:
            trace = decode_native(msg.value, self._max_bytes)
        except DecodeError as exc:
            await self._reject(msg, exc)
            return None
        return _Work(trace, (msg,), parent)

    async def _add_otlp(self, msg: RawMessage, fmt: OtlpFormat) -> None:
        try:
            spans = decode_otlp(msg.value or b"", fmt)
        except OtlpDecodeError as exc:
            await self._reject(msg, DecodeError("otlp_undecodable", str(exc)))
            return
        trace_ids = {span.trace_id for span in spans}
        if not trace_ids:
            self._metrics.traces_skipped.labels("otlp_no_spans").inc()
            self._tracker.finish(msg.tp, msg.offset)
            return
        # One unit of work per trace the message contributes to.
        self._tracker.add_units(msg.tp, msg.offset, len(trace_ids) - 1)
        self._assembler.add(spans, msg, time.monotonic())

    async def tick(self) -> None:
        """Dispatch OTLP traces whose assembly window has closed."""
        await self._dispatch_assembled(self._assembler.pop_ready(time.monotonic()))

    async def _dispatch_assembled(self, batch: list[Assembled[RawMessage]]) -> None:
        work: list[_Work] = []
        for assembled in batch:
            tokens = tuple(dict.fromkeys(assembled.tokens))
            result = assembled.result
            if assembled.late:
                # Late spans would overwrite the whole trace's result with a partial one.
                self._metrics.traces_skipped.labels("otlp_late_spans").inc()
                self._finish(tokens)
            elif isinstance(result, Trace):
                work.append(_Work(result, tokens))
            elif result is None:
                self._metrics.traces_skipped.labels("otlp_not_rag").inc()
                self._finish(tokens)
            else:
                error = DecodeError("otlp_unmappable", f"trace {assembled.trace_id}: {result}")
                for token in tokens:
                    await self._reject(token, error, finish=False)
                self._finish(tokens)
        if work:
            self._decoded_otlp.inc(len(work))
            await self._dispatch(work)

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
        # Concurrent within the batch (the sinks are I/O-bound), through a few workers rather
        # than a task per trace: task creation would cost more than the decoding.
        items = iter(work)

        async def worker() -> None:
            for item in items:
                await self._process_and_release(item)

        workers = min(len(work), BATCH_WORKERS)
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
        trace = item.trace
        structlog.contextvars.bind_contextvars(trace_id=trace.trace_id)
        started = time.perf_counter()
        agent = self._metrics.agent_label(trace.agent)
        try:
            if self._tracer is not None:
                with self._tracer.start_as_current_span("rag-monitor process", context=item.parent):
                    await self._processor.process(trace)
            else:
                await self._processor.process(trace)
            self._metrics.traces_processed.labels(agent, "ok").inc()
        except Exception as exc:
            log.exception("processing failed; dead-lettering the trace")
            self._metrics.traces_processed.labels(agent, "error").inc()
            detail = f"{type(exc).__name__}: {exc}"
            value = trace.model_dump_json().encode()
            for token in item.tokens:
                await self._dead_letter(
                    token, "processing_error", type(exc).__name__, detail, value=value
                )
        finally:
            elapsed = time.perf_counter() - started
            exemplar = (
                {"trace_id": trace.trace_id}
                if len(trace.trace_id) <= MAX_EXEMPLAR_ID_CHARS
                else None
            )
            self._metrics.processing_seconds.observe(elapsed, exemplar=exemplar)
            self._finish(item.tokens)

    async def _reject(self, msg: RawMessage, error: DecodeError, finish: bool = True) -> None:
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

    def _finish(self, tokens: Sequence[RawMessage]) -> None:
        for token in tokens:
            self._tracker.finish(token.tp, token.offset)

    async def drain(self, deadline: float) -> bool:
        """Emit every assembling trace and wait for in-flight work until `deadline` (monotonic).

        Returns False when the deadline passed with work still running.
        """
        await self._dispatch_assembled(self._assembler.flush())
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True

    def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
