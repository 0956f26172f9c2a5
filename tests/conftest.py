"""Session fixtures: the real Apache Kafka broker, and helpers that every Kafka test shares."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka_broker import BrokerUnavailable, KafkaBroker
from tests.support.services import service_unavailable


def _start_broker(workdir: Path) -> KafkaBroker:
    try:
        broker = KafkaBroker(workdir)
        broker.start()
    except BrokerUnavailable as exc:
        service_unavailable(f"Apache Kafka test broker unavailable: {exc}")
    return broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One real Kafka 4.x broker (KRaft, single node) shared by the session's tests."""
    broker = _start_broker(tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A broker of the test's own, for tests that stop or restart it."""
    broker = _start_broker(tmp_path / "kafka")
    yield broker
    broker.stop()


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"
