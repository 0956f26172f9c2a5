"""A brief PostgreSQL outage under load (the store behind a TCP proxy that cuts every connection).

Before commit 9d9f578 a failed store write made the trace's processing raise and the trace was
dead-lettered as `processing_error`: 3 s of outage at 50 traces/s gave 133 dead letters and 130
traces without a result. Now the result writes are retried with backoff (the traces stay
unfinished, reading waits), but the conversation tracker's own reads and writes are not: with a
flapping connection about half the traces are still dead-lettered (their results are stored,
their conversation turns are not). Goal (issue 8): nothing dead-lettered, everything stored.

Sizes: RAGMON_FAULT_STORE_OUTAGE_SECONDS (default 3), then RAGMON_FAULT_STORE_FLAPS (default 8)
cuts of 0.3 s each 0.4 s apart.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.support.faults import (
    DaemonProcess,
    SteadyProducer,
    committed_total,
    end_total,
    env_float,
    kafka_env,
    native_message,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.tcp_proxy import TcpProxy
from tests.support.traces import native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def _stored(url: str) -> set[str]:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT trace_id FROM evaluation_results WHERE evaluator = 'heuristic'")
            )
            return {r[0] for r in rows}
    finally:
        await engine.dispose()


def test_a_brief_store_outage_loses_no_result(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, postgres_url: str
) -> None:
    outage = env_float("RAGMON_FAULT_STORE_OUTAGE_SECONDS", 3)
    flaps = int(env_float("RAGMON_FAULT_STORE_FLAPS", 8))
    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, dlq, results]))
    url = make_url(postgres_url)
    with TcpProxy(url.port or 5432, target_host=url.host or "127.0.0.1") as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        daemon = DaemonProcess(
            {
                **kafka_env(bootstrap, topic, group, dlq),
                "RAGMON_RESULTS__TOPIC": results,
                "RAGMON_STORE__URL": proxied,
            },
            tmp_path,
        )
        producer = SteadyProducer(
            bootstrap, topic, lambda n: native_message(native_trace(n)), rate=50
        )
        try:
            daemon.start()
            daemon.wait_ready(90)
            producer.start()
            time.sleep(2)
            proxy.cut()  # one outage ...
            time.sleep(outage)
            proxy.resume()
            time.sleep(1)
            for _ in range(flaps):  # ... then a flapping connection
                proxy.cut()
                time.sleep(0.3)
                proxy.resume()
                time.sleep(0.4)
            time.sleep(2)
            producer.stop()
            wait_until(
                lambda: committed_total(bootstrap, group) >= end_total(bootstrap, topic),
                60,
                "every offset committed",
            )
            assert daemon.alive, "the daemon exited during the store outage"
            assert daemon.terminate() == 0, daemon.stderr_tail()
        finally:
            daemon.ensure_stopped()
            if producer.error is None:
                producer.stop(timeout=5)
    stored = asyncio.run(_stored(postgres_url))
    dead = end_total(bootstrap, dlq)
    missing = producer.acked - stored
    print(
        f"\n{len(producer.acked)} traces, store cut for {outage:.0f}s and {flaps} flaps: "
        f"{len(missing)} without a "
        f"stored result, {dead} dead-lettered"
    )
    if dead:
        errors = {
            dict(r.headers).get("ragmon.error.message", b"?").decode()[:300]
            for r in topic_records(bootstrap, dlq)
        }
        raise AssertionError(f"{dead} traces dead-lettered by the outages: {errors}")
    assert not missing
