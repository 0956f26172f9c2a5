"""From raw messages to processed traces: decode, dead-letter what is bad, dispatch the rest.

Every message is begun in the offset tracker when read and finished only when all the traces it
carried are processed, deliberately skipped or dead-lettered, so committed offsets never pass
unfinished work. Processing runs in tasks bounded by `max_in_flight`: when the bound is reached,
reading waits (the cheap stages keep up; the costly judge sheds load on its own).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace

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

MAX_EXEMPLAR_ID_CHARS = 64  # OpenMetrics caps exemplar labels at 128 characters in all


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
        tracer: otel_trace.Tracer,
        max_in_flight: int,
        assembly_window_seconds: float,
        max_pending_traces: int,
    ) -> None:
        self._format = input_format
        self._max_bytes = max_message_bytes
        self._processor = processor
        self._dead_letters = dead_letters
        self._tracker = tracker
        self._metrics = metrics
        self._tracer = tracer
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._assembler: TraceAssembler[RawMessage] = TraceAssembler(
            window_seconds=assembly_window_seconds, max_pending_traces=max_pending_traces
        )

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def handle(self, msg: RawMessage) -> None:
        """Take one message; returns once it is dispatched (not necessarily processed)."""
        self._metrics.messages_consumed.labels(msg.topic).inc()
        self._tracker.begin(msg.tp, msg.offset)
        parent = context_from_headers(msg.headers)
        with self._tracer.start_as_current_span("rag-monitor consume", context=parent) as span:
            span.set_attribute("messaging.kafka.offset", msg.offset)
            if msg.value is not None and len(msg.value) > self._max_bytes:
                await self._reject(
                    msg,
                    DecodeError("too_large", f"{len(msg.value)} bytes, limit {self._max_bytes}"),
                )
                return
            fmt = self._format
            if fmt == "auto":
                fmt = detect_format(msg.value or b"")
            if fmt == "native":
                try:
                    with self._tracer.start_as_current_span("rag-monitor decode"):
                        trace = decode_native(msg.value, self._max_bytes)
                except DecodeError as exc:
                    await self._reject(msg, exc)
                    return
                self._metrics.traces_decoded.labels("native").inc()
                await self._dispatch(trace, [msg], otel_context.get_current())
                return
            await self._handle_otlp(msg, fmt)

    async def _handle_otlp(self, msg: RawMessage, fmt: OtlpFormat) -> None:
        try:
            with self._tracer.start_as_current_span("rag-monitor decode"):
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
        for assembled in self._assembler.pop_ready(time.monotonic()):
            await self._dispatch_assembled(assembled)

    async def _dispatch_assembled(self, assembled: Assembled[RawMessage]) -> None:
        result = assembled.result
        tokens = list(dict.fromkeys(assembled.tokens))
        if assembled.late:
            # Late spans would overwrite the whole trace's result with a partial one.
            self._metrics.traces_skipped.labels("otlp_late_spans").inc()
            self._finish(tokens)
        elif isinstance(result, Trace):
            self._metrics.traces_decoded.labels("otlp").inc()
            await self._dispatch(result, tokens, None)
        elif result is None:
            self._metrics.traces_skipped.labels("otlp_not_rag").inc()
            self._finish(tokens)
        else:
            error = DecodeError("otlp_unmappable", f"trace {assembled.trace_id}: {result}")
            for token in tokens:
                await self._reject(token, error, finish=False)
            self._finish(tokens)

    async def _dispatch(
        self, trace: Trace, tokens: Sequence[RawMessage], parent: otel_context.Context | None
    ) -> None:
        await self._slots.acquire()
        self._metrics.in_flight.inc()
        task = asyncio.create_task(self._process(trace, tokens, parent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process(
        self, trace: Trace, tokens: Sequence[RawMessage], parent: otel_context.Context | None
    ) -> None:
        structlog.contextvars.bind_contextvars(trace_id=trace.trace_id)
        started = time.perf_counter()
        try:
            with self._tracer.start_as_current_span("rag-monitor process", context=parent):
                await self._processor.process(trace)
            self._metrics.traces_processed.labels(
                self._metrics.agent_label(trace.agent), "ok"
            ).inc()
        except Exception as exc:
            log.exception("processing failed; dead-lettering the trace")
            self._metrics.traces_processed.labels(
                self._metrics.agent_label(trace.agent), "error"
            ).inc()
            detail = f"{type(exc).__name__}: {exc}"
            for token in tokens:
                await self._dead_letter(
                    token,
                    "processing_error",
                    type(exc).__name__,
                    detail,
                    value=trace.model_dump_json().encode(),
                )
        finally:
            elapsed = time.perf_counter() - started
            exemplar = (
                {"trace_id": trace.trace_id}
                if len(trace.trace_id) <= MAX_EXEMPLAR_ID_CHARS
                else None
            )
            self._metrics.processing_seconds.observe(elapsed, exemplar=exemplar)
            self._finish(tokens)
            self._metrics.in_flight.dec()
            self._slots.release()

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
        for assembled in self._assembler.flush():
            await self._dispatch_assembled(assembled)
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True

    def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
