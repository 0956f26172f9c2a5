"""A real, single-node Apache Kafka 4.x broker (KRaft mode) for tests.

The broker runs from the jars that ``scripts/setup-kafka.sh`` copies out of Maven Central into
``.cache/kafka/libs``; it listens on free loopback ports only and keeps everything it writes
(config, data, logs, TLS material) inside the work directory it is given.

Typical use::

    with KafkaBroker(tmp_path / "kafka") as broker:
        broker.create_topic("traces", partitions=3)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)

The synchronous helpers (``start``, ``create_topic``, ...) talk to the broker with aiokafka on a
private event loop in a worker thread, so they can be called from plain and async tests alike
(from async code prefer ``await asyncio.to_thread(broker.restart)`` to keep the loop responsive).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Literal, Self, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

__all__ = [
    "DEFAULT_LIBS_DIR",
    "BrokerUnavailable",
    "KafkaBroker",
    "SecurityMode",
    "find_kafka_libs",
]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
KAFKA_POM: Final = REPO_ROOT / "scripts" / "kafka-pom.xml"
DEFAULT_LIBS_DIR: Final = REPO_ROOT / ".cache" / "kafka" / "libs"
SETUP_HINT: Final = "run scripts/setup-kafka.sh"

SecurityMode = Literal["plaintext", "sasl_ssl"]

NODE_ID: Final = 1
JVM_OPTS: Final = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    # C1 only: starts ~0.5-1 s sooner and keeps C2 compiler threads off a small (2-core) machine.
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)
LOG4J2_CONFIG: Final = """\
# Written by tests/support/kafka_broker.py: everything goes to {log_file}, nothing to the console.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.append = true
appender.file.immediateFlush = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""
# Settings that make a one-node broker usable and quick in tests. ``extra_config`` may override.
BASE_CONFIG: Final[Mapping[str, str]] = {
    "process.roles": "broker,controller",
    "node.id": str(NODE_ID),
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    # One partition each: internal topics get created on first use, 50 partitions is slow.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Let tests use short consumer session timeouts (classic group protocol, as aiokafka uses).
    "group.min.session.timeout.ms": "1000",
    # After a SIGKILL the controller only accepts the broker's new incarnation once the old
    # broker session expires (default 9 s); a shorter session makes kill()+start() quicker.
    "broker.session.timeout.ms": "5000",
    "broker.heartbeat.interval.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.cleaner.threads": "1",
}

# Derived from the ports and work directory chosen here; not overridable through extra_config.
RESERVED_CONFIG: Final = frozenset(
    {
        "node.id",
        "process.roles",
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "controller.listener.names",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
    }
)

SASL_MECHANISM: Final = "SCRAM-SHA-256"
SASL_USERNAME: Final = "rag-monitor"
SASL_PASSWORD: Final = "rag-monitor-test-secret"  # loopback test broker only
KEYSTORE_PASSWORD: Final = "rag-monitor-test-keystore"
NO_JAVA: Final = "java is not on PATH (a JDK 17+ is needed for the Kafka test broker)"

_T = TypeVar("_T")


class BrokerUnavailable(RuntimeError):
    """The Kafka test broker cannot be had: no jars, no java, or it failed to start."""


def _java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def _pom_hash() -> str:
    return hashlib.sha256(KAFKA_POM.read_bytes()).hexdigest()


def find_kafka_libs() -> Path:
    """Return the directory of broker jars made by scripts/setup-kafka.sh, checking it is usable."""
    if _java_executable() is None:
        raise BrokerUnavailable(NO_JAVA)
    marker = DEFAULT_LIBS_DIR / ".complete"
    if not marker.is_file() or not any(DEFAULT_LIBS_DIR.glob("kafka_2.13-*.jar")):
        raise BrokerUnavailable(f"Kafka broker jars not found in {DEFAULT_LIBS_DIR}; {SETUP_HINT}")
    if marker.read_text().strip() != _pom_hash():
        raise BrokerUnavailable(
            f"Kafka broker jars in {DEFAULT_LIBS_DIR} do not match {KAFKA_POM.name}; {SETUP_HINT}"
        )
    return DEFAULT_LIBS_DIR


