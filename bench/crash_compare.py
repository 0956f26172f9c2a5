"""Crash and compare: two replicas, two SIGKILLs mid-stream, then everything counted (issue 21).

Runs the scenario of `tests/support/crash_scenario.py` several times (a fresh topic set and a
fresh store each run): native traces of overlapping conversations with out-of-order turns at a
steady rate into a topic of 6 partitions, two `rag-monitor run` replicas in one consumer group
sharing a store and the scripted judge, each of the kills SIGKILLing one replica mid-stream and
starting it again a second later. For each run it prints what was stored, lost or extra, the
turns that are wrong (turn rows, stored results, the last published record of each (trace,
evaluator)), results-topic records per (trace, evaluator), dead letters and judge calls per task.

    python bench/crash_compare.py                    # 3 runs of 2,000 traces, PostgreSQL
    python bench/crash_compare.py --kills 0          # the same without faults
    python bench/crash_compare.py --store sqlite --runs 1 --traces 600

The PostgreSQL store is a database of its own on the server of RAGMON_TEST_POSTGRES_URL (the
test suite's, postgresql+asyncpg://ragmon:ragmon@127.0.0.1:5432/ragmon_test by default), created
for the run and dropped afterwards. Starts the test broker from scripts/setup-kafka.sh's jars
unless --bootstrap is given. Exit status 0 when every run was exact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.crash_scenario import Outcome, Plan, Scenario

DEFAULT_POSTGRES = "postgresql+asyncpg://ragmon:ragmon@127.0.0.1:5432/ragmon_test"


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh database on the test server, dropped afterwards."""
    base = os.environ.get("RAGMON_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    name = f"ragmon_bench_{uuid.uuid4().hex[:10]}"

    async def admin(statement: str) -> None:
        engine = create_async_engine(base, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(statement))
        finally:
            await engine.dispose()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def run_once(bootstrap: str, workdir: Path, plan: Plan, store: str) -> Outcome | None:
    """One run; None (printed) when it could not be counted: a replica that would not stop
    cleanly, offsets never committed."""
    try:
        return _run(bootstrap, workdir, plan, store)
    except (AssertionError, OSError) as exc:
        print(f"seed {plan.seed}: the run failed: {exc}", flush=True)
        return None


def _run(bootstrap: str, workdir: Path, plan: Plan, store: str) -> Outcome:
    prefix = f"crash{uuid.uuid4().hex[:8]}"
    logdir = workdir / prefix
    logdir.mkdir()
    if store == "sqlite":
        return Scenario(
            bootstrap, prefix, f"sqlite+aiosqlite:///{logdir / 'r.db'}", logdir, plan
        ).run()
    with postgres_database() as url:
        return Scenario(bootstrap, prefix, url, logdir, plan).run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--rate", type=float, default=100.0, help="traces produced per second")
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--sampling-rate", type=float, default=0.3)
    parser.add_argument(
        "--judge-delay",
        type=float,
        nargs=2,
        default=(0.02, 0.08),
        metavar=("MIN", "MAX"),
        help="seconds the scripted judge takes per call (uniform)",
    )
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--seed", type=int, help="of the first run (default: random)")
    parser.add_argument("--logs", type=Path, help="keep the replicas' logs here (default: not)")
    args = parser.parse_args()
    first_seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    plans = [
        Plan(
            traces=args.traces,
            conversations=args.conversations,
            rate=args.rate,
            kills=args.kills,
            sampling_rate=args.sampling_rate,
            judge_delay=(args.judge_delay[0], args.judge_delay[1]),
            seed=first_seed + k,
        )
        for k in range(args.runs)
    ]
    outcomes: list[Outcome | None] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.logs or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.bootstrap:
            outcomes = [run_once(args.bootstrap, workdir, p, args.store) for p in plans]
        else:
            from tests.support.kafka_broker import KafkaBroker

            with KafkaBroker(workdir / "kafka") as broker:
                for plan in plans:
                    outcomes.append(run_once(broker.bootstrap, workdir, plan, args.store))
                    if outcomes[-1] is not None:
                        print(outcomes[-1].summary(), flush=True)
    if args.bootstrap:
        for outcome in outcomes:
            if outcome is not None:
                print(outcome.summary())
    exact = sum(o is not None and o.exact for o in outcomes)
    print(f"{exact} of {len(outcomes)} runs exact ({args.store} store, {args.kills} kills)")
    return 0 if exact == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
