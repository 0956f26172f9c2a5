"""A message over `kafka.max_message_bytes` costs only itself (issue 21, finding 1).

Before: the dead-letter producer had aiokafka's 1 MiB `max_request_size`, exactly the default
`kafka.max_message_bytes`, so the dead letter of a larger message (on a topic whose
`max.message.bytes` is raised, or a compressed batch that expands past the limit) could never be
written and was retried without end: no good trace on any partition was scored, offsets were
never committed, `/readyz` stayed 200. Now the dead letter is cut to what the producer and the
dead-letter topic take (its head, with the original size and the reason in headers), and every
good trace is scored.

A real `rag-monitor run` process on the real broker; the dead-letter topic keeps the broker's
default `max.message.bytes` (1 MiB), lower than the producer's limit, so the broker's refusal is
met too. Native JSON and OTLP (a multi-MB export, and with the limit raised, a 12 MiB export of
one trace of 100,000 spans while `/healthz` is probed).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import (
    DaemonProcess,
    committed_to_end,
    kafka_env,
    pipeline_drained,
    stored_by_evaluator,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_big import wide_trace
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, langchain_turn
from tests.support.traces import native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 6
BROKER_DEFAULT_LIMIT = 1_048_588  # message.max.bytes: what the dead-letter topic takes
RAISED = {"max.message.bytes": str(16 * 2**20)}


def _headers(record: Any) -> dict[str, str]:
    return {k: v.decode("utf-8", "replace") for k, v in record.headers}


def _check_cut(letter: Any, original: bytes, topic: str, partition: int, offset: int) -> None:
    print(f"\ndead letter: {len(original)} bytes cut to {len(letter.value)}")
    headers = _headers(letter)
    assert headers["ragmon.error.reason"] == "too_large"
    assert headers["ragmon.original.topic"] == topic
    assert headers["ragmon.original.partition"] == str(partition)
    assert headers["ragmon.original.offset"] == str(offset)
    assert headers["ragmon.original.size"] == str(len(original))
    assert headers["ragmon.value.truncated"] == "true"
    assert original.startswith(letter.value), "the head of the message, as it was"
    assert 0 < len(letter.value) < BROKER_DEFAULT_LIMIT


@pytest.mark.parametrize(
    ("configs", "compression"),
    [(RAISED, None), (None, "gzip")],
    ids=["topic-limit-raised", "compressed-batch-expands"],
)
def test_an_oversized_native_message_is_dead_lettered_cut_and_every_good_trace_is_scored(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    configs: dict[str, str] | None,
    compression: str | None,
) -> None:
    """The message reaches the daemon over the limit either because its topic takes larger
    messages, or because it was compressed under the topic's limit and expands past it."""
    bootstrap = kafka_broker.bootstrap
    topic, dlq, group = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic], partitions=PARTITIONS, configs=configs))
    asyncio.run(create_topics(bootstrap, [dlq, f"{topic_prefix}.results"]))  # default limit
    per_partition = 8
    good = [native_trace(n, conversation_id=None) for n in range(PARTITIONS * per_partition)]
    huge = json.dumps(native_trace(9999, answer="x" * (3 * 2**20))).encode()
    values = [json.dumps(t).encode() for t in good]
    partitions = [n % PARTITIONS for n in range(len(good))]
    # the huge message first on partition 2: every good trace after it waits for it
    values.insert(0, huge)
    partitions.insert(0, 2)
    asyncio.run(produce(bootstrap, topic, values, partitions=partitions, compression=compression))
    database = tmp_path / "results.db"
    daemon = DaemonProcess(
        {
            **kafka_env(bootstrap, topic, group, dlq),
            "RAGMON_KAFKA__FORMAT": "native",
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
            "RAGMON_RESULTS__TOPIC": f"{topic_prefix}.results",
        },
        tmp_path,
    )
    try:
        daemon.start()
        daemon.wait_ready(90)
        started = time.monotonic()
        wait_until(
            lambda: committed_to_end(bootstrap, group, topic),
            90,
            "every partition committed to its end",
            interval=0.5,
        )
        print(f"\n{len(good)} good traces on {PARTITIONS} partitions drained in ", end="")
        print(f"{time.monotonic() - started:.1f}s after /readyz")
        samples = daemon.metrics()
        assert daemon.ready()
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    stored = stored_by_evaluator(database)["heuristic"]
    assert stored == {t["trace_id"] for t in good}, "every good trace, on every partition"
    (letter,) = topic_records(bootstrap, dlq)
    _check_cut(letter, huge, topic, 2, 0)
    dead = {s[0]["reason"]: s[1] for s in samples["ragmon_dead_letters_total"]}
    assert dead["too_large"] == 1 and sum(dead.values()) == 1


