"""Kafka over TLS with SASL/SCRAM, and secrets that never show: the real daemon, a real broker.

The module's broker has a SASL_SSL listener (SCRAM-SHA-256 over TLS, certificate from a throwaway
CA) beside the PLAINTEXT one the harness uses. The daemon is configured only for the secured
listener, so everything it does (consume, commit, dead letters, results) goes over TLS with SASL.

The secrets test lives here because it needs that listener: the Kafka password must really be
used. It runs the daemon at debug level with a judge API key, an extra judge header, the Kafka
password and a PostgreSQL password in the store URL (a role made for the test), drives it
through judge errors and dead letters, scrapes every endpoint, runs `check-config` (valid and
invalid) and a start-up failure, and searches every captured byte for each secret value.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults import (
    REPO,
    DaemonProcess,
    committed_total,
    free_port,
    results_on_topic,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import BrokerUnavailable, KafkaBroker
from tests.support.openai_server import OpenAIServer, Received, Reply
from tests.support.services import service_unavailable
from tests.support.traces import native_trace

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    try:
        broker = KafkaBroker(tmp_path_factory.mktemp("kafka-sasl"), security="sasl_ssl")
        broker.start()
    except BrokerUnavailable as exc:
        service_unavailable(f"Apache Kafka test broker (sasl_ssl) unavailable: {exc}")
    yield broker
    broker.stop()


def _topics(broker: KafkaBroker, prefix: str) -> tuple[str, str, str]:
    names = (f"{prefix}.in", f"{prefix}.dlq", f"{prefix}.results")
    for name in names:
        broker.create_topic(name)
    return names


def _secure_env(broker: KafkaBroker, prefix: str, **overrides: str) -> dict[str, str]:
    topic, dlq, results = f"{prefix}.in", f"{prefix}.dlq", f"{prefix}.results"
    env = {
        "RAGMON_KAFKA__BOOTSTRAP_SERVERS": broker.sasl_ssl_bootstrap,
        "RAGMON_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "RAGMON_KAFKA__SASL_MECHANISM": "SCRAM-SHA-256",
        "RAGMON_KAFKA__SASL_USERNAME": broker.sasl_username,
        "RAGMON_KAFKA__SASL_PASSWORD": broker.sasl_password,
        "RAGMON_KAFKA__SSL_CAFILE": str(broker.ca_file),
        "RAGMON_KAFKA__TOPICS": json.dumps([topic]),
        "RAGMON_KAFKA__GROUP_ID": f"{prefix}.group",
        "RAGMON_KAFKA__DLQ_TOPIC": dlq,
        "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": "0.5",
        "RAGMON_RESULTS__TOPIC": results,
    }
    env.update(overrides)
    return env


def _produce_secure(broker: KafkaBroker, topic: str, values: list[bytes]) -> None:
    """Produce over the SASL_SSL listener too (the producer side of the same set-up)."""

    async def send() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(acks="all", **broker.sasl_ssl_client_kwargs())
        await producer.start()
        try:
            for n, value in enumerate(values):
                await producer.send_and_wait(topic, value=value, key=f"k{n}".encode())
        finally:
            await producer.stop()

    asyncio.run(send())


def test_traces_flow_end_to_end_over_tls_with_sasl_scram(
    secure_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    topic, dlq, results = _topics(secure_broker, topic_prefix)
    traces = [native_trace(n) for n in range(30)]
    _produce_secure(secure_broker, topic, [json.dumps(t).encode() for t in traces] + [b"{not json"])
    database = tmp_path / "r.db"
    daemon = DaemonProcess(
        _secure_env(
            secure_broker, topic_prefix, RAGMON_STORE__URL=f"sqlite+aiosqlite:///{database}"
        ),
        tmp_path,
    )
    try:
        daemon.start()
        daemon.wait_ready(90)
        wait_until(
            lambda: committed_total(secure_broker.bootstrap, f"{topic_prefix}.group") >= 31,
            60,
            "every message committed over SASL_SSL",
        )
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    published = results_on_topic(secure_broker.bootstrap, results)
    assert {t for t, e in published if e == "heuristic"} == {t["trace_id"] for t in traces}
    letters = topic_records(secure_broker.bootstrap, dlq)
    assert len(letters) == 1 and dict(letters[0].headers)["ragmon.error.reason"] == b"invalid_json"


def _run_until_exit(env: dict[str, str], tmp_path: Path, timeout: float = 90) -> DaemonProcess:
    daemon = DaemonProcess(env, tmp_path, name="failing")
    daemon.start()
    try:
        assert daemon.proc is not None
        daemon.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        daemon.kill()
        raise AssertionError(
            f"the daemon kept running for {timeout}s instead of failing:\n{daemon.stderr_tail()}"
        ) from None
    return daemon


@pytest.fixture(scope="module")
def wrong_password_run(
    secure_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int | None, str, str]:
    """The daemon started with a wrong SASL password: (exit code, stderr, the wrong password)."""
    tmp_path = tmp_path_factory.mktemp("wrong-password")
    _topics(secure_broker, "wrongpw")
    wrong = "wrong-" + secrets.token_hex(8)
    daemon = _run_until_exit(
        _secure_env(
            secure_broker,
            "wrongpw",
            RAGMON_KAFKA__SASL_PASSWORD=wrong,
            RAGMON_STORE__URL=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        ),
        tmp_path,
    )
    return daemon.returncode, daemon.stderr_bytes().decode("utf-8", "replace"), wrong


def test_a_wrong_sasl_password_fails_without_echoing_it(
    wrong_password_run: tuple[int | None, str, str],
) -> None:
    code, stderr, wrong = wrong_password_run
    assert code != 0
    assert "authentication failed" in stderr.lower(), stderr[-2000:]
    assert wrong not in stderr
    print(f"\nexit {code}; last line: {stderr.strip().splitlines()[-1][:300]}")


def test_a_wrong_sasl_password_is_a_clean_start_up_error(
    wrong_password_run: tuple[int | None, str, str],
) -> None:
    code, stderr, _ = wrong_password_run
    assert "Traceback" not in stderr and "Unclosed AIOKafkaProducer" not in stderr
    assert code == 3
    (line,) = [x for x in stderr.splitlines() if x.startswith("rag-monitor:")]
    assert line == stderr.strip().splitlines()[-1]
    assert line.startswith("rag-monitor: cannot connect to Kafka at 127.0.0.1:")
    assert ": SaslAuthenticationFailed: Authentication failed" in line and "[Error" not in line


def test_an_untrusted_broker_certificate_is_refused(
    secure_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """The CA file is really used to verify the broker (a different CA fails the handshake)."""
    _topics(secure_broker, topic_prefix)
    other_ca = tmp_path / "other-ca.pem"
    openssl = shutil.which("openssl")
    assert openssl is not None
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k"),
         "-out", str(other_ca), "-days", "1", "-subj", "/CN=other CA"],
        check=True, capture_output=True,
    )  # fmt: skip
    daemon = _run_until_exit(
        _secure_env(
            secure_broker,
            topic_prefix,
            RAGMON_KAFKA__SSL_CAFILE=str(other_ca),
            RAGMON_STORE__URL=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        ),
        tmp_path,
    )
    stderr = daemon.stderr_bytes().decode("utf-8", "replace")
    assert daemon.returncode != 0
    assert "certificate" in stderr.lower() or "ssl" in stderr.lower(), stderr[-2000:]
    print(f"\nexit {daemon.returncode}; last line: {stderr.strip().splitlines()[-1][:300]}")


# ----------------------------------------------------------------------------------- secrets


@pytest.fixture
def postgres_secret_role(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A PostgreSQL role and database of the test's own, with a password only it knows.

    The fixture's role may not create roles, so the role is made as the cluster's superuser
    (`runuser -u postgres psql`, as scripts/setup-postgres.sh does).
    """
    runuser = shutil.which("runuser")
    if os.geteuid() != 0 or runuser is None:
        service_unavailable("making a PostgreSQL role needs root (runuser -u postgres)")
    name = "ragmon_secret_" + secrets.token_hex(4)
    password = "pg-" + secrets.token_hex(12)

    def psql(sql: str) -> None:
        result = subprocess.run(
            [runuser, "-u", "postgres", "--", "psql", "-qc", sql],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            service_unavailable(f"psql failed: {result.stderr.strip()}")

    psql(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
    psql(f"CREATE DATABASE {name} OWNER {name}")
    try:
        from sqlalchemy.engine import make_url

        base = make_url(postgres_url)
        url = base.set(username=name, password=password, database=name)
        yield url.render_as_string(hide_password=False), password
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        psql(f"DROP ROLE IF EXISTS {name}")


def _leaks(captured: dict[str, bytes], secret_values: dict[str, str]) -> list[str]:
    found = []
    for what, value in secret_values.items():
        forms = {value, urllib.parse.quote(value, safe=""), json.dumps(value)[1:-1]}
        for where, data in captured.items():
            for form in forms:
                if form.encode() in data:
                    found.append(f"{what} in {where}")
    return found


def test_secrets_never_appear_in_logs_metrics_errors_or_check_config(
    secure_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    postgres_secret_role: tuple[str, str],
) -> None:
    store_url, store_password = postgres_secret_role
    topic, dlq, results = _topics(secure_broker, topic_prefix)
    api_key = "sk-" + secrets.token_hex(16)
    header_value = "hdr-" + secrets.token_hex(12)
    secret_values = {
        "judge api key": api_key,
        "judge header value": header_value,
        "kafka sasl password": secure_broker.sasl_password,
        "store password": store_password,
    }
    calls = {"n": 0}

    def flaky(request: Received) -> Reply | None:
        calls["n"] += 1
        if calls["n"] % 5 == 1:
            return Reply.error(500)
        if calls["n"] % 5 == 2:
            return Reply.error(401)
        if calls["n"] % 7 == 3:
            return Reply.malformed()
        return None

    captured: dict[str, bytes] = {}
    with OpenAIServer(script=flaky) as judge:
        env = _secure_env(
            secure_broker,
            topic_prefix,
            RAGMON_STORE__URL=store_url,
            RAGMON_LOG__LEVEL="debug",
            RAGMON_SAMPLING__RATE="1.0",
            RAGMON_JUDGE__BASE_URL=judge.url,
            RAGMON_JUDGE__API_KEY=api_key,
            RAGMON_JUDGE__EXTRA_HEADERS=json.dumps({"X-Judge-Token": header_value}),
            RAGMON_JUDGE__MAX_RETRIES="1",
            RAGMON_JUDGE__BACKOFF_BASE_SECONDS="0.05",
            RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD="50",
        )
        daemon = DaemonProcess(env, tmp_path)
        traces = [native_trace(n, conversation_id=f"s-{n}") for n in range(20)]
        _produce_secure(secure_broker, topic, [json.dumps(t).encode() for t in traces] + [b"\xff"])
        try:
            daemon.start()
            daemon.wait_ready(90)
            wait_until(
                lambda: committed_total(secure_broker.bootstrap, f"{topic_prefix}.group") >= 21,
                90,
                "every message committed",
            )
            for path, accept in [
                ("/metrics", "text/plain"),
                ("/metrics", "application/openmetrics-text; version=1.0.0"),
                ("/healthz", "*/*"),
                ("/readyz", "*/*"),
                ("/review", "*/*"),
                ("/nothing-here", "*/*"),
            ]:
                request = urllib.request.Request(daemon.url(path), headers={"Accept": accept})
                try:
                    with urllib.request.urlopen(request, timeout=5) as response:
                        captured[f"GET {path} ({accept})"] = response.read()
                except urllib.error.HTTPError as exc:
                    captured[f"GET {path} ({accept})"] = exc.read()
            assert daemon.terminate() == 0, daemon.stderr_tail()
        finally:
            daemon.ensure_stopped()
        captured["daemon stderr (debug)"] = daemon.stderr_bytes()
        captured["daemon stdout"] = (tmp_path / "daemon.stdout").read_bytes()
        received = judge.requests
    assert received, "the judge was never called"
    assert any(r.headers.get("authorization") == f"Bearer {api_key}" for r in received)
    assert any(r.headers.get("x-judge-token") == header_value for r in received)
    judge_errors = sum(1 for e in daemon.log_events() if e.get("event") == "judge call failed")
    assert judge_errors > 0, "the run should have exercised the judge's error paths"

    captured["results topic"] = b"\n".join(
        r.value for r in topic_records(secure_broker.bootstrap, results)
    )
    captured["dead-letter topic"] = b"\n".join(
        (r.value or b"") + repr(r.headers).encode()
        for r in topic_records(secure_broker.bootstrap, dlq)
    )

    def cli(*args: str, extra: dict[str, str] | None = None) -> bytes:
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
        run_env.update(env, **(extra or {}))
        result = subprocess.run(
            [sys.executable, "-m", "monitor.cli", *args],
            cwd=REPO,
            env=run_env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        return f"exit {result.returncode}\n".encode() + result.stdout + result.stderr

    captured["check-config"] = cli("check-config")
    assert b"exit 0" in captured["check-config"]
    captured["check-config, invalid"] = cli(
        "check-config",
        extra={"RAGMON_HTTP__PORT": "not-a-port", "RAGMON_JUDGE__EXTRA_HEADERS": "{bad json"},
    )
    assert b"exit 2" in captured["check-config, invalid"]
    # A start-up failure with the secrets in play: the store is unreachable.
    from sqlalchemy.engine import make_url

    unreachable = make_url(store_url).set(port=free_port()).render_as_string(hide_password=False)
    captured["run, store unreachable"] = cli(
        "run", extra={"RAGMON_STORE__URL": unreachable, "RAGMON_HTTP__PORT": str(free_port())}
    )
    assert not captured["run, store unreachable"].startswith(b"exit 0")

    leaks = _leaks(captured, secret_values)
    sizes = ", ".join(f"{where}: {len(data)} B" for where, data in captured.items())
    print(f"\nsearched {sizes}; judge calls {len(received)}, judge failures logged {judge_errors}")
    assert not leaks, leaks
