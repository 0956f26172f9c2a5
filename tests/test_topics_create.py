"""`rag-monitor topics create` reports what the broker has, read back after creating, and a
broker it cannot reach in one line naming the address and why."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.support.cli import rag_monitor
from tests.support.kafka_broker import KafkaBroker
from tests.support.tansu import tansu_broker


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[str]:
    with tansu_broker(tmp_path / "tansu.log") as bootstrap:
        yield bootstrap


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return rag_monitor(*args, cwd=cwd, **env)


def _on_broker(bootstrap: str) -> dict[str, int]:
    """Every topic of the broker with its partition count."""

    async def read() -> dict[str, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            names = await admin.list_topics()
            described = await admin.describe_topics(names) if names else []
        finally:
            await admin.close()
        return {t["topic"]: len(t["partitions"]) for t in described}

    return asyncio.run(read())


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            await admin.close()

    asyncio.run(create())


OTLP = '["otlp_spans"]'


def test_topics_are_created_with_the_configured_partitions_and_reported_as_read_back(
    tansu: str, tmp_path: Path
) -> None:
    # Tansu creates a topic that a metadata request names (as Apache Kafka does with
    # auto.create.topics.enable): looking a missing topic up must not create it.
    first = _cli(tmp_path, "topics", "create", RAGMON_KAFKA__BOOTSTRAP_SERVERS=tansu,
                 RAGMON_KAFKA__OTLP_TOPICS=OTLP)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "created  rag_traces  12 partitions  (kafka.topics: native traces)",
        "created  otlp_spans  12 partitions  (kafka.otlp_topics: OTLP span exports)",
        "created  rag-monitor.otlp-spans  12 partitions  (kafka.spans_topic: spans and log"
        " records split per trace, keyed by trace id (OTLP stage))",
        "created  rag-monitor.otlp-traces  12 partitions  (kafka.traces_topic: assembled traces"
        " keyed by conversation id (scoring stage))",
        "created  rag_traces.dlq  1 partition  (kafka.dlq_topic: dead letters)",
        "created  rag_eval_results  12 partitions  (results.topic: evaluation results)",
        "retention: not checked (the broker does not answer DescribeConfigs)",
    ]
    on_broker = {
        "rag_traces": 12, "otlp_spans": 12, "rag-monitor.otlp-spans": 12,
        "rag-monitor.otlp-traces": 12, "rag_traces.dlq": 1, "rag_eval_results": 12,
    }  # fmt: skip
    assert _on_broker(tansu) == on_broker
    again = _cli(tmp_path, "topics", "create", RAGMON_KAFKA__BOOTSTRAP_SERVERS=tansu,
                 RAGMON_KAFKA__OTLP_TOPICS=OTLP)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout.replace("created  ", "exists   ")
    assert _on_broker(tansu) == on_broker


def test_a_topic_that_differs_from_the_configuration_is_reported_and_left_alone(
    tansu: str, tmp_path: Path
) -> None:
    _create_topic(tansu, "rag_traces", 4)
    result = _cli(tmp_path, "topics", "create", RAGMON_KAFKA__BOOTSTRAP_SERVERS=tansu,
                  RAGMON_KAFKA__FORMAT="native")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "exists   rag_traces  4 partitions; configured: 12 partitions"
        "  (kafka.topics: native traces)"
    )
    assert "1 of 3 topics differ from the configuration" in lines[-2]
    assert _on_broker(tansu)["rag_traces"] == 4


def test_apache_kafka_reports_retention_and_a_retention_that_differs(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    names = {
        "RAGMON_KAFKA__TOPICS": f'["{topic_prefix}.in"]',
        "RAGMON_KAFKA__DLQ_TOPIC": f"{topic_prefix}.dlq",
        "RAGMON_KAFKA__FORMAT": "native",
        "RAGMON_RESULTS__TOPIC": f"{topic_prefix}.results",
        "RAGMON_KAFKA__TOPIC_PARTITIONS": "3",
    }
    kafka = kafka_broker.bootstrap
    first = _cli(tmp_path, "topics", "create", RAGMON_KAFKA__BOOTSTRAP_SERVERS=kafka, **names)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"created  {topic_prefix}.in  3 partitions, retention 7 d  (kafka.topics: native traces)",
        f"created  {topic_prefix}.dlq  1 partition, retention 30 d"
        "  (kafka.dlq_topic: dead letters)",
        f"created  {topic_prefix}.results  3 partitions, retention 7 d  (results.topic: evaluation"
        " results)",
    ]
    names["RAGMON_KAFKA__RETENTION_MS"] = str(86_400_000)
    again = _cli(tmp_path, "topics", "create", RAGMON_KAFKA__BOOTSTRAP_SERVERS=kafka, **names)
    assert again.stdout.splitlines()[0] == (
        f"exists   {topic_prefix}.in  3 partitions, retention 7 d; configured: retention.ms"
        " 86400000  (kafka.topics: native traces)"
    )
    assert again.stdout.splitlines()[-1].startswith("2 of 3 topics differ")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_an_unreachable_broker_is_one_line_naming_the_address_and_why(tmp_path: Path) -> None:
    port = _closed_port()
    servers = f"127.0.0.1:{port}"
    expected = (
        f"cannot reach Kafka at {servers}: connection refused; check kafka.bootstrap_servers"
        " (RAGMON_KAFKA__BOOTSTRAP_SERVERS) and the kafka.security settings"
    )
    topics = _cli(tmp_path, "topics", "create", RAGMON_KAFKA__BOOTSTRAP_SERVERS=servers)
    assert (topics.returncode, topics.stdout) == (3, "")
    assert topics.stderr.splitlines() == [f"rag-monitor: {expected}"]
    run = _cli(tmp_path, "run", RAGMON_KAFKA__BOOTSTRAP_SERVERS=servers, RAGMON_HTTP__PORT="0",
               RAGMON_HTTP__HOST="127.0.0.1", RAGMON_STORE__ENABLED="false")  # fmt: skip
    assert run.returncode == 3
    reports = [line for line in run.stderr.splitlines() if line.startswith("rag-monitor:")]
    assert reports == [f"rag-monitor: {expected.replace('reach', 'connect to')}"]
    assert reports[0] == run.stderr.splitlines()[-1]
    for noise in ("AddressFamily", "KafkaConnectionError: KafkaConnectionError", "cannot start"):
        assert noise not in run.stderr
