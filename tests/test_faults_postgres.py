"""A real PostgreSQL stopped fast, restarted and stopped immediate under a steady trace rate.

Issue 21: `pg_ctl stop -m fast` ends every session with SQLSTATE 57P01 (admin_shutdown) before
refusing connections; the driver raised that as a generic `DBAPIError` nobody retried, and 133
of 2,250 traces were dead-lettered `processing_error` in the first 4.4 s (the existing store test
cuts TCP through a proxy, which never produces it). Here a private cluster (never the shared
server) behind a real `rag-monitor run` and Apache Kafka goes through a fast stop (6 s down), a
fast restart and an immediate stop (a crash: 5 s down, crash recovery), while conversations with
out-of-order turns arrive at 30 traces/s. Before each stop a session locks the tables for a
second, so the daemon's writes are in flight when the server ends them (at this rate they
otherwise finish in milliseconds and the stop mostly finds idle connections, which the pool's
pre-ping replaces quietly). Exactly: nothing dead-lettered, every trace stored
once, every turn right in the turn rows, the stored results and the last published record, and
`/readyz` 503 while the database is away.

Sizes: RAGMON_FAULT_PG_RATE (default 30 traces/s), RAGMON_FAULT_SEED (default: random, printed).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from pathlib import Path

import pytest

from tests.support.crash_scenario import Outcome, Plan, conversation_traces, tally
from tests.support.faults import (
    DaemonProcess,
    SteadyProducer,
    env_int,
    kafka_env,
    metric_value,
    wait_committed,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.postgres_cluster import PostgresCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# (seconds after the stream started, what happens to the database)
FAULTS = ((3.0, "stop fast"), (9.0, "start"), (13.0, "restart"), (17.0, "stop immediate"))
BACK_AT = 22.0
TABLES = ("evaluation_results", "conversation_turns")
LOCKED_SECONDS = 1.0  # before a stop: the daemon's writes wait behind a lock, in flight
STREAM_SECONDS = 24.0


class ReadinessProbe:
    """Polls /readyz from a thread; `seen(since, until)` the statuses in a window."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.samples: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ReadinessProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            self.samples.append((time.monotonic(), self.daemon.status("/readyz")))

    def seen(self, since: float, until: float) -> set[int | None]:
        return {status for at, status in self.samples if since <= at <= until}


def test_postgres_stopped_fast_restarted_and_stopped_immediate_loses_and_misnumbers_nothing(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    rate = env_int("RAGMON_FAULT_PG_RATE", 30)
    seed = env_int("RAGMON_FAULT_SEED", random.randrange(1_000_000))
    total = int(rate * STREAM_SECONDS)
    plan = Plan(traces=total, conversations=max(1, total // 6), kills=0, seed=seed)
    traces = conversation_traces(plan)
    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, results], partitions=3))
    asyncio.run(create_topics(bootstrap, [dlq]))
    cluster = PostgresCluster(tmp_path / "pg").create()
    daemon = DaemonProcess(
        {
            **kafka_env(bootstrap, topic, group, dlq),
            "RAGMON_RESULTS__TOPIC": results,
            "RAGMON_STORE__URL": cluster.url,
        },
        tmp_path,
    )

    def message(n: int) -> tuple[bytes | None, bytes, str]:
        trace = traces[n]
        return trace["conversation_id"].encode(), json.dumps(trace).encode(), trace["trace_id"]

    producer = SteadyProducer(bootstrap, topic, message, rate, limit=total)
    moments: dict[str, float] = {}
    try:
        daemon.start()
        daemon.wait_ready(90)
        with ReadinessProbe(daemon) as probe:
            producer.start()
            began = time.monotonic()
            for at, fault in FAULTS:
                time.sleep(max(0.0, began + at - time.monotonic()))
                if fault.startswith("stop"):  # with the daemon's writes in flight
                    locker = cluster.hold_locks(*TABLES)
                    time.sleep(LOCKED_SECONDS)
                moments[fault] = time.monotonic()
                if fault == "stop fast":
                    cluster.stop("fast")
                    locker.wait(30)
                elif fault == "stop immediate":
                    cluster.stop("immediate")
                    locker.wait(30)
                elif fault == "restart":
                    cluster.restart()
                else:
                    cluster.start()
            time.sleep(max(0.0, began + BACK_AT - time.monotonic()))
            cluster.start()
            moments["back"] = time.monotonic()
            wait_until(lambda: producer.acked_count >= total, 60, "every trace produced")
            producer.stop()
            wait_committed(bootstrap, group, topic, 120, "every offset committed")
            wait_until(daemon.ready, 30, "/readyz 200 again")
        samples = daemon.metrics()
        assert daemon.alive, "the daemon exited while the database was away"
        assert daemon.terminate() == 0, daemon.stderr_tail()
        outcome = Outcome(plan)
        outcome.produced = producer.acked_count
        tally(
            outcome,
            traces,
            producer.acked,
            store_url=cluster.url,
            bootstrap=bootstrap,
            results_topic=results,
            dlq=dlq,
            sampling_rate=None,
        )
    finally:
        daemon.ensure_stopped()
        if producer.error is None:
            producer.stop(timeout=5)
        cluster.destroy()

    retries = metric_value(samples, "ragmon_retries_total", operation="store")
    outcome.renumbered = metric_value(samples, "ragmon_conversation_turns_renumbered_total")
    fast_down = probe.seen(moments["stop fast"] + 1.0, moments["start"])
    crash_down = probe.seen(moments["stop immediate"] + 1.0, moments["back"])
    print(
        f"\n{outcome.summary()}\n  store retries {retries:.0f}; /readyz while stopped fast "
        f"{sorted(map(str, fast_down))}, while stopped immediate {sorted(map(str, crash_down))}"
    )
    assert outcome.produced == total
    assert outcome.dead_letters == 0, "a store fault is never a data fault"
    assert outcome.exact, outcome.summary()
    assert outcome.renumbered > 0, "turns were renumbered while the database came and went"
    assert retries > 0, "the daemon rode the outages out by retrying"
    assert 503 in fast_down and 503 in crash_down, "/readyz says the store is away"
