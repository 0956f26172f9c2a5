"""Single-replica mode (`kafka.single_replica`) through real `rag-monitor run` processes on the
real broker: OTLP exports in, results out, assembled in the process.

Spans are written unkeyed to partitions of their own choosing (the Collector's default), so a
trace's spans arrive in messages of different partitions; one consumer holds every partition,
so each trace is still assembled whole. Nothing is written to the spans or traces topics (they
are not even created), an export's offset is committed only once every trace it carried is
stored, and SIGKILL mid-stream loses no trace and stores none twice or from a fragment.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from opentelemetry.sdk.trace import ReadableSpan

from monitor.sinks.store import results_table
from tests.support.faults import committed_to_end, native_message, topic_records, wait_until
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import committed_offsets, create_topics, produce
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, Turn, exported_messages, langchain_turn
from tests.support.traces import native_trace
from tests.test_otlp_pipeline import (
    PARTITIONS,
    Pipeline,
    _stop,
    check_published,
    check_results,
    check_turns,
    renumbered,
    running,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SINGLE = {"RAGMON_KAFKA__SINGLE_REPLICA": "true"}


@pytest.fixture
def pipeline(kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path) -> Pipeline:
    pipeline = Pipeline(
        kafka_broker, topic_prefix, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", tmp_path
    )
    pipeline.env.update(SINGLE)
    return pipeline


def _topics(bootstrap: str) -> set[str]:
    async def names() -> set[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    return asyncio.run(names())


def _no_internal_topics(pipeline: Pipeline) -> None:
    internal = {f"{pipeline.group}.otlp-spans", f"{pipeline.group}.otlp-traces"}
    assert not internal & _topics(pipeline.bootstrap), "no internal topic was made or written"


def _conversations(count: int, start: int, rng: random.Random) -> list[Turn]:
    app = App()
    return [
        langchain_turn(
            app,
            n,
            session=f"conv-{n % 5}",
            start_ns=start + n * 20 * MS,
            llm_ns=rng.randint(50, 400) * MS,
        )
        for n in range(1, count + 1)
    ]


def test_spans_spread_over_partitions_are_scored_in_process_without_internal_topics(
    pipeline: Pipeline,
) -> None:
    out = pipeline.create_topics()
    assert "otlp-spans" not in out and "otlp-traces" not in out, out
    rng = random.Random(26)
    turns = _conversations(30, time.time_ns(), rng)
    messages = exported_messages(turns, "otlp_proto", spans_per_message=2)
    replica = pipeline.replica("single")
    with running(replica):
        pipeline.produce(messages, rng, pause=0.02)
        _wait_all_committed(pipeline, 90, "every export committed by the scoring group")
        moved = renumbered(replica)
        released = replica.value("ragmon_otlp_traces_released_total", outcome="complete")
        events = replica.log_events()
        _stop(replica)
    check_results(pipeline, turns)
    check_published(pipeline, turns, moved)
    for conversation in {f"conv-{t.n % 5}" for t in turns}:
        check_turns(pipeline, [t for t in turns if t.n % 5 == int(conversation[-1])], conversation)
    assert released == len(turns), "each trace released once, whole"
    assert topic_records(pipeline.bootstrap, pipeline.dlq) == []
    _no_internal_topics(pipeline)
    otlp_group = asyncio.run(committed_offsets(pipeline.bootstrap, f"{pipeline.group}.otlp"))
    assert otlp_group == {}, "no OTLP consumer group: one loop reads every topic"
    assert not [e for e in events if "single_replica" in str(e.get("event", ""))], events


def test_an_exports_offset_is_committed_only_once_every_trace_it_carried_is_stored(
    pipeline: Pipeline,
) -> None:
    """One export carries a whole trace and all but the LLM span of another: the first is
    scored, but the export's offset stays uncommitted until the second trace's last span comes
    (in a later message) and it is stored too."""
    pipeline.create_topics()
    app = App()
    start = time.time_ns()
    whole, waiting = (langchain_turn(app, n, session=None, start_ns=start + n * MS) for n in (1, 2))
    first = encode([*whole.spans, *waiting.early()], "otlp_proto")
    rest = encode(waiting.late(), "otlp_proto")
    replica = pipeline.replica("offsets", RAGMON_KAFKA__OTLP_ASSEMBLY_MAX_SECONDS="60")
    with running(replica):
        asyncio.run(produce(pipeline.bootstrap, pipeline.otlp, [first], partition=0))
        wait_until(
            lambda: replica.value("ragmon_traces_processed_total") == 1, 60, "the whole trace"
        )
        time.sleep(2.0)  # four commit intervals
        committed = asyncio.run(committed_offsets(pipeline.bootstrap, pipeline.group))
        assert committed.get((pipeline.otlp, 0), 0) == 0, "held for the trace still assembling"
        assert [r["trace_id"] for r in pipeline.rows(results_table, evaluator="heuristic")] == [
            whole.trace_id
        ]
        asyncio.run(produce(pipeline.bootstrap, pipeline.otlp, [rest], partition=1))
        _wait_all_committed(pipeline, 60, "both exports committed")
        _stop(replica)
    check_results(pipeline, [whole, waiting])


def test_a_second_replica_in_single_replica_mode_is_reported(
    pipeline: Pipeline,
) -> None:
    """The process cannot know from its settings how many replicas run; it knows from the
    consumer group: an assignment of part of its topics' partitions is logged as an error."""
    pipeline.create_topics()
    a, b = pipeline.replica("a"), pipeline.replica("b")
    with running(a, b):
        wait_until(
            lambda: a.value("ragmon_kafka_assigned_partitions") < PARTITIONS,
            60,
            "the partitions shared between the two",
        )

        def reported() -> bool:
            return any(
                "another process shares the consumer group" in str(e.get("event"))
                for replica in (a, b)
                for e in replica.log_events()
            )

        wait_until(reported, 30, "the error logged")
        _stop(a, b)


