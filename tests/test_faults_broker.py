"""Broker outages under load: killed and restarted, stopped and started, connection stalled and cut.

The daemon runs as a real process, traces flow in at a steady rate all along (the producer rides
out the outages), and afterwards every trace the broker acknowledged has its result in the store
and on the results topic, nothing was dead-lettered, and the daemon never exited. /healthz must
stay 200 throughout (it deliberately does not check Kafka) and /readyz must report the outage.

Stalling and cutting need a TCP proxy between the daemon and the broker. Kafka clients connect
to the addresses the broker advertises, so the proxy only sits in the path when the broker
advertises it: `ProxiedBroker` adds a listener whose advertised address is the proxy's (the
harness's PLAINTEXT listener stays direct, for the test's own producer and admin calls).

Sizes: RAGMON_FAULT_BROKER_RATE (traces/s, default 80), RAGMON_FAULT_OUTAGE_SECONDS (default 6;
the stall lasts 4 s longer, past the 6 s session timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.faults import (
    DaemonProcess,
    SteadyProducer,
    committed_total,
    end_total,
    env_float,
    free_port,
    kafka_env,
    native_message,
    results_on_topic,
    stored_by_evaluator,
    wait_until,
)
from tests.support.kafka_broker import BrokerUnavailable, KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.services import service_unavailable
from tests.support.tcp_proxy import TcpProxy
from tests.support.traces import native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


class ProxiedBroker(KafkaBroker):
    """A test broker with one more listener, PROXIED, advertised at a proxy's address.

    KafkaBroker owns `listeners` and `advertised.listeners` (extra_config may not set them), so
    this subclass appends the listener to the properties file the harness writes.
    """

    def __init__(self, workdir: Path, proxied_port: int, advertised_port: int) -> None:
        self.proxied_port = proxied_port
        self.advertised_port = advertised_port
        super().__init__(workdir)

    def _write_server_properties(self) -> None:
        super()._write_server_properties()
        lines = []
        for line in self.config_file.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "listeners":
                value += f",PROXIED://127.0.0.1:{self.proxied_port}"
            elif key == "advertised.listeners":
                value += f",PROXIED://127.0.0.1:{self.advertised_port}"
            elif key == "listener.security.protocol.map":
                value += ",PROXIED:PLAINTEXT"
            lines.append(f"{key}={value}" if value else line)
        self.config_file.write_text("\n".join(lines) + "\n")


@dataclass
class Probe:
    """/readyz and /healthz as seen every 0.25 s during one phase."""

    name: str
    ready: list[int | None] = field(default_factory=list)
    healthy: list[int | None] = field(default_factory=list)

    def summary(self) -> str:
        def share(codes: list[int | None], want: int) -> str:
            return f"{sum(c == want for c in codes)}/{len(codes)}"

        return (
            f"{self.name}: /readyz 503 in {share(self.ready, 503)} probes, "
            f"/healthz 200 in {share(self.healthy, 200)}"
        )


def _watch(daemon: DaemonProcess, probe: Probe, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert daemon.alive, f"the daemon exited during {probe.name}:\n{daemon.stderr_tail()}"
        probe.ready.append(daemon.status("/readyz"))
        probe.healthy.append(daemon.status("/healthz"))
        time.sleep(0.25)


@dataclass
class Rig:
    daemon: DaemonProcess
    producer: SteadyProducer
    bootstrap: str  # direct, for the test's own clients
    topic: str
    results: str
    dlq: str
    group: str
    database: Path

    def processed(self) -> float:
        return self.daemon.value("ragmon_traces_processed_total", outcome="ok")

    def wait_progress(self, what: str, timeout: float = 90.0) -> float:
        """Wait until the daemon is ready and processes new traces again; returns the seconds."""
        started = time.monotonic()
        before = self.processed()
        wait_until(
            lambda: self.daemon.ready() and self.processed() > before + 20,
            timeout,
            f"the daemon to recover after {what}",
            interval=0.25,
        )
        return time.monotonic() - started

    def finish(self) -> dict[str, int]:
        """Stop producing, drain, stop the daemon; check that nothing was lost."""
        self.producer.stop()
        produced = self.producer.acked
        wait_until(
            lambda: (
                committed_total(self.bootstrap, self.group) >= end_total(self.bootstrap, self.topic)
            ),
            120,
            "every offset committed",
            interval=1.0,
        )
        assert self.daemon.alive, "the daemon exited on its own"
        assert self.daemon.terminate() == 0, self.daemon.stderr_tail()
        stored = stored_by_evaluator(self.database).get("heuristic", set())
        missing = produced - stored
        assert not missing, f"{len(missing)} acknowledged traces lost: {sorted(missing)[:5]}"
        published = results_on_topic(self.bootstrap, self.results)
        unpublished = {t for t in produced if (t, "heuristic") not in published}
        assert not unpublished, f"{len(unpublished)} traces have no result on the results topic"
        assert end_total(self.bootstrap, self.dlq) == 0, "nothing should be dead-lettered"
        return {
            "acknowledged": len(produced),
            "input_records": end_total(self.bootstrap, self.topic),
            "producer_retries": self.producer.failures,
            "rescored": sum(c - 1 for c in published.values()),
        }


@contextlib.contextmanager
def _rig(broker: KafkaBroker, daemon_bootstrap: str, prefix: str, workdir: Path) -> Iterator[Rig]:
    topic, dlq, results = f"{prefix}.in", f"{prefix}.dlq", f"{prefix}.results"
    asyncio.run(create_topics(broker.bootstrap, [topic, results], partitions=3))
    asyncio.run(create_topics(broker.bootstrap, [dlq]))
    database = workdir / "results.db"
    daemon = DaemonProcess(
        {
            **kafka_env(daemon_bootstrap, topic, f"{prefix}.group", dlq),
            "RAGMON_KAFKA__SESSION_TIMEOUT_MS": "6000",
            "RAGMON_KAFKA__HEARTBEAT_INTERVAL_MS": "1000",
            "RAGMON_RESULTS__TOPIC": results,
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
        },
        workdir,
    )
    rate = env_float("RAGMON_FAULT_BROKER_RATE", 80)
    producer = SteadyProducer(
        broker.bootstrap, topic, lambda n: native_message(native_trace(n)), rate
    )
    rig = Rig(daemon, producer, broker.bootstrap, topic, results, dlq, f"{prefix}.group", database)
    try:
        daemon.start()
        daemon.wait_ready(90)
        producer.start()
        rig.wait_progress("start-up")
        yield rig
    finally:
        daemon.ensure_stopped()
        if producer.error is None:
            producer.stop(timeout=5)


@dataclass
class Run:
    """What one scenario observed; the tests below judge it."""

    probes: list[Probe] = field(default_factory=list)
    recovered_seconds: list[float] = field(default_factory=list)
    outcome: dict[str, int] = field(default_factory=dict)


def _outage(
    rig: Rig,
    run: Run,
    name: str,
    begin: Callable[[], None],
    end: Callable[[], None],
    seconds: float,
) -> None:
    probe = Probe(name)
    begin()
    _watch(rig.daemon, probe, seconds)
    end()
    recovered = rig.wait_progress(name)
    run.probes.append(probe)
    run.recovered_seconds.append(recovered)
    print(f"\n{probe.summary()}; consuming again {recovered:.1f}s after it ended")


def _new_broker(broker: Callable[[], KafkaBroker]) -> KafkaBroker:
    try:
        made = broker()
        made.start()
    except BrokerUnavailable as exc:
        service_unavailable(f"Apache Kafka test broker unavailable: {exc}")
    return made


@pytest.fixture(scope="module")
def broker_outages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The broker SIGKILLed then restarted, then stopped cleanly then started, under load."""
    workdir = tmp_path_factory.mktemp("broker-outages")
    broker = _new_broker(lambda: KafkaBroker(workdir / "kafka"))
    run = Run()
    seconds = env_float("RAGMON_FAULT_OUTAGE_SECONDS", 6)
    try:
        with _rig(broker, broker.bootstrap, "outages", workdir) as rig:
            _outage(rig, run, "broker SIGKILL", broker.kill, broker.start, seconds)
            _outage(rig, run, "broker stopped", broker.stop, broker.start, seconds)
            run.outcome = rig.finish()
    finally:
        broker.stop()
    yield run


