"""The score stage: native traces in, processed traces out (scored, numbered, stored).

A trace comes decoded from a native topic or the traces topic (assembled by the OTLP stage), or
in process from the assemble stage (the file source). Every message is finished only when all
the traces it carried are processed, deliberately skipped or dead-lettered, so committed offsets
never pass unfinished work. Only a fault of the trace itself dead-letters it (`monitor.faults`):
a store or broker that is away holds the trace (the sinks retry; here it is processed again
until it goes through), and a trace whose partition was revoked is left for the next owner,
which reads it again. A fetched batch is decoded at once and handed to one task per piece of at
most `max_in_flight` traces; at most that many are unfinished at a time, beyond which reading
waits (the cheap stages keep up; the costly judge sheds load on its own).

Traces of one conversation are processed one at a time, in the order of their start (within a
batch; across batches in the order read), while different conversations run concurrently. A
processor that prepares for batches (`typing.BatchPreparing`: the conversations of the batch
read from the store together) is handed the batch before its traces. Each
trace is processed under the claim of the partitions it was read from (`faults.owned_while`),
which the sinks check before they write and the conversation stage keeps its state by; a
revocation forgets the state of the revoked partitions only. Each is processed knowing when it
was read (`stages.read_time`), however long it waited.

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import structlog
from aiokafka.structs import TopicPartition
from opentelemetry import trace as otel_trace
from opentelemetry.context import Context

from monitor.faults import DataFault, ServiceFault, owned_while
from monitor.formats.errors import DecodeError
from monitor.logs import CountedWarning
from monitor.messages import RawMessage, Routed
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sinks.produce import ProduceRejected
from monitor.sources.offsets import OffsetTracker
from monitor.stages import offloaded
from monitor.stages.conversation_state import turn_order_key
from monitor.stages.ports import Assembled
from monitor.stages.read_time import read_at
from monitor.stages.reject import Rejecter
from monitor.telemetry import context_from_headers
from monitor.typing import BatchPreparing, TraceProcessor

log = structlog.get_logger(__name__)

MAX_EXEMPLAR_ID_CHARS = 64
BATCH_WORKERS = 32  # OpenMetrics caps exemplar labels at 128 characters in all
SERVICE_RETRY_SECONDS = 1.0  # before processing again a trace a service fault held


@dataclass(frozen=True, slots=True)
class _Work:
    trace: Trace
    tokens: tuple[RawMessage, ...]
    read_at: float  # time.monotonic() when it was decoded (monitor.stages.read_time)
    parent: Context | None = None
    # the generation of each of the tokens' partitions when they were read (`owned`)
    generations: tuple[tuple[TopicPartition, int], ...] = ()


class ScoreStage:
    name = "score"

    def __init__(
        self,
        *,
        processor: TraceProcessor,
        rejecter: Rejecter,
        tracker: OffsetTracker,
        metrics: Metrics,
        tracer: otel_trace.Tracer | None,
        max_in_flight: int,
        on_fatal: Callable[[ProduceRejected], None] | None = None,
        forget: Callable[[set[TopicPartition]], object] | None = None,
    ) -> None:
        """`on_fatal` hears of a write the cluster refuses for good (the trace then stays
        unfinished, its offset uncommitted); `forget` drops the processor's state of revoked
        partitions (the conversations read from them)."""
        self._processor = processor
        self._rejecter = rejecter
        self._tracker = tracker
        self._metrics = metrics
        self._tracer = tracer  # None: tracing is off and costs nothing per message
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._capacity = asyncio.Event()
        self._waiting = 0  # the size of the batch waiting for room, if any
        self._tasks: set[asyncio.Task[None]] = set()
        # The last batch's work per conversation, which the next batch's work of it waits for.
        self._tails: dict[str, asyncio.Future[None]] = {}
        self._decoded_native = metrics.traces_decoded.labels("native")
        self._on_fatal = on_fatal
        self._forget = forget
        self._draining = False
        self._data_faults: dict[str, CountedWarning] = {}

    @property
    def in_flight(self) -> int:
        """Traces dispatched but not finished."""
        return self._in_flight

    async def handle_batch(self, batch: Sequence[Routed]) -> None:
        """Decode the batch's traces; returns once they are dispatched (not necessarily
        processed). The good traces are dispatched before the bad messages are dead-lettered,
        so a dead-letter topic that does not answer holds up only the bad ones (and the
        commits). Traces of the traces topic were counted as decoded by the OTLP stage."""
        work: list[_Work] = []
        bad: list[tuple[RawMessage, DecodeError]] = []
        decoded = 0
        for routed in batch:
            msg = routed.message
            parent = self._decode_span(msg)
            trace = await offloaded.decoded(msg, assembled=routed.internal)
            if isinstance(trace, DecodeError):
                bad.append((msg, trace))
                continue
            work.append(self._work(trace, (msg,), parent))
            decoded += not routed.internal
        if work:
            self._decoded_native.inc(decoded)
            await self._dispatch(work)
        for msg, error in bad:
            await self._rejecter.reject(msg, error)

    def _decode_span(self, msg: RawMessage) -> Context | None:
        """The parent context of the trace's processing span, when tracing is on."""
        if self._tracer is None:
            return None
        with self._tracer.start_as_current_span(
            "rag-monitor decode", context=context_from_headers(msg.headers)
        ) as span:
            span.set_attribute("messaging.kafka.offset", msg.offset)
            return otel_trace.set_span_in_context(span)

    async def take_assembled(self, items: Sequence[Assembled]) -> None:
        """Traces the assemble stage released in process: each finishes its parts' messages."""
        await self._dispatch(
            [
                self._work(trace, tuple(t.message for t in release.tokens))
                for trace, release in items
            ]
        )

    async def take_natives(self, items: Sequence[tuple[RawMessage, Trace]]) -> None:
        """Native traces the re-key stage decoded in process."""
        await self._dispatch([self._work(trace, (msg,)) for msg, trace in items])

    def _work(
        self, trace: Trace, tokens: tuple[RawMessage, ...], parent: Context | None = None
    ) -> _Work:
        generations = tuple((t.tp, self._tracker.generation(t.tp)) for t in tokens)
        return _Work(trace, tokens, time.monotonic(), parent, generations)

    def _owned(self, item: _Work) -> bool:
        """The trace's partitions are still ours (not revoked since it was read)."""
        return all(self._tracker.generation(tp) == g for tp, g in item.generations)

    async def tick(self) -> None:
        return None

    def on_revoked(self, partitions: set[TopicPartition]) -> None:
        if self._forget is not None:
            self._forget(partitions)

    def on_assigned(self, assignment: set[TopicPartition]) -> None:
        return None

    @property
    def waiting_for_capacity(self) -> bool:
        """Reading is paused because `max_in_flight` traces are unfinished (backpressure)."""
        return self._waiting > 0

    def _fits(self, count: int) -> bool:
        """`count` more traces fit under `max_in_flight`."""
        return self._in_flight + count <= self._max_in_flight

    async def _dispatch(self, work: list[_Work]) -> None:
        """Start the batch's work in pieces of at most `max_in_flight` traces, each once it fits
        (a fetch or a release can hold more than the bound). A conversation's traces are kept
        in turn order across the pieces, and a later piece's work of it waits for the earlier's."""
        bound = self._max_in_flight
        if len(work) > bound:
            work = [item for items in _by_conversation(work).values() for item in items]
        for start in range(0, len(work), bound):
            piece = work[start : start + bound]
            while not self._fits(len(piece)):
                self._capacity.clear()
                self._waiting = len(piece)
                try:
                    await self._capacity.wait()
                finally:
                    self._waiting = 0
            self._in_flight += len(piece)
            self._metrics.in_flight.set(self._in_flight)
            task = asyncio.create_task(self._process_batch(piece))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _process_batch(self, work: list[_Work]) -> None:
        # Concurrent across conversations (the sinks are I/O-bound), through a few workers
        # rather than a task per trace: task creation would cost more than the decoding. One
        # conversation's traces run in one worker, in start order, after the conversation's
        # traces of earlier batches.
        loop = asyncio.get_running_loop()
        chained: list[tuple[str, list[_Work], asyncio.Future[None] | None, asyncio.Future[None]]]
        chained = []
        for key, items in _by_conversation(work).items():
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
        try:
            async with self._prepared(work):
                if workers == 1:
                    await worker()
                else:
                    await asyncio.gather(*(worker() for _ in range(workers)))
        finally:  # cancelled (shutdown) before a worker took them: later batches need not wait
            for key, _, _, done in chained:
                if not done.done():
                    done.set_result(None)
                    if self._tails.get(key) is done:
                        del self._tails[key]

    @asynccontextmanager
    async def _prepared(self, work: list[_Work]) -> AsyncIterator[None]:
        """The processor prepared for the batch (its conversations read together), when it
        prepares for batches; the traces already abandoned are left out."""
        if not isinstance(self._processor, BatchPreparing):
            yield
            return
        traces = [
            (item.trace, [tp for tp, _ in item.generations]) for item in work if self._owned(item)
        ]
        async with self._processor.batch(traces):
            yield

    async def _process_and_release(self, item: _Work) -> None:
        try:
            await self._process(item)
        finally:
            self._release(1)

    def _release(self, count: int) -> None:
        self._in_flight -= count
        self._metrics.in_flight.set(self._in_flight)
        if self._waiting and self._fits(self._waiting):  # not a wake-up per finished trace
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
            partitions = tuple(tp for tp, _ in item.generations)
            with owned_while(lambda: self._owned(item), partitions), read_at(item.read_at):
                await self._process_held(item)
            self._metrics.processed(agent, "ok").inc()
        except ProduceRejected as exc:
            if self._on_fatal is None:
                raise
            self._on_fatal(exc)
            finished = False
        except ServiceFault as exc:
            finished = False  # its offset stays uncommitted: read again, here or elsewhere
            log.info("trace left unfinished; it will be read again", reason=str(exc))
        except DataFault as exc:
            self._metrics.processed(agent, "error").inc()
            warning = self._data_faults.get(exc.reason)
            if warning is None:
                warning = self._data_faults[exc.reason] = CountedWarning(
                    log, "trace dead-lettered by a fault of its own"
                )
            warning.count(exc.reason, reason=exc.reason, error=str(exc))
            await self._rejecter.reject_trace(item.trace, item.tokens, exc.reason, exc)
        except Exception as exc:
            log.exception("processing failed; dead-lettering the trace")
            self._metrics.processed(agent, "error").inc()
            await self._rejecter.reject_trace(item.trace, item.tokens, "processing_error", exc)
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

    def _finish(self, tokens: Sequence[RawMessage]) -> None:
        for token in tokens:
            self._tracker.finish(token.tp, token.offset)

    async def drain(self, deadline: float) -> bool:
        """Wait for in-flight work until `deadline` (monotonic); what still runs then is
        cancelled, its offsets left uncommitted to be read again, and False returned."""
        self._draining = True  # a trace a service fault holds is left for the next start
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning(
                    "shutdown deadline passed; unfinished traces will be re-read",
                    unfinished=self._in_flight,
                )
                for task in self._tasks:
                    task.cancel()
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True


def _by_conversation(work: list[_Work]) -> dict[str, list[_Work]]:
    """The work per conversation (in order of each one's first trace), each in turn order."""
    groups: dict[str, list[_Work]] = {}
    for item in work:
        groups.setdefault(item.trace.partition_key, []).append(item)
    for items in groups.values():
        if len(items) > 1:
            items.sort(key=lambda w: turn_order_key(w.trace))
    return groups
