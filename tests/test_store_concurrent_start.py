"""Two replicas starting at the same moment on a fresh store both create the schema, once.

A Helm deployment with two replicas and PostgreSQL does this on its first day: both pods open
the empty database at once. Two real `rag-monitor run` processes are started and held at the
database's door (the test keeps the door shut: an uncommitted `CREATE TABLE ragmon_schema` on
PostgreSQL, an exclusive lock on the SQLite file) until both are waiting there; then the door
opens and they meet the empty database together. Both must start, replay their input and exit
0, and the schema must be recorded once.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from monitor.sinks.store import MIGRATIONS, Store
from tests.support.traces import encode, native_trace

pytestmark = pytest.mark.slow  # rag-monitor processes started side by side

REPLICAS = 2
ROUNDS = 1


def _input(tmp_path: Path) -> Path:
    source = tmp_path / "traces.jsonl"
    source.write_text("\n".join(encode(native_trace(n)).decode() for n in range(3)) + "\n")
    return source


def _start(store_url: str, source: Path, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RAGMON_STORE__URL": store_url,
        "RAGMON_HTTP__HOST": "127.0.0.1",
        "RAGMON_HTTP__PORT": "0",
        "RAGMON_LOG__FORMAT": "json",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "run", "--source", f"file:{source}"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / f"{name}.log").open("wb"),
    )


def _finish(processes: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    for index, process in enumerate(processes):
        code = process.wait(timeout=120)
        log = (tmp_path / f"replica-{index}.log").read_text(errors="replace")
        assert code == 0, f"replica {index} exited {code}:\n{log[-3000:]}"
        assert "already exists" not in log, log[-3000:]


async def _wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_two_replicas_create_a_fresh_postgresql_schema_at_once(
    postgres_url: str, tmp_path: Path
) -> None:
    source = _input(tmp_path)
    engine = create_async_engine(postgres_url)
    try:
        for _ in range(ROUNDS):
            async with engine.begin() as conn:  # a fresh database each round
                await conn.execute(text("DROP TABLE IF EXISTS ragmon_schema"))
                for table in ("evaluation_results", "conversation_state", "conversation_turns"):
                    await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
                await conn.execute(text("DROP TABLE IF EXISTS golden_runs"))
            door = await engine.connect()
            await door.execute(text("CREATE TABLE ragmon_schema (version INTEGER NOT NULL)"))
            processes = [
                _start(postgres_url, source, tmp_path, f"replica-{i}") for i in range(REPLICAS)
            ]
            try:

                async def both_waiting() -> bool:
                    async with engine.connect() as conn:
                        waiting = (
                            await conn.execute(
                                text(
                                    "SELECT count(*) FROM pg_stat_activity"
                                    " WHERE wait_event_type = 'Lock'"
                                    " AND datname = current_database()"
                                )
                            )
                        ).scalar()
                    return int(waiting or 0) >= REPLICAS

                await _wait_until(both_waiting, 60, "both replicas to wait for the schema")
            finally:
                await door.rollback()  # the door opens: both meet an empty database
                await door.close()
            await asyncio.to_thread(_finish, processes, tmp_path)
            async with engine.connect() as conn:
                versions = (await conn.execute(text("SELECT version FROM ragmon_schema"))).scalars()
                assert list(versions) == [len(MIGRATIONS)], "the schema recorded once"
                stored = (
                    await conn.execute(text("SELECT count(*) FROM evaluation_results"))
                ).scalar()
                assert stored == 3
    finally:
        await engine.dispose()


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to see open files")
async def test_two_replicas_create_a_fresh_sqlite_schema_at_once(tmp_path: Path) -> None:
    source = _input(tmp_path)
    for round_number in range(ROUNDS):
        db = tmp_path / f"round-{round_number}.db"
        door = sqlite3.connect(db, isolation_level=None)
        door.execute("BEGIN EXCLUSIVE")  # a fresh file, locked
        url = f"sqlite+aiosqlite:///{db}"
        processes = [_start(url, source, tmp_path, f"replica-{i}") for i in range(REPLICAS)]
        try:

            async def both_waiting(
                processes: list[subprocess.Popen[bytes]] = processes, db: Path = db
            ) -> bool:
                return all(_has_open(p.pid, db) for p in processes)

            await _wait_until(both_waiting, 60, "both replicas to open the database")
            await asyncio.sleep(0.5)  # from opening the file to waiting for its lock
        finally:
            door.execute("ROLLBACK")
            door.close()
        await asyncio.to_thread(_finish, processes, tmp_path)
        with sqlite3.connect(db) as conn:
            assert [r[0] for r in conn.execute("SELECT version FROM ragmon_schema")] == [
                len(MIGRATIONS)
            ]
            assert conn.execute("SELECT count(*) FROM evaluation_results").fetchone() == (3,)
        store = await Store.open(url)  # and a third start later finds it as it should
        try:
            assert await store.count_results() == 3
        finally:
            await store.close()
