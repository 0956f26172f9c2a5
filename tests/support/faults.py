"""Shared helpers of the fault, fuzz and security tests (this module holds no tests).

- `DaemonProcess`: the real `rag-monitor run` as a subprocess (``python -m monitor.cli run``
  configured by RAGMON_* variables), its stderr captured to files, /metrics scraped and parsed,
  resident memory read from /proc, SIGKILL and SIGTERM.
- `SteadyProducer`: native traces produced from a thread at a settable rate (and bursts), riding
  out broker outages, remembering what the broker acknowledged.
- Reading what the daemon left: the SQLite store's (trace_id, evaluator) rows, a topic's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support.kafka_io import read_all

REPO = Path(__file__).resolve().parents[1]

Samples = dict[str, list[tuple[dict[str, str], float]]]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def env_int(name: str, default: int) -> int:
    """A test size from the environment (the report runs use larger ones)."""
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def parse_metrics(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def metric_value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when there are none)."""
    return sum(
        value
        for sample_labels, value in samples.get(name, [])
        if all(sample_labels.get(k) == v for k, v in labels.items())
    )


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def kafka_env(
    bootstrap: str, topic: str, group: str, dlq: str, *, commit_interval: str = "0.5"
) -> dict[str, str]:
    """The RAGMON_KAFKA__* variables of a daemon reading `topic` (offsets committed often, so
    what a fault test counts is committed soon)."""
    return {
        "RAGMON_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "RAGMON_KAFKA__TOPICS": json.dumps([topic]),
        "RAGMON_KAFKA__GROUP_ID": group,
        "RAGMON_KAFKA__DLQ_TOPIC": dlq,
        "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": commit_interval,
    }


