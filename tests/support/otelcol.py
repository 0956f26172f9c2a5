"""A real OpenTelemetry Collector for tests: OTLP in (gRPC and HTTP), Kafka out.

The binary is built by scripts/setup-otelcol.sh into .cache/otelcol/otelcol-ragmon (the tests'
`otel_collector` fixture skips, or fails under RAGMON_TEST_REQUIRE_SERVICES=1, without it). It
runs examples/otel-collector/config.yaml, the configuration users copy, on free loopback ports,
writing to the test broker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

REPO_ROOT = Path(__file__).resolve().parents[2]
BINARY = REPO_ROOT / ".cache" / "otelcol" / "otelcol-ragmon"
CONFIG = REPO_ROOT / "examples" / "otel-collector" / "config.yaml"
BINARY_ENV = "RAGMON_TEST_OTELCOL"

Encoding = Literal["otlp_proto", "otlp_json"]


class CollectorUnavailable(RuntimeError):
    pass


def collector_binary() -> Path:
    path = Path(os.environ.get(BINARY_ENV, BINARY))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise CollectorUnavailable(f"no Collector binary at {path}; run scripts/setup-otelcol.sh")
    return path


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class OtelCollector:
    """One Collector process; `http_endpoint` / `grpc_endpoint` are where apps send OTLP."""

    def __init__(
        self,
        workdir: Path,
        brokers: str,
        spans_topic: str,
        logs_topic: str,
        encoding: Encoding = "otlp_proto",
        batch_timeout: str = "200ms",
    ) -> None:
        self.workdir = workdir
        self.brokers = brokers
        self.spans_topic = spans_topic
        self.logs_topic = logs_topic
        self.encoding = encoding
        self.batch_timeout = batch_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log = workdir / "otelcol.log"
        self.grpc_port = self.http_port = self.metrics_port = 0

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 30.0) -> None:
        binary = collector_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.grpc_port, self.http_port, self.metrics_port = _free_ports(3)
        env = {
            **os.environ,
            "OTLP_GRPC_ENDPOINT": self.grpc_endpoint,
            "OTLP_HTTP_ENDPOINT": f"127.0.0.1:{self.http_port}",
            "KAFKA_BROKERS": self.brokers,
            "RAGMON_SPANS_TOPIC": self.spans_topic,
            "RAGMON_LOGS_TOPIC": self.logs_topic,
            "RAGMON_OTLP_ENCODING": self.encoding,
            "OTELCOL_BATCH_TIMEOUT": self.batch_timeout,
            "OTELCOL_METRICS_HOST": "127.0.0.1",
            "OTELCOL_METRICS_PORT": str(self.metrics_port),
        }
        with self._log.open("ab") as log:
            self._process = subprocess.Popen(
                [str(binary), "--config", str(CONFIG)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._process.poll() is not None:
                raise CollectorUnavailable(f"Collector exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise CollectorUnavailable(f"Collector not ready in {timeout}s: {self.log_tail()}")
            time.sleep(0.1)

    def _ready(self) -> bool:
        """Its own metrics endpoint answers and the OTLP/HTTP port accepts connections."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1
            ) as response:
                if response.status != 200:
                    return False
            with socket.create_connection(("127.0.0.1", self.http_port), timeout=1):
                return True
        except (OSError, urllib.error.URLError):
            return False

    def metric(self, name: str) -> float:
        """Sum of one of the Collector's own metrics (e.g. otelcol_exporter_sent_spans_total)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as response:
            text = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM: the Collector flushes its batches to Kafka before it exits."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
