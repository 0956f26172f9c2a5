"""The store's CPU per scored trace for its writes, against SQLite's own floor.

    python bench/store_writes.py [--traces 3000] [--batch 36] [--rounds 3] [--tree DIR ...]
        [--instructions]

Scores ``--traces`` of `bench/ingest.py`'s RAG turns (three a conversation) through a file
replay into a SQLite store once, and takes the rows each trace wrote: its conversation turn
(an upsert guarded by its conversation) and its tier-0 result. Then, per round, on a fresh
database file each time:

- **store** (each ``--tree``, default this checkout; each in a fresh process importing
  ``monitor`` from that tree): ``Store.write`` of every trace's step, ``--batch`` steps queued
  together so that they share one group commit (the daemon's commits held 35 steps on
  average: `bench/scored_loop.py`). It prints the process's CPU per trace, of which the SQLite
  worker threads' (their own CPU clocks), and the wall time.
- **sqlite3**: the same rows and statements (one multi-row upsert per table, one transaction
  per batch, the tables and indexes the store creates) through the standard library's sqlite3
  in this thread: what SQLite itself costs, the floor under any driver.

Medians of the rounds. The processes run one after the other, each tree's rounds in turn.
On a shared machine the CPU times move by more than a change of a few tens of µs a trace;
``--instructions`` also counts the instructions of one round, all threads, under valgrind's
callgrind (a worker with one round less a worker with none, ``PYTHONHASHSEED=0``): slow (a
minute a worker) but the same from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_tree = os.environ.get("RAGMON_BENCH_TREE")
sys.path[:0] = [str(Path(_tree).resolve())] if _tree else []
sys.path.insert(1 if _tree else 0, str(REPO))

Step = tuple[dict[str, Any], dict[str, Any]]  # (turn row, result row)


def _threads_cpu() -> float:
    """CPU seconds of every thread but this one (the store's SQLite workers)."""
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        for t in threading.enumerate()
        if t is not threading.main_thread() and t.ident is not None
    )


def reference(traces: int, folder: Path) -> Path:
    """A SQLite store holding what `traces` scored turns wrote (a file replay)."""
    from prometheus_client import CollectorRegistry
    from pydantic import SecretStr

    from bench.ingest import _turns, as_native
    from monitor.daemon import Daemon, SourceSpec
    from monitor.logs import configure_logging
    from tests.support.traces import daemon_settings

    configure_logging("console", "warning")
    lines = folder / "traces.jsonl"
    lines.write_bytes(b"".join(v + b"\n" for _, v in asyncio.run(as_native(_turns(traces)))))
    settings = daemon_settings("localhost:1", ["t"], "g", "dlq")
    database = folder / "reference.db"
    settings.store.url = SecretStr(f"sqlite+aiosqlite:///{database}")
    daemon = Daemon(settings, SourceSpec("file", str(lines)), registry=CollectorRegistry())
    if asyncio.run(daemon.run()) != 0:
        raise RuntimeError("the file replay failed")
    return database


def steps_of(database: Path) -> list[Step]:
    """Every trace's (turn row, result row), typed as the store's tables give them."""
    from sqlalchemy import create_engine, select

    from monitor.sinks.store import results_table, turns_table

    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as conn:
        turns = [dict(r._mapping) for r in conn.execute(select(turns_table))]
        results = {r.trace_id: dict(r._mapping) for r in conn.execute(select(results_table))}
    engine.dispose()
    return [(turn, results[turn["trace_id"]]) for turn in turns]


