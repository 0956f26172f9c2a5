"""Session fixtures: the real Apache Kafka broker and the other external services (PostgreSQL,
Prometheus, the OpenTelemetry Collector, the instrumented apps' venvs, the llama.cpp servers,
Chromium, the ragas extra), and the hook that marks every test with the services it needs.

A test needs a service when it uses that service's fixture, at any depth (SERVICE_FIXTURES), or
carries the service's marker itself. The markers select tests (`-m "not kafka"`), and
scripts/test.sh sets up only the services of the tests it will run: it asks for them with
RAGMON_TEST_SERVICES_FILE (see `pytest_collection_finish`). A new test that reaches a service
through its fixture gets the marker without saying so.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.kafka_broker import BrokerUnavailable, KafkaBroker
from tests.support.services import service_unavailable

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from tests.support.llama_servers import Installed


def _start_broker(workdir: Path) -> KafkaBroker:
    try:
        broker = KafkaBroker(workdir)
        broker.start()
    except BrokerUnavailable as exc:
        service_unavailable(f"Apache Kafka test broker unavailable: {exc}")
    return broker


SERVICE_FIXTURES: dict[str, frozenset[str]] = {
    "kafka": frozenset({"kafka_broker", "private_broker"}),
    "postgres": frozenset({"postgres_url"}),
    "prometheus": frozenset({"promtool", "prometheus_binary"}),
    "collector": frozenset({"otelcol_binary"}),
    "test_apps": frozenset({"old_traceloop_python"}),
    "llama": frozenset({"llama_install"}),
    "browser": frozenset({"chromium"}),
    "ragas": frozenset({"ragas_installed"}),
}
"""Each service's marker and the fixtures that reach it (scripts/test.sh knows how to set each
one up; pyproject.toml registers the markers)."""

SERVICES_FILE_ENV = "RAGMON_TEST_SERVICES_FILE"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the services whose fixtures it uses (at any depth), so that
    `-m "not kafka"` leaves them out without each file having to say so."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for service, fixtures in SERVICE_FIXTURES.items():
            if used & fixtures:
                item.add_marker(service)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With RAGMON_TEST_SERVICES_FILE set, write there the services the selected tests need,
    one a line (scripts/test.sh collects with `--collect-only` first)."""
    target = os.environ.get(SERVICES_FILE_ENV)
    if not target:
        return
    needed = {
        marker.name
        for item in session.items
        for marker in item.iter_markers()
        if marker.name in SERVICE_FIXTURES
    }
    Path(target).write_text("".join(f"{name}\n" for name in sorted(needed)))


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
        await _drop_database(admin, name)
        await admin.dispose()


DROP_ATTEMPTS = 50  # 0.1 s apart: an autovacuum worker's visit to an empty database is brief


async def _drop_database(admin: AsyncEngine, name: str) -> None:
    """Drop a test database, its sessions terminated. FORCE cannot terminate an autovacuum
    worker that happens to be visiting the new database (it runs as no role, so PostgreSQL
    answers 42501, "must be a member of the role whose process is being terminated"): wait
    for it to leave and try again."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from monitor.sinks.store_faults import sqlstate

    for attempt in range(DROP_ATTEMPTS):
        try:
            async with admin.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except DBAPIError as exc:
            if sqlstate(exc) != "42501" or attempt == DROP_ATTEMPTS - 1:
                raise
        await asyncio.sleep(0.1)


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus's promtool (Debian package `prometheus`)."""
    return _program("promtool", "Debian package prometheus")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    return _program("prometheus", "Debian package prometheus")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Headless Chromium for the review page (Debian package `chromium`)."""
    return _program("chromium", "Debian package chromium")


def _program(name: str, package: str) -> str:
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None
    )
    if found is None:
        service_unavailable(f"{name} is not installed ({package}; scripts/test.sh installs it)")
    return found


@pytest.fixture(scope="session")
def otelcol_binary() -> Path:
    """The OpenTelemetry Collector scripts/setup-otelcol.sh builds."""
    from tests.support.otelcol import CollectorUnavailable, collector_binary

    try:
        return collector_binary()
    except CollectorUnavailable as exc:
        service_unavailable(f"OpenTelemetry Collector unavailable: {exc}")


@pytest.fixture(scope="session")
def old_traceloop_python() -> Path:
    """The Python of the venv with traceloop-sdk 0.52 (scripts/setup-test-apps.sh)."""
    from tests.support.instrumented import OLD_TRACELOOP_PYTHON, app_venv_problem

    if (problem := app_venv_problem(OLD_TRACELOOP_PYTHON)) is not None:
        service_unavailable(problem)  # missing, or built from older requirements
    return OLD_TRACELOOP_PYTHON


@pytest.fixture(scope="session")
def llama_install() -> Installed:
    """Where scripts/setup-llama.sh put llama-server, llama_cpp.server and the model."""
    from tests.support.llama_servers import installed

    found = installed()
    if found is None:
        service_unavailable("the llama.cpp model servers (run scripts/setup-llama.sh)")
    return found


@pytest.fixture(scope="session")
def ragas_installed() -> None:
    """The ragas extra (`pip install 'rag-monitor[ragas]'`; scripts/test.sh installs it)."""
    if importlib.util.find_spec("ragas") is None:
        service_unavailable("ragas is not installed (pip install 'rag-monitor[ragas]')")