class DaemonProcess:
    """`rag-monitor run` as a subprocess; one object can be started again after a kill."""

    def __init__(
        self,
        env: Mapping[str, str],
        logdir: Path,
        *,
        name: str = "daemon",
        command: Iterable[str] | None = None,
        stdin_pipe: bool = False,
    ) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
        base.update(
            {
                "RAGMON_LOG__FORMAT": "json",
                "RAGMON_HTTP__HOST": "127.0.0.1",
                "RAGMON_HTTP__PORT": str(free_port()),
                "RAGMON_SHUTDOWN__DEADLINE_SECONDS": "10",
            }
        )
        base.update(env)
        self.env = base
        self.port = int(base["RAGMON_HTTP__PORT"])
        self.host = base["RAGMON_HTTP__HOST"]
        self.logdir = logdir
        self.name = name
        self.command = list(command or [sys.executable, "-m", "monitor.cli", "run"])
        self.stdin_pipe = stdin_pipe  # file:- source: keep stdin open so the daemon keeps running
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_files: list[Path] = []
        self.starts = 0

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> DaemonProcess:
        assert not self.alive, "already running"
        self.starts += 1
        err = self.logdir / f"{self.name}-{self.starts}.stderr"
        self.stderr_files.append(err)
        with err.open("wb") as stderr, (self.logdir / f"{self.name}.stdout").open("ab") as stdout:
            self.proc = subprocess.Popen(
                self.command,
                cwd=REPO,
                env=self.env,
                stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL: no draining, no final commit, no clean leave of the group."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit within {timeout}s of SIGTERM") from None

    def ensure_stopped(self) -> None:
        if self.alive:
            self.kill()

    # ------------------------------------------------------------------------------ observing

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        return http_get(self.url(path), timeout)

    def status(self, path: str) -> int | None:
        """HTTP status of a probe, or None when nothing answers."""
        try:
            return self.get(path, timeout=3)[0]
        except OSError:
            return None

    def ready(self) -> bool:
        return self.status("/readyz") == 200

    def wait_ready(self, timeout: float = 60.0) -> None:
        def check() -> bool:
            if not self.alive:
                raise AssertionError(
                    f"{self.name} exited ({self.returncode}):\n{self.stderr_tail()}"
                )
            return self.ready()

        wait_until(check, timeout, f"{self.name} /readyz")

    def metrics(self) -> Samples:
        status, body = self.get("/metrics")
        assert status == 200, body
        return parse_metrics(body)

    def value(self, name: str, **labels: str) -> float:
        return metric_value(self.metrics(), name, **labels)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stderr_bytes(self) -> bytes:
        return b"".join(p.read_bytes() for p in self.stderr_files if p.exists())

    def stderr_tail(self, lines: int = 40) -> str:
        text = self.stderr_bytes().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.stderr_bytes().decode("utf-8", "replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        return events


# --------------------------------------------------------------------------------- producing


class SteadyProducer:
    """Produces traces at `rate` per second from a thread; keeps going through broker outages.

    `make(n)` builds the n-th message as (key, value, trace_id). A send that fails is retried
    (so the input may hold duplicates, which the daemon must tolerate); `acked` holds the trace
    ids the broker acknowledged.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        make: Callable[[int], tuple[bytes | None, bytes, str]],
        rate: float,
        *,
        first: int = 0,
        limit: int | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.make = make
        self.rate = rate
        self.next = first
        self.limit = limit
        self.acked: set[str] = set()
        self.acked_count = 0
        self.failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="steady-producer", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self.rate = rate

    @property
    def produced(self) -> int:
        return self.next

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self.error = exc

    async def _run(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=5, request_timeout_ms=10_000
        )
        while True:  # the broker may be down when we start
            try:
                await producer.start()
                break
            except KafkaError:
                await asyncio.sleep(0.5)
        try:
            budget = 0.0
            last = time.monotonic()
            pending: list[tuple[bytes | None, bytes, str]] = []
            while not self._stop.is_set():
                now = time.monotonic()
                with self._lock:
                    budget += (now - last) * self.rate
                last = now
                due = int(budget)
                budget -= int(budget)
                for _ in range(due):
                    if self.limit is not None and self.next >= self.limit:
                        break
                    pending.append(self.make(self.next))
                    self.next += 1
                if pending:
                    pending = await self._send(producer, pending)
                await asyncio.sleep(0.02)
            while pending:
                pending = await self._send(producer, pending)
        finally:
            await producer.stop()

    async def _send(
        self, producer: AIOKafkaProducer, batch: list[tuple[bytes | None, bytes, str]]
    ) -> list[tuple[bytes | None, bytes, str]]:
        """Send and await a batch; returns what failed (to be sent again)."""
        futures = []
        failed = []
        for item in batch:
            key, value, _ = item
            try:
                futures.append((item, await producer.send(self.topic, value=value, key=key)))
            except KafkaError:
                failed.append(item)
        for item, future in futures:
            try:
                await future
            except KafkaError:
                failed.append(item)
                continue
            self.acked.add(item[2])
            self.acked_count += 1
        if failed:
            self.failures += len(failed)
            await asyncio.sleep(0.5)
        return failed


def native_message(trace: dict[str, Any]) -> tuple[bytes | None, bytes, str]:
    key = (trace.get("conversation_id") or trace["trace_id"]).encode()
    return key, json.dumps(trace).encode(), trace["trace_id"]


# ---------------------------------------------------------------------------------- reading


def stored_rows(database: Path) -> list[tuple[str, str]]:
    """(trace_id, evaluator) of every stored result."""
    with sqlite3.connect(database) as db:
        return [
            (r[0], r[1]) for r in db.execute("SELECT trace_id, evaluator FROM evaluation_results")
        ]


def stored_by_evaluator(database: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for trace_id, evaluator in stored_rows(database):
        out.setdefault(evaluator, set()).add(trace_id)
    return out


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> end offset (partitions from the admin client: always fresh metadata)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    assert described["error_code"] == 0, f"topic {topic}: error {described['error_code']}"
    tps = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
    finally:
        # aiokafka 0.14 may re-raise the CancelledError of a helper task it cancels on stop
        # when that task never got to run; nothing here is being cancelled.
        with contextlib.suppress(asyncio.CancelledError):
            await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


def topic_records(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Any]:
    """Every record of a topic (its end offsets say how many to wait for)."""

    async def read() -> list[Any]:
        total = sum((await end_offsets(bootstrap, topic)).values())
        if total == 0:
            return []
        records = await read_all(bootstrap, topic, expected=total, timeout=timeout)
        assert len(records) >= total, f"read {len(records)} of {total} records of {topic}"
        return records

    return asyncio.run(read())


def results_on_topic(bootstrap: str, topic: str) -> Counter[tuple[str, str]]:
    """How many results the results topic holds per (trace_id, evaluator)."""
    counts: Counter[tuple[str, str]] = Counter()
    for record in topic_records(bootstrap, topic):
        result = json.loads(record.value)
        counts[(result["trace_id"], result["evaluator"])] += 1
    return counts


def committed_total(bootstrap: str, group: str) -> int:
    from tests.support.kafka_io import committed_offsets

    return sum(asyncio.run(committed_offsets(bootstrap, group)).values())


def end_total(bootstrap: str, topic: str) -> int:
    return sum(asyncio.run(end_offsets(bootstrap, topic)).values())


def wait_committed(bootstrap: str, group: str, topic: str, timeout: float, what: str) -> None:
    """Wait until `group` has committed as many offsets of `topic` as it holds."""
    wait_until(
        lambda: committed_total(bootstrap, group) >= end_total(bootstrap, topic),
        timeout,
        what,
        interval=1.0,
    )


def committed_to_end(bootstrap: str, group: str, topic: str) -> bool:
    """The group has committed every partition of `topic` up to its end."""
    from tests.support.kafka_io import committed_offsets

    ends = asyncio.run(end_offsets(bootstrap, topic))
    committed = asyncio.run(committed_offsets(bootstrap, group))
    return all(committed.get((topic, p), 0) >= end for p, end in ends.items())


def pipeline_drained(
    bootstrap: str, group: str, inputs: Iterable[str] = (), otlp_inputs: Iterable[str] = ()
) -> bool:
    """Everything read went all the way through: the input topics (native ones by `group`, OTLP
    ones by the OTLP stage's group), then the spans topic, then the assembled-traces topic are
    committed to their ends (checked in that order, so what one stage wrote before its commit
    is covered by the next check). Topic and group names are the defaults derived from `group`."""
    otlp_group = f"{group}.otlp"
    stages = [(group, topic) for topic in inputs] + [(otlp_group, t) for t in otlp_inputs]
    stages += [(otlp_group, f"{group}.otlp-spans"), (group, f"{group}.otlp-traces")]
    return all(committed_to_end(bootstrap, g, t) for g, t in stages)