def _fresh(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


async def through_store(steps: list[Step], batch: int, path: Path) -> dict[str, float]:
    from monitor.sinks.store import Store, Upsert, results_table, turns_table

    _fresh(path)
    async with await Store.open(f"sqlite+aiosqlite:///{path}") as store:
        cpu, threads, wall = time.process_time(), _threads_cpu(), time.perf_counter()
        for start in range(0, len(steps), batch):
            await asyncio.gather(
                *(
                    store.write(
                        [
                            Upsert(turns_table, turn, owner="conversation_id"),
                            Upsert(results_table, result),
                        ]
                    )
                    for turn, result in steps[start : start + batch]
                )
            )
        figures = {
            "cpu": time.process_time() - cpu,
            "threads": _threads_cpu() - threads,
            "wall": time.perf_counter() - wall,
        }
    return {name: seconds * 1e6 / len(steps) for name, seconds in figures.items()}


def through_sqlite3(steps: list[Step], batch: int, path: Path) -> dict[str, float]:
    from sqlalchemy.dialects import sqlite as sqlite_dialect
    from sqlalchemy.dialects.sqlite import insert
    from sqlalchemy.schema import CreateIndex, CreateTable

    from monitor.sinks.store import metadata, results_table, turns_table

    dialect = sqlite_dialect.dialect()
    _fresh(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for table in metadata.sorted_tables:
        conn.execute(str(CreateTable(table).compile(dialect=dialect)))
        for index in table.indexes:
            conn.execute(str(CreateIndex(index).compile(dialect=dialect)))
    statements = []
    for table, owner in ((turns_table, "conversation_id"), (results_table, None)):
        keys = [c.name for c in table.primary_key.columns]
        stmt = insert(table)
        updated = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys}
        where = table.c[owner] == stmt.excluded[owner] if owner else None
        upsert = stmt.on_conflict_do_update(index_elements=keys, set_=updated, where=where)
        compiled = upsert.compile(dialect=dialect, column_keys=[c.name for c in table.columns])
        columns = list(compiled.positiontup or ())
        one = "(" + ", ".join(["?"] * len(columns)) + ")"
        processors = [
            table.c[c].type.dialect_impl(dialect).bind_processor(dialect) for c in columns
        ]
        statements.append((str(compiled), one, columns, processors))

    def execute(index: int, rows: list[dict[str, Any]]) -> None:
        sql, one, columns, processors = statements[index]
        flat = [
            value if process is None else process(value)
            for row in rows
            for value, process in zip((row[c] for c in columns), processors, strict=True)
        ]
        changed = conn.execute(sql.replace(one, ", ".join([one] * len(rows))), flat).rowcount
        assert changed == len(rows)

    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, len(steps), batch):
        chunk = steps[start : start + batch]
        conn.execute("BEGIN")
        execute(0, [turn for turn, _ in chunk])
        execute(1, [result for _, result in chunk])
        conn.execute("COMMIT")
    figures = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
    conn.close()
    return {name: seconds * 1e6 / len(steps) for name, seconds in figures.items()}


def worker(database: Path, batch: int, rounds: int, mode: str) -> None:
    """One process's rounds of one mode; prints one JSON line per round."""
    steps = steps_of(database)
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "store.db"
            if mode == "store":
                figures = asyncio.run(through_store(steps, batch, path))
            else:
                figures = through_sqlite3(steps, batch, path)
        print(json.dumps(figures), flush=True)


def _command(database: Path, batch: int, rounds: int, mode: str) -> list[str]:
    command = [sys.executable, __file__, "--worker", str(database), "--mode", mode]
    return [*command, "--batch", str(batch), "--rounds", str(rounds)]


def _env(tree: Path | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("RAGMON_BENCH_TREE", None)
    if tree is not None:
        env["RAGMON_BENCH_TREE"] = str(tree)
    return env


def _run(database: Path, args: argparse.Namespace, mode: str, tree: Path | None) -> list[Any]:
    command = _command(database, args.batch, args.rounds, mode)
    out = subprocess.run(command, env=_env(tree), check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def instructions(database: Path, batch: int, traces: int, mode: str, tree: Path | None) -> float:
    """Instructions per trace of one round (all threads), by callgrind."""
    counts = []
    for rounds in (0, 1):
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        command += _command(database, batch, rounds, mode)
        done = subprocess.run(command, env=_env(tree), check=True, capture_output=True, text=True)
        collected = re.search(r"Collected : (\d+)", done.stderr)
        if collected is None:
            raise RuntimeError(f"callgrind printed no count: {done.stderr[-500:]}")
        counts.append(int(collected.group(1)))
    return (counts[1] - counts[0]) / traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=36, help="steps a group commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append", help="a source tree (repeatable)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind too"
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.batch, args.rounds, args.mode)
        return
    trees: list[Path | None] = [t.resolve() for t in args.tree] if args.tree else [None]
    with tempfile.TemporaryDirectory() as folder:
        database = reference(args.traces, Path(folder))
        print(f"{args.traces:,} scored traces' rows, {args.batch} steps a group commit, µs a trace")
        for tree in trees:
            rounds = _run(database, args, "store", tree)
            name = "store" if tree is None else f"store, {tree.name}"
            print(
                f"  {name}: process CPU {_median(rounds, 'cpu')}, of it SQLite's threads "
                f"{_median(rounds, 'threads')}; wall {_median(rounds, 'wall')}"
                + _counted(database, args, "store", tree)
            )
        rounds = _run(database, args, "sqlite3", None)
        print(
            f"  sqlite3 directly (the floor): CPU {_median(rounds, 'cpu')}; "
            f"wall {_median(rounds, 'wall')}" + _counted(database, args, "sqlite3", None)
        )


def _counted(database: Path, args: argparse.Namespace, mode: str, tree: Path | None) -> str:
    if not args.instructions:
        return ""
    count = instructions(database, args.batch, args.traces, mode, tree)
    return f"; {count / 1000:,.0f} thousand instructions a trace"


def _median(rounds: list[dict[str, float]], name: str) -> str:
    values = [r[name] for r in rounds]
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


if __name__ == "__main__":
    main()
