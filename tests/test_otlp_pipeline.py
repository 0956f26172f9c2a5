"""OpenTelemetry traffic through real `rag-monitor run` processes sharing their consumer groups.

Spans are recorded with the real OpenTelemetry SDK and encoded with the real OTLP encoder,
written unkeyed to partitions of their own choosing (as the Collector's kafkaexporter does with
its default `partition_traces_by_id: false`), read by two replicas on a real Apache Kafka broker,
scored into one SQLite store file the replicas share. The topics are made by
`rag-monitor topics create`.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from monitor.formats.otlp import decode_otlp
from monitor.sinks.store import Store, results_table, turns_table
from tests.support.faults import (
    REPO,
    DaemonProcess,
    pipeline_drained,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, Turn, concurrent_turns, exported_messages, langchain_turn

pytestmark = pytest.mark.kafka

PARTITIONS = 3
WAIT = {"RAGMON_KAFKA__OTLP_ASSEMBLY_MAX_SECONDS": "20"}


class Pipeline:
    """The topics and settings of one test: an OTLP input topic, dead letters, results."""

    def __init__(self, broker: KafkaBroker, prefix: str, store_url: str, logdir: Path) -> None:
        self.bootstrap = broker.bootstrap
        self.otlp, self.dlq, self.results = f"{prefix}.otlp", f"{prefix}.dlq", f"{prefix}.results"
        self.group = f"{prefix}.group"
        self.store_url = store_url
        self.logdir = logdir
        self.env = {
            "RAGMON_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
            "RAGMON_KAFKA__TOPICS": "[]",
            "RAGMON_KAFKA__OTLP_TOPICS": json.dumps([self.otlp]),
            "RAGMON_KAFKA__GROUP_ID": self.group,
            "RAGMON_KAFKA__DLQ_TOPIC": self.dlq,
            "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": "0.5",
            "RAGMON_KAFKA__TOPIC_PARTITIONS": str(PARTITIONS),
            "RAGMON_KAFKA__INTERNAL_PARTITIONS": "4",
            # A killed replica holds its partitions until its session expires: keep it short.
            "RAGMON_KAFKA__SESSION_TIMEOUT_MS": "6000",
            "RAGMON_KAFKA__HEARTBEAT_INTERVAL_MS": "1000",
            "RAGMON_RESULTS__TOPIC": self.results,
            "RAGMON_STORE__URL": store_url,
        }

    def create_topics(self) -> str:
        """`rag-monitor topics create`, as a user runs it before the first start."""
        result = subprocess.run(
            [sys.executable, "-m", "monitor.cli", "topics", "create"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={**DaemonProcess({}, self.logdir).env, **self.env},
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def replica(self, name: str, **env: str) -> DaemonProcess:
        return DaemonProcess({**self.env, **env}, self.logdir, name=name)

    def produce(
        self, messages: list[bytes], rng: random.Random, pause: float = 0.0
    ) -> list[tuple[int, int]]:
        """Unkeyed, each message to a partition of its own choosing; (partition, offset) each."""

        async def send() -> list[tuple[int, int]]:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
            await producer.start()
            placed = []
            try:
                for value in messages:
                    meta = await producer.send_and_wait(
                        self.otlp, value=value, partition=rng.randrange(PARTITIONS)
                    )
                    placed.append((meta.partition, meta.offset))
                    if pause:
                        await asyncio.sleep(pause)
            finally:
                await producer.stop()
            return placed

        return asyncio.run(send())

    def drained(self) -> bool:
        return pipeline_drained(self.bootstrap, self.group, otlp_inputs=[self.otlp])

    def rows(self, table: Any, **equals: Any) -> list[dict[str, Any]]:
        async def read() -> list[dict[str, Any]]:
            store = await Store.open(self.store_url)
            try:
                return await store.select_rows(table, **equals)
            finally:
                await store.close()

        return asyncio.run(read())


@pytest.fixture
def pipeline(kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path) -> Pipeline:
    return Pipeline(
        kafka_broker, topic_prefix, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", tmp_path
    )


@contextmanager
def running(*replicas: DaemonProcess) -> Iterator[tuple[DaemonProcess, ...]]:
    try:
        for replica in replicas:  # one after the other: the first creates the store's schema
            replica.start()
            replica.wait_ready(90)
        yield replicas
    finally:
        for replica in replicas:
            replica.ensure_stopped()


def _stop(*replicas: DaemonProcess) -> None:
    for replica in replicas:
        if replica.alive:
            assert replica.terminate() == 0, replica.stderr_tail()


def check_turns(pipeline: Pipeline, turns: list[Turn], conversation: str) -> None:
    """Turns 1..N exactly once, in the order the turns started; results carry the same turn."""
    rows = pipeline.rows(turns_table, conversation_id=conversation)
    by_start = sorted(turns, key=lambda t: t.start_ns)
    stored = sorted((row["turn"], row["trace_id"]) for row in rows)
    assert stored == [(k, t.trace_id) for k, t in enumerate(by_start, start=1)], stored
    results = pipeline.rows(results_table, conversation_id=conversation)
    turn_of = {t.trace_id: k for k, t in enumerate(by_start, start=1)}
    assert {r["trace_id"]: r["turn"] for r in results} == turn_of
    for row in results:
        assert json.loads(row["result"])["turn"] == row["turn"]


def check_published(pipeline: Pipeline, turns: list[Turn], renumbered: float) -> None:
    """The results topic: every trace's result, each from the whole trace; besides one record
    per trace only the corrections of turns that moved up (re-published with their new turn),
    the last record of each trace carrying the turn the store has."""
    records = topic_records(pipeline.bootstrap, pipeline.results)
    expected = {t.trace_id: t for t in turns}
    last: dict[str, dict[str, Any]] = {}
    for record in records:
        result = json.loads(record.value)
        assert result["trace_id"] in expected and result["evaluator"] == "heuristic"
        assert "incomplete_trace" not in result["flags"] and "no_contexts" not in result["flags"]
        assert result["scores"]["faithfulness"]["value"] == 1.0
        last[result["trace_id"]] = result
    assert set(last) == set(expected)
    assert len(records) == len(turns) + renumbered, "one per trace plus turn corrections"
    stored = {r["trace_id"]: r["turn"] for r in pipeline.rows(results_table)}
    assert {t: r["turn"] for t, r in last.items()} == stored


def renumbered(*replicas: DaemonProcess) -> float:
    return sum(r.value("ragmon_conversation_turns_renumbered_total") for r in replicas if r.alive)


def check_results(pipeline: Pipeline, turns: list[Turn]) -> None:
    """One stored result per trace, from the whole trace: question, LLM answer, contexts."""
    rows = {r["trace_id"]: r for r in pipeline.rows(results_table, evaluator="heuristic")}
    assert set(rows) == {t.trace_id for t in turns}
    for turn in turns:
        row = rows[turn.trace_id]
        result = json.loads(row["result"])
        assert (row["query"], row["answer"]) == (turn.question, turn.answer), turn.n
        assert "incomplete_trace" not in result["flags"], turn.n
        assert "no_contexts" not in result["flags"], "the retriever's documents were joined"
        assert result["scores"]["faithfulness"]["value"] == 1.0, turn.n


def test_topics_create_makes_every_topic_with_its_partitions_and_retention(
    pipeline: Pipeline,
) -> None:
    out = pipeline.create_topics()
    for name in (pipeline.otlp, pipeline.dlq, pipeline.results):
        assert f"created  {name}" in out, out
    spans, traces = f"{pipeline.group}.otlp-spans", f"{pipeline.group}.otlp-traces"

    async def described() -> tuple[dict[str, int], dict[str, dict[str, str]]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=pipeline.bootstrap)
        await admin.start()
        try:
            names = [pipeline.otlp, pipeline.dlq, pipeline.results, spans, traces]
            topics = await admin.describe_topics(names)
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
            )
        finally:
            await admin.close()
        configs = {
            resource[3]: {entry[0]: entry[1] for entry in resource[4]}
            for response in responses
            for resource in response.resources
        }
        return {t["topic"]: len(t["partitions"]) for t in topics}, configs

    partitions, configs = asyncio.run(described())
    assert partitions == {
        pipeline.otlp: PARTITIONS,
        pipeline.dlq: 1,
        pipeline.results: PARTITIONS,
        spans: 4,
        traces: 4,
    }
    week, month = str(7 * 86_400_000), str(30 * 86_400_000)
    assert configs[spans]["retention.ms"] == configs[traces]["retention.ms"] == week
    assert configs[pipeline.otlp]["retention.ms"] == week
    assert configs[pipeline.dlq]["retention.ms"] == month
    room = str(1_048_576 + 64 * 1024)  # kafka.max_message_bytes and what the daemon adds
    for written in (pipeline.dlq, pipeline.results, spans, traces):
        assert configs[written]["max.message.bytes"] == room, written
    again = pipeline.create_topics()
    assert "created" not in again and f"exists   {spans}  4 partitions" in again


def test_twenty_concurrent_turns_in_one_message_are_numbered_by_start(
    pipeline: Pipeline,
) -> None:
    pipeline.create_topics()
    rng = random.Random(12)
    turns = concurrent_turns(20, "conv-one-message", time.time_ns(), rng)
    message = encode([span for turn in turns for span in turn.spans], "otlp_proto")
    a, b = pipeline.replica("a"), pipeline.replica("b")
    with running(a, b):
        pipeline.produce([message], rng)
        wait_until(pipeline.drained, 90, "the message through both stages", interval=0.5)
        moved = renumbered(a, b)
        _stop(a, b)
    check_turns(pipeline, turns, "conv-one-message")
    check_results(pipeline, turns)
    check_published(pipeline, turns, moved)


@pytest.mark.parametrize("kill", [False, True], ids=["steady", "sigkill"])
def test_twenty_concurrent_turns_spread_over_messages_and_partitions(
    pipeline: Pipeline, kill: bool
) -> None:
    pipeline.create_topics()
    rng = random.Random(20 + kill)
    turns = concurrent_turns(20, "conv-spread", time.time_ns(), rng)
    messages = exported_messages(turns, "otlp_json", spans_per_message=3)
    # After a SIGKILL the survivor splits the victim's unfinished raw messages again: parts of
    # traces the victim had already released come back as fragments, which wait the assembly
    # maximum before the scoring stage drops them (the test does not wait the default minute).
    a, b = pipeline.replica("a", **WAIT), pipeline.replica("b", **WAIT)
    with running(a, b):
        producing = threading.Thread(target=pipeline.produce, args=(messages, rng, 0.15))
        producing.start()  # the spans keep coming, in the order an SDK exports them
        if kill:
            scorer = _scoring_replica(a, b)  # some turns are scored, others still assembling
            scorer.kill()  # its unfinished work is read again by the other replica
            survivor = b if scorer is a else a
        producing.join()
        wait_until(pipeline.drained, 120, "every span through both stages", interval=0.5)
        moved = renumbered(a, b)
        _stop(a, b)
    if not kill:
        check_published(pipeline, turns, moved)
    if kill:
        assert not scorer.alive and survivor.returncode == 0
    check_turns(pipeline, turns, "conv-spread")
    check_results(pipeline, turns)
    assert topic_records(pipeline.bootstrap, pipeline.dlq) == []


def _scoring_replica(*replicas: DaemonProcess) -> DaemonProcess:
    """The replica that has scored turns of the conversation (it holds its partition)."""
    found: list[DaemonProcess] = []

    def scored() -> bool:
        found[:] = [r for r in replicas if r.value("ragmon_traces_processed_total") > 0]
        return bool(found)

    wait_until(scored, 60, "a replica to score the first turns", interval=0.05)
    return found[0]


def test_an_llm_answer_eight_seconds_after_the_retriever_is_the_answer(
    pipeline: Pipeline,
) -> None:
    pipeline.create_topics()
    rng = random.Random(8)
    app = App()
    turn = langchain_turn(app, 1, session="conv-slow", start_ns=time.time_ns(), llm_ns=8_000 * MS)
    replica = pipeline.replica("slow")
    with running(replica):
        pipeline.produce([encode(turn.early(), "otlp_proto")], rng)
        time.sleep(8)  # the SDK exports the LLM span and the root when they end
        pipeline.produce([encode(turn.late(), "otlp_proto")], rng)
        wait_until(pipeline.drained, 60, "the trace through both stages", interval=0.5)
        released = replica.value("ragmon_otlp_traces_released_total")
        _stop(replica)
    check_results(pipeline, [turn])
    assert released == 1, "released once, whole: never before its LLM span arrived"


@pytest.mark.parametrize("rebalance", [False, True], ids=["two-replicas", "rebalance"])
def test_spans_spread_over_partitions_give_one_correct_result_per_trace(
    pipeline: Pipeline, rebalance: bool
) -> None:
    pipeline.create_topics()
    rng = random.Random(30 + rebalance)
    app = App()
    start = time.time_ns()
    turns = [
        langchain_turn(
            app,
            n,
            session=f"conv-{n % 7}" if n % 3 else None,
            start_ns=start + n * 20 * MS,
            llm_ns=rng.randint(50, 500) * MS,
        )
        for n in range(1, 41)
    ]
    messages = exported_messages(turns, "otlp_proto", spans_per_message=2)
    a, b = pipeline.replica("a"), pipeline.replica("b")
    replicas = (a,) if rebalance else (a, b)
    with running(*replicas):
        half = len(messages) // 2
        pipeline.produce(messages[:half], rng, pause=0.05)
        if rebalance:  # a second replica joins mid-stream: both groups rebalance
            b.start()
            b.wait_ready(90)
        pipeline.produce(messages[half:], rng, pause=0.05)
        wait_until(pipeline.drained, 120, "every span through both stages", interval=0.5)
        if rebalance:
            assert b.value("ragmon_kafka_assigned_partitions") > 0, "b took a share"
        moved = renumbered(a, b)
        _stop(a, b)
    check_results(pipeline, turns)  # exactly one stored result per trace, each correct
    check_published(pipeline, turns, moved)
    assert topic_records(pipeline.bootstrap, pipeline.dlq) == []


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
def test_an_unmappable_trace_dead_letters_only_its_own_spans(pipeline: Pipeline, fmt: Any) -> None:
    pipeline.create_topics()
    rng = random.Random(4)
    app = App()
    start = time.time_ns()
    good = [langchain_turn(app, n, session=None, start_ns=start + n * MS) for n in (1, 3)]
    bad = langchain_turn(app, 2, session=None, start_ns=start + 2 * MS, answered=False)
    everything = [span for turn in (good[0], bad, good[1]) for span in turn.spans]
    message = encode(everything, fmt)
    replica = pipeline.replica("dlq")
    with running(replica):
        ((partition, offset),) = pipeline.produce([message], rng)
        wait_until(pipeline.drained, 60, "the message through both stages", interval=0.5)
        _stop(replica)
    check_results(pipeline, good)
    (letter,) = topic_records(pipeline.bootstrap, pipeline.dlq)
    headers = {k: v.decode() for k, v in letter.headers}
    assert headers["ragmon.error.reason"] == "otlp_unmappable"
    assert headers["ragmon.original.topic"] == pipeline.otlp
    assert (headers["ragmon.original.partition"], headers["ragmon.original.offset"]) == (
        str(partition),
        str(offset),
    )
    assert bad.trace_id in headers["ragmon.error.message"]
    spans = decode_otlp(letter.value, fmt)  # in the input's own format
    assert {s.trace_id for s in spans} == {bad.trace_id}
    assert len(spans) == len(bad.spans), "the bad trace's spans, and only those"
    assert len(letter.value) < len(message)


def test_sigkill_after_traces_are_produced_but_before_spans_are_committed(
    pipeline: Pipeline,
) -> None:
    """The crash window of the OTLP stage (docs/kafka.md, Delivery guarantees): every trace was
    assembled and produced to the traces topic and scored, but no offset was committed (the
    commit interval is longer than the test). After SIGKILL the restarted daemon reads the spans
    again, assembles every trace again and produces it again: nothing is lost, the store holds
    one result and one turn per trace, the conversation's per-turn metrics are not counted
    again; the traces topic holds each trace twice, and the per-trace counters of the new
    process count the re-scored traces (here twice: the scoring stage had committed nothing
    either, so it also reads the first copies again). The results topic holds each result
    once, plus the corrections of the first run's renumbering: re-scored, every result came
    out as stored, so none is published again."""
    pipeline.create_topics()
    rng = random.Random(41)
    turns = concurrent_turns(8, "conv-crash", time.time_ns(), rng)
    messages = exported_messages(turns, "otlp_proto", spans_per_message=3)
    replica = pipeline.replica("crash", RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS="3600")
    with running(replica):
        pipeline.produce(messages, rng)
        wait_until(
            lambda: replica.value("ragmon_traces_processed_total") == len(turns),
            60,
            "every turn scored",
        )
        assert replica.value("ragmon_turn_hallucination_ratio_count") == len(turns)
        moved = renumbered(replica)
        replica.kill()
        replica.start()
        replica.wait_ready(90)
        # nothing was committed: the scoring stage reads the first copies again too
        wait_until(
            lambda: replica.value("ragmon_traces_processed_total") == 2 * len(turns),
            90,
            "the first copies and the traces assembled again scored",
        )
        rescored = replica.value("ragmon_traces_processed_total")
        turns_counted = replica.value("ragmon_turn_hallucination_ratio_count")
        unchanged = replica.value("ragmon_results_published_total", outcome="unchanged")
        _stop(replica)
    check_turns(pipeline, turns, "conv-crash")
    check_results(pipeline, turns)
    assembled = topic_records(pipeline.bootstrap, f"{pipeline.group}.otlp-traces")
    per_trace: dict[str, int] = {}
    for record in assembled:
        trace = json.loads(record.value)
        assert trace["assembly"]["revision"] == 1, "assembled anew: a first revision again"
        per_trace[trace["trace_id"]] = per_trace.get(trace["trace_id"], 0) + 1
    assert per_trace == {t.trace_id: 2 for t in turns}, "produced again after the crash"
    assert len(topic_records(pipeline.bootstrap, pipeline.results)) == len(turns) + moved
    assert unchanged == 2 * len(turns), "every re-scored result came out as stored"
    assert rescored == 2 * len(turns), "the re-scored traces count again in the new process"
    assert turns_counted == 0, "turns already in the store are not counted again"
