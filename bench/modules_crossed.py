"""Which `monitor/` modules one message crosses on its way through a running daemon.

A daemon (the default scoring stage: tier 0, conversations, a SQLite store, the results topic)
reads from a real broker. After warm-up traces (so imports, caches and connections are done),
one more message is produced with a profiler on (`sys.setprofile`: every Python function
called or resumed on the event loop's thread) until the trace it carries is processed; the
modules under `monitor/` whose functions ran are that message's path. Done three times, the
modules found every time are kept (what the loop does on its own timers, such as the progress
watch, drops out unless it runs for every message). Once for a native JSON message, once for an
OTLP protobuf export of one trace (split and re-keyed through the spans topic, assembled,
mapped, produced to the traces topic, then scored).

    python bench/modules_crossed.py                 # starts the test broker
    python bench/modules_crossed.py --bootstrap HOST:PORT --list
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.config import Settings  # noqa: E402
from monitor.daemon import Daemon, SourceSpec  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402
from tests.support.kafka_io import create_topics  # noqa: E402
from tests.support.otlp_spans import App, encode  # noqa: E402
from tests.support.otlp_turns import MS, langchain_turn  # noqa: E402
from tests.support.traces import daemon_settings, native_trace  # noqa: E402

PACKAGE = str(ROOT / "monitor") + "/"
WARM_UP = 20
WINDOWS = 3


class Recorder:
    """The monitor modules whose functions run while it is on."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self._names: dict[str, str | None] = {}

    def _profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        filename = frame.f_code.co_filename
        name = self._names.get(filename, "")
        if name == "":
            name = self._names[filename] = _module_name(filename)
        if name is not None:
            self.modules.add(name)

    def start(self) -> None:
        self.modules = set()
        sys.setprofile(self._profile)

    def stop(self) -> set[str]:
        sys.setprofile(None)
        return self.modules


def _module_name(filename: str) -> str | None:
    if not filename.startswith(PACKAGE):
        return None
    relative = filename[len(ROOT.as_posix()) + 1 : -len(".py")]
    return relative.replace("/", ".").removesuffix(".__init__")


def processed(daemon: Daemon) -> int:
    """Traces processed, whatever their agent or outcome."""
    return int(
        sum(
            sample.value
            for family in daemon.metrics.registry.collect()
            if family.name == "ragmon_traces_processed"
            for sample in family.samples
            if sample.name == "ragmon_traces_processed_total"
        )
    )


async def _until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for the daemon")
        await asyncio.sleep(0.002)


async def crossed(
    settings: Settings, send: Callable[[int], Awaitable[None]], recorder: Recorder
) -> tuple[list[set[str]], set[str], float]:
    """Per window, the modules one message crossed; then those an idle window as long as the
    longest of them crossed, and its length."""
    daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
    task = asyncio.create_task(daemon.run())
    try:
        await asyncio.wait_for(daemon.started.wait(), 60)
        for n in range(WARM_UP):
            await send(n)
        await _until(lambda: processed(daemon) >= WARM_UP)
        windows = []
        longest = 0.0
        for n in range(WARM_UP, WARM_UP + WINDOWS):
            await asyncio.sleep(0.5)  # the warm-up's commits and writes are done
            began = time.perf_counter()
            recorder.start()
            try:
                await send(n)
                await _until(lambda n=n: processed(daemon) >= n + 1)  # type: ignore[misc]
            finally:
                windows.append(recorder.stop())
            longest = max(longest, time.perf_counter() - began)
        await asyncio.sleep(0.5)
        recorder.start()
        await asyncio.sleep(longest)
        return windows, recorder.stop(), longest
    finally:
        daemon.request_stop()
        await task


async def main_async(bootstrap: str, show: bool) -> None:
    recorder = Recorder()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await _measure(bootstrap, producer, recorder, show)
    finally:
        await producer.stop()


async def _measure(
    bootstrap: str, producer: AIOKafkaProducer, recorder: Recorder, show: bool
) -> None:
    tag = uuid.uuid4().hex[:8]
    native_topic, otlp_topic = f"crossed-{tag}", f"crossed-{tag}-otlp"
    dlq, results = f"crossed-{tag}.dlq", f"crossed-{tag}.results"
    await create_topics(bootstrap, [native_topic, otlp_topic, dlq, results])
    app = App()
    start = time.time_ns()

    async def native(n: int) -> None:
        trace = native_trace(n, conversation_id=f"conv-{n // 3}")
        await producer.send_and_wait(native_topic, json.dumps(trace).encode())

    async def otlp(n: int) -> None:
        turn = langchain_turn(app, n, session=f"conv-{n // 3}", start_ns=start + n * MS)
        await producer.send_and_wait(otlp_topic, encode(turn.spans, "otlp_proto"))

    with tempfile.TemporaryDirectory() as workdir:
        for name, topics, kwargs, send in (
            ("a native JSON message", [native_topic], {}, native),
            (
                "an OTLP protobuf export (one trace, 4 spans)",
                [],
                {"otlp_topics": [otlp_topic], "otlp_assembly_settle_seconds": 0.0},
                otlp,
            ),
        ):
            settings = daemon_settings(
                bootstrap, topics, f"crossed-{uuid.uuid4().hex[:6]}", dlq, **kwargs
            ).model_copy(deep=True)
            settings.store.url = SecretStr(
                f"sqlite+aiosqlite:///{Path(workdir) / (uuid.uuid4().hex + '.db')}"
            )
            settings.results.topic = results
            windows, idle, longest = await crossed(settings, send, recorder)
            always = set.intersection(*windows)
            union = set.union(*windows)
            print(
                f"{name}: {len(always)} monitor modules every time "
                f"({', '.join(str(len(w)) for w in windows)} in the {WINDOWS} windows; "
                f"{len(union)} in any); {len(idle)} in an idle window of {longest:.2f} s"
                f" ({', '.join(sorted(idle))})"
            )
            packages: dict[str, int] = {}
            for module in always:
                package = ".".join(module.split(".")[:2]) if module.count(".") > 1 else module
                packages[package] = packages.get(package, 0) + 1
            print("  by package: " + ", ".join(f"{p} {n}" for p, n in sorted(packages.items())))
            if show:
                for module in sorted(always):
                    print(f"    {module}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    parser.add_argument("--list", action="store_true", help="print every module crossed")
    args = parser.parse_args()
    configure_logging("console", "warning")
    if args.bootstrap:
        asyncio.run(main_async(args.bootstrap, args.list))
        return
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        asyncio.run(main_async(broker.bootstrap, args.list))


if __name__ == "__main__":
    main()