def _new_cluster_id() -> str:
    """A Kafka Uuid: url-safe base64 of 16 random bytes, unpadded, not starting with '-'."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _pick_free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together so none is handed out twice)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_accepts(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _run_async(factory: Callable[[], Awaitable[_T]], timeout: float) -> _T:
    """Run ``factory()`` to completion on a fresh event loop in a worker thread.

    A separate thread keeps this usable from code that already runs inside an event loop.
    """
    outcome: dict[str, Any] = {}

    async def bounded() -> _T:
        return await asyncio.wait_for(factory(), timeout)

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(bounded())
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="kafka-broker-admin", daemon=True)
    thread.start()
    thread.join(timeout + 10)
    if thread.is_alive():
        raise TimeoutError(f"admin call did not finish within {timeout + 10:.0f}s")
    if "error" in outcome:
        raise outcome["error"]
    value: _T = outcome["value"]
    return value


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text.splitlines()[-lines:])


_live_brokers: weakref.WeakSet[KafkaBroker] = weakref.WeakSet()


@atexit.register
def _kill_leftover_brokers() -> None:
    for broker in list(_live_brokers):
        broker.kill()


class KafkaBroker:
    """One Kafka 4.x process acting as both KRaft controller and broker, on loopback ports.

    Ports, cluster id and data directory are fixed at construction, so ``restart()`` brings the
    same broker back with its data. With ``security="sasl_ssl"`` a SASL_SSL listener (SCRAM-SHA-256
    over TLS, server certificate signed by a throwaway CA in the workdir) is added beside the
    PLAINTEXT one; ``bootstrap`` stays the PLAINTEXT listener, which the helpers here use.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        libs_dir: Path | None = None,
        security: SecurityMode = "plaintext",
        extra_config: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir: Final = Path(workdir).resolve()
        self.libs_dir: Final = libs_dir if libs_dir is not None else find_kafka_libs()
        java = _java_executable()
        if java is None:
            raise BrokerUnavailable(NO_JAVA)
        self._java: Final = java
        self.security: Final = security
        fixed = RESERVED_CONFIG.intersection(extra_config or {})
        if fixed:
            raise ValueError(f"extra_config may not set {sorted(fixed)}: the harness owns them")
        self._extra_config: Final = dict(extra_config or {})
        self.cluster_id: Final = _new_cluster_id()
        self.data_dir: Final = self.workdir / "data"
        self.config_file: Final = self.workdir / "server.properties"
        self.log4j_config_file: Final = self.workdir / "log4j2.properties"
        self.log_file: Final = self.workdir / "broker.log"
        self.stdout_file: Final = self.workdir / "broker.stdout"
        self._tls_dir: Final = self.workdir / "tls"
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdout: IO[bytes] | None = None
        self._started_once = False
        self.last_start_seconds: float | None = None
        """Wall time the most recent successful ``start()`` took (launch to broker answering)."""

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port, self.sasl_ssl_port = self._pick_ports()
        self._write_server_properties()
        self.log4j_config_file.write_text(LOG4J2_CONFIG.format(log_file=self.log_file))
        if security == "sasl_ssl":
            self._make_tls_material()

    # ----------------------------------------------------------------- addresses & credentials

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the PLAINTEXT listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """``host:port`` of the SASL_SSL listener (only with ``security="sasl_ssl"``)."""
        return f"127.0.0.1:{self._require_sasl_ssl_port()}"

    @property
    def ca_file(self) -> Path:
        """PEM file of the CA that signed the broker's TLS certificate (``sasl_ssl`` only)."""
        self._require_sasl_ssl_port()
        return self._tls_dir / "ca.pem"

    @property
    def sasl_mechanism(self) -> str:
        return SASL_MECHANISM

    @property
    def sasl_username(self) -> str:
        return SASL_USERNAME

    @property
    def sasl_password(self) -> str:
        return SASL_PASSWORD

    def sasl_ssl_client_kwargs(self) -> dict[str, Any]:
        """aiokafka client keyword arguments for the SASL_SSL listener, with valid credentials."""
        return {
            "bootstrap_servers": self.sasl_ssl_bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_context": ssl.create_default_context(cafile=str(self.ca_file)),
            "sasl_mechanism": SASL_MECHANISM,
            "sasl_plain_username": SASL_USERNAME,
            "sasl_plain_password": SASL_PASSWORD,
        }

    def _require_sasl_ssl_port(self) -> int:
        if self.sasl_ssl_port is None:
            raise RuntimeError("this broker was not created with security='sasl_ssl'")
        return self.sasl_ssl_port

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def start(self, timeout: float = 90.0) -> None:
        """Launch the broker and block until it answers metadata requests with itself in them."""
        if self.running:
            raise RuntimeError("broker is already running")
        self._forget_process()  # a previous process that died on its own
        deadline = time.monotonic() + timeout
        # Ports are chosen before launch, so another process may grab one in between. Before the
        # first successful start nothing depends on them yet: choose again and retry.
        attempts = 1 if self._started_once else 3
        for attempt in range(1, attempts + 1):
            self._format_storage_once()
            began = time.monotonic()
            self._launch()
            try:
                self._wait_ready(deadline)
            except BrokerUnavailable:
                self.kill()
                if attempt < attempts and self._lost_port_race():
                    self._reset_for_new_ports()
                    continue
                raise
            self.last_start_seconds = time.monotonic() - began
            self._started_once = True
            return

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (controlled shutdown), then SIGKILL if still alive after ``timeout`` seconds."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._forget_process()

    def kill(self) -> None:
        """SIGKILL the broker: no clean shutdown, like a crash (data on disk stays)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._forget_process()

    def restart(self, timeout: float = 90.0) -> None:
        """Stop (if running) and start again on the same ports with the same data directory."""
        self.stop()
        self.start(timeout)

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the broker's log4j log and of its stdout/stderr."""
        return (
            f"--- {self.log_file} (tail) ---\n{_tail(self.log_file, lines)}\n"
            f"--- {self.stdout_file} (tail) ---\n{_tail(self.stdout_file, 20)}"
        )

    # ------------------------------------------------------------------------------- helpers

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic and wait until every partition has a leader (ready to produce to)."""
        timeout_ms = int(timeout * 1000)
        _run_async(
            lambda: self._create_topic(name, partitions, dict(config or {}), exist_ok, timeout_ms),
            timeout,
        )

    def list_topics(self, *, timeout: float = 30.0) -> list[str]:
        return _run_async(self._list_topics, timeout)

    # -------------------------------------------------------------------------- internals

    def _admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)

    async def _create_topic(
        self,
        name: str,
        partitions: int,
        config: dict[str, str],
        exist_ok: bool,
        timeout_ms: int,
    ) -> None:
        admin = self._admin()
        await admin.start()
        try:
            response = await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=config)],
                timeout_ms=timeout_ms,
            )
            for topic, code, *message in response.topic_errors:
                if code == 0 or (exist_ok and code == 36):  # 36: TOPIC_ALREADY_EXISTS
                    continue
                error = for_code(code)
                raise error(f"creating topic {topic!r}: {message[0] if message else ''}")
            while True:
                (described,) = await admin.describe_topics([name])
                parts = described["partitions"]
                if (
                    described["error_code"] == 0
                    and len(parts) >= partitions
                    and all(p["error_code"] == 0 and p["leader"] == NODE_ID for p in parts)
                ):
                    return
                await asyncio.sleep(0.1)
        finally:
            await admin.close()

    async def _list_topics(self) -> list[str]:
        admin = self._admin()
        await admin.start()
        try:
            topics: list[str] = await admin.list_topics()
            return topics
        finally:
            await admin.close()

    async def _broker_is_ready(self) -> bool:
        """The broker is registered (unfenced) and leads every partition it has, internal or not."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5_000)
        try:
            await admin.start()
            cluster = await admin.describe_cluster()
            if not any(b["node_id"] == NODE_ID for b in cluster["brokers"]):
                return False
            topics = await admin.describe_topics()
            return all(
                t["error_code"] == 0
                and all(p["error_code"] == 0 and p["leader"] == NODE_ID for p in t["partitions"])
                for t in topics
            )
        finally:
            await admin.close()

    def _pick_ports(self) -> tuple[int, int, int | None]:
        """(PLAINTEXT, CONTROLLER, SASL_SSL or None) listener ports."""
        if self.security == "sasl_ssl":
            plain, controller, secure = _pick_free_ports(3)
            return plain, controller, secure
        plain, controller = _pick_free_ports(2)
        return plain, controller, None

    def _write_server_properties(self) -> None:
        listeners = {
            "PLAINTEXT": self.port,
            "CONTROLLER": self.controller_port,
        }
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
        if self.sasl_ssl_port is not None:
            listeners["SASL_SSL"] = self.sasl_ssl_port
            protocols["SASL_SSL"] = "SASL_SSL"
        props: dict[str, str] = dict(BASE_CONFIG)
        props |= {
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.controller_port}",
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in listeners.items()),
            "advertised.listeners": ",".join(
                f"{n}://127.0.0.1:{p}" for n, p in listeners.items() if n != "CONTROLLER"
            ),
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
            "log.dirs": str(self.data_dir),
        }
        if self.sasl_ssl_port is not None:
            props |= self._sasl_ssl_properties()
        props |= self._extra_config
        lines = [f"{key}={value}" for key, value in props.items()]
        self.config_file.write_text(
            "# Written by tests/support/kafka_broker.py\n" + "\n".join(lines) + "\n"
        )

    def _sasl_ssl_properties(self) -> dict[str, str]:
        prefix = "listener.name.sasl_ssl."
        return {
            f"{prefix}sasl.enabled.mechanisms": SASL_MECHANISM,
            f"{prefix}scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            f"{prefix}ssl.keystore.type": "PKCS12",
            f"{prefix}ssl.keystore.location": str(self._tls_dir / "server.p12"),
            f"{prefix}ssl.keystore.password": KEYSTORE_PASSWORD,
            f"{prefix}ssl.key.password": KEYSTORE_PASSWORD,
            f"{prefix}ssl.client.auth": "none",
        }

    def _make_tls_material(self) -> None:
        """A throwaway CA and a server certificate for 127.0.0.1/localhost, made with openssl."""
        openssl = shutil.which("openssl")
        if openssl is None:
            raise BrokerUnavailable("openssl is not on PATH (needed for the sasl_ssl test broker)")
        tls = self._tls_dir
        tls.mkdir(parents=True, exist_ok=True)
        (tls / "server.ext").write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
        )
        commands: list[list[str]] = [
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "3650",
             "-subj", "/CN=rag-monitor test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
            [openssl, "x509", "-req", "-sha256", "-in", "server.csr", "-CA", "ca.pem",
             "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "3650",
             "-extfile", "server.ext"],
            [openssl, "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key",
             "-certfile", "ca.pem", "-name", "kafka", "-out", "server.p12",
             "-passout", f"pass:{KEYSTORE_PASSWORD}"],
        ]  # fmt: skip
        for command in commands:
            result = subprocess.run(command, cwd=tls, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise BrokerUnavailable(
                    f"making TLS material failed: {' '.join(command[:2])}: {result.stderr.strip()}"
                )

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        return [
            self._java,
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.log4j_config_file}",
            "-cp",
            str(self.libs_dir / "*"),
            main_class,
            *args,
        ]

    def _format_storage_once(self) -> None:
        if (self.data_dir / "meta.properties").is_file():
            return
        args = ["format", "-t", self.cluster_id, "-c", str(self.config_file), "--ignore-formatted"]
        if self.security == "sasl_ssl":
            scram_user = f"{SASL_MECHANISM}=[name={SASL_USERNAME},password={SASL_PASSWORD}]"
            args += ["--add-scram", scram_user]
        try:
            result = subprocess.run(
                self._java_command("kafka.tools.StorageTool", *args),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerUnavailable("formatting Kafka storage timed out") from exc
        if result.returncode != 0:
            raise BrokerUnavailable(
                f"formatting Kafka storage failed (exit {result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}\n{_tail(self.log_file, 10)}"
            )

    def _launch(self) -> None:
        self._stdout = self.stdout_file.open("ab")
        self._proc = subprocess.Popen(
            self._java_command("kafka.Kafka", str(self.config_file)),
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=subprocess.STDOUT,
        )
        _live_brokers.add(self)

    def _wait_ready(self, deadline: float) -> None:
        proc = self._proc
        assert proc is not None
        while True:
            code = proc.poll()
            if code is not None:
                raise BrokerUnavailable(
                    f"Kafka broker exited with code {code} during startup\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerUnavailable(
                    f"Kafka broker did not become ready in time on {self.bootstrap}\n"
                    f"{self.log_tail()}"
                )
            if _port_accepts(self.port) and self._answers_metadata(min(5.0, remaining)):
                return
            time.sleep(0.2)

    def _answers_metadata(self, timeout: float) -> bool:
        try:
            return _run_async(self._broker_is_ready, timeout)
        except Exception:
            return False

    def _lost_port_race(self) -> bool:
        log = _tail(self.log_file, 200) + _tail(self.stdout_file, 50)
        return "Address already in use" in log

    def _reset_for_new_ports(self) -> None:
        """Throw away the never-successfully-started data dir and pick new ports."""
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.port, self.controller_port, self.sasl_ssl_port = self._pick_ports()
        self._write_server_properties()

    def _forget_process(self) -> None:
        self._proc = None
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None
        _live_brokers.discard(self)