def test_spans_re_read_after_a_kill_of_a_trace_stored_whole_are_not_scored_as_a_fragment(
    pipeline: Pipeline,
) -> None:
    """The export that carried a trace's root and LLM span also carried the start of another
    trace, still assembling when the process was killed: read again by the next process, the
    first trace's root and LLM span would map to a trace without its retriever (its spans
    came in another partition's message, finished and committed). It is skipped as late
    spans; the whole trace's result stands."""
    pipeline.create_topics()
    app = App()
    start = time.time_ns()
    stored, waiting = (
        langchain_turn(app, n, session=f"conv-{n}", start_ns=start + n * MS) for n in (1, 2)
    )
    carrier = encode([*stored.late(), *waiting.early()], "otlp_proto")
    replica = pipeline.replica("crash", RAGMON_KAFKA__OTLP_ASSEMBLY_MAX_SECONDS="60")
    with running(replica):
        asyncio.run(produce(pipeline.bootstrap, pipeline.otlp, [carrier], partition=0))
        _send(pipeline, stored.early(), partition=1)
        wait_until(lambda: committed_to_end_of(pipeline, 1), 60, "the retriever's export")
        time.sleep(1.5)  # three commit intervals: the carrier's offset is read, not finished
        replica.kill()
        replica.start()
        replica.wait_ready(90)
        _send(pipeline, waiting.late(), partition=2)
        _wait_all_committed(pipeline, 60, "every export committed")
        skipped = replica.value("ragmon_traces_skipped_total", reason="otlp_late_spans")
        _stop(replica)
    check_results(pipeline, [stored, waiting])
    assert skipped == 1, "the first trace's spans read again: skipped, not scored"
    assert topic_records(pipeline.bootstrap, pipeline.dlq) == []


def _send(pipeline: Pipeline, spans: list[ReadableSpan], partition: int) -> None:
    """One export of these spans to one partition of the OTLP topic."""
    value = encode(spans, "otlp_proto")
    asyncio.run(produce(pipeline.bootstrap, pipeline.otlp, [value], partition=partition))


def _wait_all_committed(pipeline: Pipeline, seconds: float, what: str) -> None:
    """Until the scoring group has committed every message of the OTLP topic."""
    wait_until(
        lambda: committed_to_end(pipeline.bootstrap, pipeline.group, pipeline.otlp),
        seconds,
        what,
        interval=0.5,
    )


def committed_to_end_of(pipeline: Pipeline, partition: int) -> bool:
    committed = asyncio.run(committed_offsets(pipeline.bootstrap, pipeline.group))
    return committed.get((pipeline.otlp, partition), 0) >= 1


