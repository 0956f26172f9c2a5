"""Session fixtures: the real Apache Kafka broker, and helpers that every Kafka test shares."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
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


POSTGRES_URL_ENV = "RAGMON_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+asyncpg://ragmon:ragmon@127.0.0.1:5432/ragmon_test"


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A PostgreSQL database of the test's own, created empty and dropped afterwards, so tests
    running at the same time (other test processes on the machine included) never share tables."""
    import os

    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    base = os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL)
    name = f"ragmon_t{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(base, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    except (OSError, Exception) as exc:  # asyncpg raises its own errors for auth and absence
        await admin.dispose()
        service_unavailable(f"PostgreSQL unavailable at {base}: {type(exc).__name__}: {exc}")
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()
