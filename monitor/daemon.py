"""Wires the stages together and owns the lifecycle: start, consume, graceful shutdown.

This is the only module that connects source, decoding, processing and export.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Literal

import structlog
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.export.http import HttpServer, Probes, build_app
from monitor.export.metrics import Metrics
from monitor.source.deadletter import DeadLetterSink, KafkaDeadLetters, StreamDeadLetters
from monitor.source.file import read_lines
from monitor.source.ingest import Ingest
from monitor.source.kafka import KafkaSource
from monitor.source.offsets import OffsetTracker
from monitor.stage import RecordingProcessor, TraceProcessor
from monitor.telemetry import build_tracer

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SourceSpec:
    """Where traces come from: the Kafka topics of the config, or a file (`-` for stdin)."""

    kind: Literal["kafka", "file"]
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> SourceSpec:
        if text == "kafka":
            return cls("kafka")
        if text.startswith("file:") and len(text) > len("file:"):
            return cls("file", text[len("file:") :])
        raise ValueError(f"--source must be 'kafka' or 'file:PATH' (or 'file:-'), not {text!r}")


class Daemon:
    """One monitor process. `run()` returns the exit code once the source ends or stop is asked."""

    def __init__(
        self,
        settings: Settings,
        source: SourceSpec,
        processor: TraceProcessor | None = None,
        registry: CollectorRegistry | None = None,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.settings = settings
        self.source_spec = source
        self.processor: TraceProcessor = processor or RecordingProcessor()
        self.metrics = Metrics(registry, max_agents=settings.metrics.max_agents)
        self.tracker = OffsetTracker()
        self._dead_letters_override = dead_letters
        self._stop = asyncio.Event()
        self._heartbeat = time.monotonic()
        self._kafka: KafkaSource | None = None
        self._file_running = False
        self.http: HttpServer | None = None
        self.started = asyncio.Event()

    def request_stop(self) -> None:
        if not self._stop.is_set():
            log.info("stop requested; finishing in-flight work")
        self._stop.set()

    def _healthy(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self._heartbeat
        if stalled > self.settings.http.health_stall_seconds:
            return False, f"consume loop stalled for {stalled:.0f}s"
        return True, "ok"

    def _ready(self) -> tuple[bool, str]:
        if self._stop.is_set():
            return False, "shutting down"
        if self._file_running:
            return True, "file source running"
        if self._kafka is None:
            return False, "not started"
        assigned = self._kafka.assignment
        if not assigned:
            return False, "no partitions assigned"
        return True, f"{len(assigned)} partitions assigned"

    async def run(self) -> int:
        tracer, provider = build_tracer(self.settings.telemetry)
        async with AsyncExitStack() as stack:
            if provider is not None:
                stack.callback(provider.shutdown)
            self.http = HttpServer(
                build_app(self.metrics.registry, Probes(self._healthy, self._ready)),
                self.settings.http.host,
                self.settings.http.port,
            )
            await self.http.start()
            stack.push_async_callback(self.http.stop)
            log.info("http server listening", host=self.settings.http.host, port=self.http.port)
            if self.source_spec.kind == "file":
                dead_letters = self._dead_letters_override or StreamDeadLetters()
                ingest = self._ingest(dead_letters, tracer)
                return await self._run_file(ingest)
            kafka = KafkaSource(self.settings.kafka, self.tracker, self.metrics)
            if self._dead_letters_override is not None:
                dead_letters = self._dead_letters_override
            else:
                producer = KafkaDeadLetters(self.settings.kafka.dlq_topic, kafka.producer_kwargs())
                await producer.start()
                stack.push_async_callback(producer.stop)
                dead_letters = producer
            ingest = self._ingest(dead_letters, tracer)
            await kafka.start()
            self._kafka = kafka
            try:
                return await self._run_kafka(kafka, ingest)
            finally:
                self._kafka = None
                await kafka.stop()
                self.metrics.ready.set(0)
                log.info("left the consumer group")

    def _ingest(self, dead_letters: DeadLetterSink, tracer: Tracer | None) -> Ingest:
        kafka = self.settings.kafka
        return Ingest(
            input_format=kafka.format,
            max_message_bytes=kafka.max_message_bytes,
            processor=self.processor,
            dead_letters=dead_letters,
            tracker=self.tracker,
            metrics=self.metrics,
            tracer=tracer,
            max_in_flight=kafka.max_in_flight,
            assembly_window_seconds=kafka.otlp_assembly_window_seconds,
            max_pending_traces=kafka.otlp_max_pending_traces,
        )

    async def _run_kafka(self, kafka: KafkaSource, ingest: Ingest) -> int:
        self.started.set()
        log.info("consuming", topics=self.settings.kafka.topics, group=self.settings.kafka.group_id)
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            self.metrics.ready.set(1 if self._ready()[0] else 0)
            messages = await kafka.fetch(timeout_ms=500)
            if messages and not self._stop.is_set():
                await ingest.handle_batch(messages)
            await ingest.tick()
            await kafka.commit_if_due()
        deadline = time.monotonic() + self.settings.shutdown.deadline_seconds
        finished = await ingest.drain(deadline)
        if not finished:
            log.warning(
                "shutdown deadline passed; unfinished traces will be re-read",
                unfinished=ingest.in_flight,
            )
            ingest.cancel_all()
        await kafka.commit()
        return 0

    async def _run_file(self, ingest: Ingest) -> int:
        assert self.source_spec.path is not None
        self._file_running = True
        self.started.set()
        self.metrics.ready.set(1)
        try:
            async for batch in read_lines(self.source_spec.path):
                self._heartbeat = time.monotonic()
                if self._stop.is_set():
                    break
                await ingest.handle_batch(batch)
                await ingest.tick()
            await ingest.drain(
                float("inf")
                if not self._stop.is_set()
                else time.monotonic() + self.settings.shutdown.deadline_seconds
            )
        finally:
            self._file_running = False
            self.metrics.ready.set(0)
        return 0