def test_sigkill_mid_stream_loses_nothing_and_stores_nothing_twice(
    pipeline: Pipeline,
) -> None:
    """Exports keep coming while the daemon is killed twice mid-stream and restarted: every
    trace is stored once, from its whole trace, every conversation numbered 1..N once, and
    nothing is dead-lettered (spans re-read after a kill that belong to a trace already stored
    are not scored again as a fragment)."""
    pipeline.create_topics()
    rng = random.Random(2626)
    turns = _conversations(90, time.time_ns(), rng)
    messages = exported_messages(turns, "otlp_proto", spans_per_message=3)
    # fragments re-read after a kill wait this long for their root before being skipped
    replica = pipeline.replica("killed", RAGMON_KAFKA__OTLP_ASSEMBLY_MAX_SECONDS="8")
    producing = threading.Thread(
        target=pipeline.produce, args=(messages, random.Random(7)), kwargs={"pause": 0.04}
    )
    with running(replica):
        producing.start()
        for kill in (1, 2):

            def scored(k: int = kill) -> bool:
                return replica.value("ragmon_traces_processed_total") >= 15 * k

            wait_until(
                scored,
                90,
                f"traces scored before kill {kill}",
                interval=0.1,
            )
            replica.kill()
            replica.start()
            replica.wait_ready(90)
        producing.join(120)
        assert not producing.is_alive()
        _wait_all_committed(pipeline, 120, "every export committed")
        _stop(replica)
    check_results(pipeline, turns)  # every trace once, whole (no fragment stored over it)
    for k in range(5):
        check_turns(pipeline, [t for t in turns if t.n % 5 == k], f"conv-{k}")
    assert topic_records(pipeline.bootstrap, pipeline.dlq) == []
    _no_internal_topics(pipeline)


def test_native_traces_and_otlp_share_the_one_loop(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """A native topic beside the OTLP one: both read by the one consumer group."""
    pipeline = Pipeline(
        kafka_broker, topic_prefix, f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", tmp_path
    )
    native = f"{topic_prefix}.native"
    pipeline.env.update({**SINGLE, "RAGMON_KAFKA__TOPICS": f'["{native}"]'})
    pipeline.create_topics()
    asyncio.run(create_topics(pipeline.bootstrap, [native], partitions=2))
    natives = [native_trace(1000 + n) for n in range(5)]
    rng = random.Random(3)
    turns = _conversations(5, time.time_ns(), rng)
    replica = pipeline.replica("mixed")
    with running(replica):
        keyed = [native_message(t) for t in natives]
        asyncio.run(
            produce(
                pipeline.bootstrap, native, [v for _, v, _ in keyed], keys=[k for k, _, _ in keyed]
            )
        )
        pipeline.produce(exported_messages(turns, "otlp_json", spans_per_message=4), rng)
        wait_until(lambda: replica.value("ragmon_traces_processed_total") == 10, 60, "ten traces")
        _stop(replica)
    stored = {r["trace_id"] for r in pipeline.rows(results_table, evaluator="heuristic")}
    assert stored == {t.trace_id for t in turns} | {str(t["trace_id"]) for t in natives}
    _no_internal_topics(pipeline)


def test_a_backlog_past_the_assemblers_bound_is_read_as_traces_settle_and_none_is_shed(
    pipeline: Pipeline,
) -> None:
    """A restart after an outage finds the exports of 300 turns waiting, each turn's spans
    spread over consecutive exports (as an SDK exports them), and the assembler bounded to 40
    traces. Reading them all at once would release traces before they were whole (shed at
    `pending_limit`); the stage reads only as traces settle and leave, so each is released once,
    whole, and the backlog waits in Kafka meanwhile (the pause is counted)."""
    pipeline.create_topics()
    turns = _conversations(300, time.time_ns(), random.Random(2026))
    messages = exported_messages(turns, "otlp_proto", spans_per_message=6)
    asyncio.run(produce(pipeline.bootstrap, pipeline.otlp, messages, partition=0))
    replica = pipeline.replica(
        "backlog",
        RAGMON_KAFKA__OTLP_MAX_PENDING_TRACES="40",
        RAGMON_KAFKA__OTLP_ASSEMBLY_SETTLE_SECONDS="0.3",
    )
    with running(replica):
        _wait_all_committed(pipeline, 120, "the backlog committed")
        released = replica.value("ragmon_otlp_traces_released_total", outcome="complete")
        shed = replica.value("ragmon_otlp_assembly_shed_total", reason="pending_limit")
        paused = replica.value("ragmon_otlp_assembly_paused_seconds_total")
        _stop(replica)
    assert shed == 0, "no trace released before it was whole"
    assert released == len(turns), "each trace released once, whole"
    assert paused > 0, "reading waited for room"
    check_results(pipeline, turns)
    assert topic_records(pipeline.bootstrap, pipeline.dlq) == []