def _otlp_env(bootstrap: str, otlp: str, dlq: str, group: str, database: Path) -> dict[str, str]:
    return {
        "RAGMON_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "RAGMON_KAFKA__TOPICS": "[]",
        "RAGMON_KAFKA__OTLP_TOPICS": json.dumps([otlp]),
        "RAGMON_KAFKA__GROUP_ID": group,
        "RAGMON_KAFKA__DLQ_TOPIC": dlq,
        "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": "0.5",
        "RAGMON_KAFKA__INTERNAL_PARTITIONS": "3",
        "RAGMON_KAFKA__OTLP_ASSEMBLY_MAX_SECONDS": "10",
        "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
        "RAGMON_RESULTS__TOPIC": f"{group.removesuffix('.group')}.results",
    }


def _otlp_topics(bootstrap: str, prefix: str) -> tuple[str, str, str]:
    """An OTLP topic taking 16 MiB messages, dead-letter and results topics at the broker's
    default limit; (OTLP topic, dead-letter topic, group)."""
    otlp, dlq, group = f"{prefix}.otlp", f"{prefix}.dlq", f"{prefix}.group"
    asyncio.run(create_topics(bootstrap, [otlp], partitions=PARTITIONS, configs=RAISED))
    asyncio.run(create_topics(bootstrap, [dlq, f"{prefix}.results"]))
    return otlp, dlq, group


def _good_turns(count: int) -> tuple[list[bytes], set[str]]:
    app = App()
    start = time.time_ns()
    turns = [langchain_turn(app, n, session=None, start_ns=start + n * MS) for n in range(count)]
    return [encode(t.spans, "otlp_proto") for t in turns], {t.trace_id for t in turns}


def test_an_oversized_otlp_export_is_dead_lettered_cut_and_the_good_traces_are_scored(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    otlp, dlq, group = _otlp_topics(bootstrap, topic_prefix)
    _, big = wide_trace(25_000, seed=5)
    huge = big.SerializeToString()
    assert len(huge) > 3 * 2**20
    messages, good = _good_turns(2 * PARTITIONS)
    partitions = [n % PARTITIONS for n in range(len(messages))]
    asyncio.run(produce(bootstrap, otlp, [huge, *messages], partitions=[4, *partitions]))
    database = tmp_path / "results.db"
    daemon = DaemonProcess(_otlp_env(bootstrap, otlp, dlq, group, database), tmp_path)
    try:
        daemon.start()
        daemon.wait_ready(90)
        wait_until(
            lambda: pipeline_drained(bootstrap, group, otlp_inputs=[otlp]),
            120,
            "every message through both stages",
            interval=0.5,
        )
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    assert stored_by_evaluator(database)["heuristic"] == good
    (letter,) = topic_records(bootstrap, dlq)
    _check_cut(letter, huge, otlp, 4, 0)


def test_a_trace_of_100000_spans_is_dead_lettered_and_health_answers_meanwhile(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """With `kafka.max_message_bytes` raised to take it, a 12 MiB export of one trace of
    100,000 spans is over `kafka.otlp_max_spans_per_trace` (10,000): dead-lettered
    `too_many_spans` (too large to attach: the detail says so), never mapped; `/healthz`
    answers within the Helm probe's 3 s timeout throughout (before: 15-20 s without answer)."""
    bootstrap = kafka_broker.bootstrap
    otlp, dlq, group = _otlp_topics(bootstrap, topic_prefix)
    huge_id, big = wide_trace(100_000, seed=6)
    huge = big.SerializeToString()
    messages, good = _good_turns(PARTITIONS)
    database = tmp_path / "results.db"
    env = _otlp_env(bootstrap, otlp, dlq, group, database)
    env["RAGMON_KAFKA__MAX_MESSAGE_BYTES"] = str(16 * 2**20)
    daemon = DaemonProcess(env, tmp_path)
    slowest = 0.0
    try:
        daemon.start()
        daemon.wait_ready(90)
        rng = random.Random(6)
        asyncio.run(
            produce(
                bootstrap,
                otlp,
                [huge, *messages],
                partitions=[rng.randrange(PARTITIONS) for _ in range(len(messages) + 1)],
            )
        )
        deadline = time.monotonic() + 120
        while not pipeline_drained(bootstrap, group, otlp_inputs=[otlp]):
            assert time.monotonic() < deadline, "timed out waiting for both stages"
            started = time.monotonic()
            assert daemon.status("/healthz") == 200, "/healthz did not answer within 3 s"
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.1)
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    print(f"\nslowest /healthz answer while the trace went through: {slowest * 1000:.0f} ms")
    assert stored_by_evaluator(database)["heuristic"] == good
    (letter,) = topic_records(bootstrap, dlq)
    headers = _headers(letter)
    assert headers["ragmon.error.reason"] == "too_many_spans"
    assert huge_id in headers["ragmon.error.message"]
