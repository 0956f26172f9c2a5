"""A trace id seen under two conversations (issue 21): the first conversation keeps its turn,
the second copy is dead-lettered `trace_id_conflict`, counted, logged at most once a minute,
and nothing of it is stored or left as the last published record.

Through the real daemon (in process), Apache Kafka and a SQLite store. Both ways a second copy
can arrive: last in its conversation (its step fails in the database after its result was
published: the first conversation's results are published again) and before later turns of
its conversation (a renumbering: refused before anything is published).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from tests.support.faults import topic_records
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.traces import RunningDaemon, encode, scoring_settings, wait_for

START = datetime(2026, 11, 26, 9, tzinfo=UTC)


def _trace(trace_id: str, conversation: str, minute: int) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "timestamp": (START + timedelta(minutes=minute)).isoformat(),
        "agent": "bot",
        "conversation_id": conversation,
        "query": f"What does {conversation} say at minute {minute}?",
        "contexts": [{"id": "d", "text": f"At minute {minute} the answer is {minute}."}],
        "answer": f"At minute {minute} the answer is {minute}.",
    }


async def test_a_trace_id_under_a_second_conversation_is_dead_lettered_not_dropped(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic, results, dlq = f"{topic_prefix}.in", f"{topic_prefix}.results", f"{topic_prefix}.dlq"
    await create_topics(bootstrap, [topic, results, dlq])
    db = tmp_path / "r.db"
    sent = [
        _trace("a1", "conv-a", 1),
        _trace("shared-x", "conv-a", 2),
        _trace("shared-y", "conv-a", 3),
        _trace("b1", "conv-b", 1),
        _trace("b3", "conv-b", 3),
        _trace("shared-x", "conv-b", 2),  # started before b3: would move it up
        _trace("c1", "conv-c", 1),
        _trace("shared-y", "conv-c", 5),  # the last turn of its conversation
    ]
    daemon = Daemon(
        scoring_settings(bootstrap, topic_prefix, db, results_topic=results),
        SourceSpec("kafka"),
        registry=CollectorRegistry(),
    )
    running = RunningDaemon(daemon)
    value = daemon.metrics.registry.get_sample_value

    def processed() -> float:
        return sum(
            value("ragmon_traces_processed_total", {"agent": "bot", "outcome": o}) or 0.0
            for o in ("ok", "error")
        )

    with structlog.testing.capture_logs() as logs:
        await running.started()
        for n, trace in enumerate(sent, start=1):  # one at a time: in this order
            await produce(bootstrap, topic, [encode(trace)], keys=[b"one-partition"])
            await wait_for(lambda n=n: processed() == n, 30, f"trace {n} processed")
        assert await running.stop() == 0

    dead = await asyncio.to_thread(topic_records, bootstrap, dlq)
    reasons = [dict(r.headers)["ragmon.error.reason"].decode() for r in dead]
    assert reasons == ["trace_id_conflict", "trace_id_conflict"]
    assert [json.loads(r.value)["conversation_id"] for r in dead] == ["conv-b", "conv-c"]
    assert value("ragmon_dead_letters_total", {"reason": "trace_id_conflict"}) == 2.0
    lines = [e for e in logs if e["event"] == "trace dead-lettered by a fault of its own"]
    assert len(lines) == 1, "at most one line a minute"
    assert lines[0]["reason"] == "trace_id_conflict"

    with sqlite3.connect(db) as conn:
        turns = {
            t: (c, n)
            for t, c, n in conn.execute(
                "SELECT trace_id, conversation_id, turn FROM conversation_turns"
            )
        }
        stored = dict(conn.execute("SELECT trace_id, conversation_id FROM evaluation_results"))
    assert turns == {
        "a1": ("conv-a", 1),
        "shared-x": ("conv-a", 2),
        "shared-y": ("conv-a", 3),
        "b1": ("conv-b", 1),
        "b3": ("conv-b", 2),  # not moved by the refused copy
        "c1": ("conv-c", 1),
    }
    assert stored["shared-x"] == stored["shared-y"] == "conv-a"

    last: dict[str, dict[str, Any]] = {}
    published = await asyncio.to_thread(topic_records, bootstrap, results)
    for record in sorted(published, key=lambda r: r.offset):
        result = json.loads(record.value)
        last[result["trace_id"]] = result
    assert (last["shared-x"]["conversation_id"], last["shared-x"]["turn"]) == ("conv-a", 2)
    assert (last["shared-y"]["conversation_id"], last["shared-y"]["turn"]) == ("conv-a", 3), (
        "the copy's result was published before its step failed: the first's comes again after"
    )
    assert last["b3"]["turn"] == 2
