"""A write that keeps failing: the stage says it is stuck, and SIGTERM still ends the process
within `shutdown.deadline_seconds` (issue 21, finding 1).

A real `rag-monitor run` process on the real broker. The dead-letter topic is deleted while the
daemon runs (an operator's mistake: the broker then answers every write to it with "unknown
topic", which a retry cannot cure until the topic is back), and a poison message arrives
between good traces. The good traces are scored; the daemon cannot finish the poison message,
so:

- its partition is stuck: `/readyz` 503 naming the partition and offset, the gauge
  `ragmon_stuck_partitions{stage="scoring"}` at 1, a warning in the log; `/healthz` stays 200
  (a restart cannot bring the topic back);
- SIGTERM ends the process within the deadline (before: never, while the write was retried);
- the poison message is not committed past: once the topic is back, the next run dead-letters
  it, and every good trace has exactly one result.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiokafka.errors import TopicAuthorizationFailedError
from prometheus_client import CollectorRegistry

from monitor.command import ExitCode
from monitor.daemon import Daemon, SourceSpec
from monitor.messages import RawMessage
from monitor.sinks.produce import ProduceRejected
from tests.support.faults import (
    DaemonProcess,
    committed_to_end,
    kafka_env,
    stored_by_evaluator,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import committed_offsets, create_topics, delete_topics, produce
from tests.support.recorder import SlowRecorder
from tests.support.traces import daemon_settings, native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DEADLINE = 8.0
POISON = b'{"trace_id": "poison", '


def test_sigterm_ends_the_process_within_the_deadline_while_a_write_keeps_failing(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic, dlq, group = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, dlq]))
    before = [native_trace(n, conversation_id=None) for n in range(5)]
    after = [native_trace(n, conversation_id=None) for n in range(5, 10)]
    database = tmp_path / "results.db"
    daemon = DaemonProcess(
        {
            **kafka_env(bootstrap, topic, group, dlq),
            "RAGMON_KAFKA__FORMAT": "native",
            "RAGMON_KAFKA__STUCK_SECONDS": "3",
            "RAGMON_SHUTDOWN__DEADLINE_SECONDS": str(DEADLINE),
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
            "RAGMON_RESULTS__TOPIC": "",
        },
        tmp_path,
    )
    try:
        daemon.start()
        daemon.wait_ready(90)
        asyncio.run(delete_topics(bootstrap, [dlq]))
        values = [json.dumps(t).encode() for t in before] + [POISON]
        values += [json.dumps(t).encode() for t in after]
        asyncio.run(produce(bootstrap, topic, values, partition=0))
        wait_until(lambda: daemon.status("/readyz") == 503, 60, "/readyz to report it")
        _, reason = daemon.get("/readyz")
        assert "scoring stage stuck: no progress on" in reason
        assert f"{topic}/0 at offset 5" in reason, reason
        assert daemon.value("ragmon_stuck_partitions", stage="scoring") == 1
        assert daemon.value("ragmon_stuck_partitions", stage="otlp") == 0
        assert daemon.status("/healthz") == 200, "a failing write is no reason to restart"
        started = time.monotonic()
        code = daemon.terminate(timeout=30)
        took = time.monotonic() - started
        stuck = [e for e in daemon.log_events() if e["event"].startswith("stage stuck")]
        scored_before = stored_by_evaluator(database)["heuristic"]
    finally:
        daemon.ensure_stopped()
    print(f"\nexit {code} {took:.1f}s after SIGTERM (deadline {DEADLINE:g}s)")
    assert took < DEADLINE, f"took {took:.1f}s, deadline {DEADLINE}s"
    assert code == 0, "the daemon's own deadlines ended it (130: the last guard had to)"
    assert stuck and stuck[0]["longest"][0].startswith(f"{topic}/0 at offset 5")
    assert asyncio.run(committed_offsets(bootstrap, group))[(topic, 0)] == 5, (
        "committed up to the poison message, not past it"
    )

    asyncio.run(create_topics(bootstrap, [dlq]))  # the operator puts it back
    daemon.start()
    try:
        daemon.wait_ready(90)
        wait_until(lambda: committed_to_end(bootstrap, group, topic), 60, "the rest committed")
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    (letter,) = topic_records(bootstrap, dlq)
    assert letter.value == POISON
    assert {k: v for k, v in letter.headers}["ragmon.original.offset"] == b"5"
    assert scored_before == {t["trace_id"] for t in before + after}, "the batch's good traces"
    stored = stored_by_evaluator(database)["heuristic"]
    assert stored == {t["trace_id"] for t in before + after}


class RefusingDeadLetters:
    """The dead-letter topic as a cluster that refuses this client for good (its ACLs)."""

    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        raise ProduceRejected("dlq", "kafka.dlq_topic", TopicAuthorizationFailedError())


async def test_a_write_refused_for_good_stops_the_daemon_before_its_offset_is_committed(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    """A refusal no retry can cure (authorization) stops the daemon with exit 3, naming the
    topic and its setting; the good traces before the poison message are processed and
    committed, the poison message is not: the next run, once the ACLs are fixed, reads it."""
    bootstrap = kafka_broker.bootstrap
    topic, group = f"{topic_prefix}.in", f"{topic_prefix}.group"
    await create_topics(bootstrap, [topic])
    good = [native_trace(n, conversation_id=None) for n in range(3)]
    values = [json.dumps(t).encode() for t in good] + [POISON]
    await produce(bootstrap, topic, values, partition=0)
    stage = SlowRecorder()
    settings = daemon_settings(bootstrap, [topic], group, f"{topic_prefix}.dlq", format="native")
    daemon = Daemon(
        settings,
        SourceSpec("kafka"),
        processor=stage,
        registry=CollectorRegistry(),
        dead_letters=RefusingDeadLetters(),
    )
    code = await asyncio.wait_for(daemon.run(), 60)
    assert code == ExitCode.UNAVAILABLE
    assert daemon.failure is not None and "kafka.dlq_topic" in str(daemon.failure)
    assert stage.finished == [t["trace_id"] for t in good]
    assert (await committed_offsets(bootstrap, group))[(topic, 0)] == 3
