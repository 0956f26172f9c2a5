"""A private PostgreSQL 15 cluster for tests that stop, restart or crash the database.

Never the shared server on 5432: `initdb` makes a cluster in a directory of the test's own (under
its `tmp_path`), `pg_ctl` runs it on a free loopback port with its unix socket in that directory,
and everything runs as the `postgres` OS user (the server refuses to run as root; `runuser`
switches). The test stops it the ways an operator or a crash does:

- ``stop("fast")``: `pg_ctl stop -m fast`, a routine shutdown: every session is ended with
  SQLSTATE 57P01 (admin_shutdown), then connections are refused;
- ``stop("immediate")``: `pg_ctl stop -m immediate`, like a crash (crash recovery at the next
  start);
- ``restart()``: `pg_ctl restart -m fast`;
- ``hold_locks(...)`` first, so that the daemon's writes are in flight when it stops (a busy
  server: the shutdown ends them with 57P01 rather than finding the daemon idle).

A role ``ragmon`` (password ``ragmon``) owns a database ``ragmon``; ``url`` is its SQLAlchemy URL.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Literal

from tests.support.faults import free_port
from tests.support.services import service_unavailable

BIN = Path("/usr/lib/postgresql/15/bin")
OS_USER = "postgres"
StopMode = Literal["fast", "immediate"]


class PostgresCluster:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data = workdir / "data"
        self.socket_dir = workdir / "socket"
        self.log = workdir / "postgres.log"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://ragmon:ragmon@127.0.0.1:{self.port}/ragmon"

    # ------------------------------------------------------------------------------ lifecycle

    def create(self) -> PostgresCluster:
        """initdb, start, and make the role and database (the test is skipped, or failed under
        RAGMON_TEST_REQUIRE_SERVICES=1, when PostgreSQL 15 or `runuser` is missing)."""
        if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
            service_unavailable(f"PostgreSQL 15 binaries ({BIN}) or runuser missing")
        self.workdir.mkdir(parents=True, exist_ok=True)
        _let_traverse(self.workdir)
        self.socket_dir.mkdir(exist_ok=True)
        shutil.chown(self.workdir, OS_USER)
        shutil.chown(self.socket_dir, OS_USER)
        try:
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                OS_USER,
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            service_unavailable(f"initdb failed: {exc}")
        self.start()
        self.psql("CREATE ROLE ragmon LOGIN PASSWORD 'ragmon'")
        self.psql("CREATE DATABASE ragmon OWNER ragmon")
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=50"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: StopMode = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=50"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-m", "fast",
            "-w", "restart",
        )  # fmt: skip

    def running(self) -> bool:
        result = subprocess.run(
            ["runuser", "-u", OS_USER, "--", str(BIN / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
        )
        return result.returncode == 0

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            self.stop("immediate")

    def hold_locks(self, *tables: str) -> subprocess.Popen[bytes]:
        """A session that locks `tables` (ACCESS EXCLUSIVE) until the server stops it: what the
        daemon writes or reads meanwhile waits, in flight, for the shutdown to end it."""
        sql = (
            f"BEGIN; LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600);"
        )
        return subprocess.Popen(
            [
                "runuser", "-u", OS_USER, "--", "psql", "-h", str(self.socket_dir),
                "-p", str(self.port), "-U", OS_USER, "-d", "ragmon", "-c", sql,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def psql(self, sql: str, database: str = "postgres") -> str:
        result = subprocess.run(
            [
                "runuser", "-u", OS_USER, "--", "psql", "-h", str(self.socket_dir),
                "-p", str(self.port), "-U", OS_USER, "-d", database, "-v", "ON_ERROR_STOP=1",
                "-At", "-c", sql,
            ],
            capture_output=True,
            text=True,
            check=True,
        )  # fmt: skip
        return result.stdout

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run(
            ["runuser", "-u", OS_USER, "--", str(BIN / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, result.args, result.stdout, result.stderr
            )


def _let_traverse(path: Path) -> None:
    """Let other users pass through the directories above `path` (pytest makes its base
    directory private to root): the execute bit only, nothing listed or readable."""
    for parent in [path, *path.parents]:
        if parent == Path("/") or parent == Path("/tmp"):
            break
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, mode | stat.S_IXOTH)