@pytest.fixture(scope="module")
def connection_faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The daemon's connections to the broker stalled, then cut, through a TCP proxy."""
    workdir = tmp_path_factory.mktemp("connection-faults")
    run = Run()
    seconds = env_float("RAGMON_FAULT_OUTAGE_SECONDS", 6)
    with TcpProxy() as proxy:
        broker = _new_broker(lambda: ProxiedBroker(workdir / "kafka", free_port(), proxy.port))
        assert isinstance(broker, ProxiedBroker)
        proxy.target_port = broker.proxied_port
        try:
            with _rig(broker, f"127.0.0.1:{proxy.port}", "faults", workdir) as rig:
                assert proxy.stats.bytes_down > 0, "the daemon's traffic does not pass the proxy"
                # Longer than the session timeout (6 s): the group drops the member meanwhile.
                _outage(rig, run, "connection stalled", proxy.stall, proxy.resume, seconds + 4)
                _outage(rig, run, "connection cut", proxy.cut, proxy.resume, seconds)
                run.outcome = rig.finish()
        finally:
            broker.stop()
    yield run


def _report(run: Run) -> None:
    outcome = run.outcome
    print(
        f"\nacknowledged {outcome['acknowledged']} traces ({outcome['input_records']} input "
        f"records, {outcome['producer_retries']} producer retries): lost 0, re-scored "
        f"{outcome['rescored']}; recovery {', '.join(f'{s:.1f}s' for s in run.recovered_seconds)}"
    )
    for probe in run.probes:
        assert all(code == 200 for code in probe.healthy), f"/healthz failed during {probe.name}"


def _readiness_reflects(run: Run, *names: str) -> None:
    probes = [p for p in run.probes if p.name in names]
    assert len(probes) == len(names)
    silent = [p.name for p in probes if 503 not in p.ready]
    assert not silent, f"/readyz stayed 200 through: {silent}"
    for probe in probes:
        print(f"\n{probe.summary()}")


def test_broker_killed_and_stopped_under_load_recovers_and_loses_nothing(
    broker_outages: Run,
) -> None:
    _report(broker_outages)  # finish() already checked store, results topic and DLQ


def test_connection_stalled_and_cut_recovers_and_loses_nothing(connection_faults: Run) -> None:
    _report(connection_faults)


def test_readiness_reports_the_broker_down(broker_outages: Run) -> None:
    _readiness_reflects(broker_outages, "broker SIGKILL", "broker stopped")


def test_readiness_reports_a_cut_connection(connection_faults: Run) -> None:
    _readiness_reflects(connection_faults, "connection cut")


def test_readiness_reports_a_stalled_connection(connection_faults: Run) -> None:
    _readiness_reflects(connection_faults, "connection stalled")
