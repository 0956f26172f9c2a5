"""The typed hand-offs between stages: the assembly record a trace carries from the assemble
stage to the score stage, the router's one size check and format decision, and conversation
state kept per partition (a rebalance forgets only what moved)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from monitor.config import KafkaConfig
from monitor.config.conversation import ConversationConfig
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.faults import owned_while
from monitor.formats.errors import DecodeError
from monitor.formats.native import decode_native
from monitor.messages import RawMessage
from monitor.metrics import AgentLabels
from monitor.models import AssemblyRecord
from monitor.stages.conversation import ConversationMetrics, ConversationTracker
from monitor.stages.conversation_state import start_micros
from monitor.stages.router import ASSEMBLE, REKEY, SCORE, Router
from monitor.stages.scoring import incomplete, revision
from monitor.times import datetime_from_ns, micros, micros_from_ns, millis_from_ns
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import langchain_turn
from tests.support.traces import make_trace, native_trace

START_NS = 1_764_230_400_123_456_789  # 2025-11-27T08:00:00.123456789Z


def test_time_conversions_are_exact_to_the_microsecond() -> None:
    moment = datetime_from_ns(START_NS)
    assert moment == datetime(2025, 11, 27, 8, 0, 0, 123456, tzinfo=UTC)
    assert micros(moment) == micros_from_ns(START_NS) == START_NS // 1000
    assert millis_from_ns(1_500_000) == 1.5
    with pytest.raises(ValueError, match="not a representable time"):
        datetime_from_ns(10**30)


def test_the_assembly_record_travels_on_the_traces_topic_and_says_what_scoring_reads() -> None:
    trace = make_trace("q?", ["c"], "a").model_copy(
        update={"assembly": AssemblyRecord(start_ns=START_NS, complete=False, revision=2)}
    )
    wire = trace.model_dump_json().encode()
    assert json.loads(wire)["assembly"] == {"start_ns": START_NS, "complete": False, "revision": 2}
    back = decode_native(wire, assembled=True)
    assert back.assembly == trace.assembly
    assert revision(back) == 2 and incomplete(back)
    assert start_micros(back) == START_NS // 1000, "turns are numbered by the root span's start"
    plain = make_trace("q?", ["c"], "a")
    assert revision(plain) == 1 and not incomplete(plain)
    assert start_micros(plain) == micros(plain.timestamp)


def test_a_native_producer_cannot_set_the_assembly_record() -> None:
    value = json.dumps({**native_trace(1), "assembly": {"revision": 3}}).encode()
    with pytest.raises(DecodeError) as caught:
        decode_native(value)
    assert caught.value.reason == "schema_violation"
    assert "assembly" in caught.value.detail


def test_a_trace_assembled_by_an_older_version_has_its_metadata_lifted() -> None:
    """A rolling upgrade leaves traces on the traces topic whose assembly facts are metadata
    strings: they are read as the record, and the strings are gone."""
    old = {
        **native_trace(1),
        "metadata": {
            "source": "otlp",
            "started_at": "2025-11-27T08:00:00.123456+00:00",
            "incomplete_trace": True,
            "revision": 2,
        },
    }
    trace = decode_native(json.dumps(old).encode(), assembled=True)
    assert trace.assembly == AssemblyRecord(
        start_ns=START_NS // 1000 * 1000, complete=False, revision=2
    )
    assert trace.metadata == {"source": "otlp"}


def _message(topic: str, value: bytes | None, offset: int = 0) -> RawMessage:
    return RawMessage(topic, 0, offset, None, value)


def test_the_router_checks_size_once_and_decides_the_format() -> None:
    config = KafkaConfig(
        topics=["in"],
        otlp_topics=["otlp"],
        group_id="g",
        max_message_bytes=20_000,
        otlp_logs_topics=["logs"],
    )
    router = Router.of(config)
    app = App()
    otlp = encode(langchain_turn(app, 1, session="s", start_ns=START_NS).spans, "otlp_proto")
    native = json.dumps(native_trace(1)).encode()
    spans, traces = config.effective_spans_topic, config.effective_traces_topic
    batch = [
        _message("in", native, 0),
        _message("in", otlp, 1),
        _message("in", b"x" * 20_001, 2),
        _message(spans, b"y" * 50_000, 3),  # written by this daemon: not checked again
        _message(traces, native, 4),
        _message("logs", b'{"resourceLogs": []}', 5),
        _message("in", b'{"resourceLogs": []}', 6),  # a logs export among spans
    ]
    routes = router.route(batch)
    assert [(m.offset, e.reason) for m, e in routes.rejected] == [(2, "too_large")]
    to = {
        stage: [(r.message.offset, r.format, r.logs) for r in got]
        for stage, got in routes.to.items()
    }
    assert to == {
        SCORE: [(0, "native", False), (4, "native", False)],
        REKEY: [(1, "otlp_proto", False), (5, "otlp_json", True), (6, "otlp_json", True)],
        ASSEMBLE: [(3, "otlp_proto", False)],
    }
    assert all(r.internal for r in routes.to[ASSEMBLE])
    # The OTLP consumer sends natives to be keyed by conversation first.
    assert Router.of(config, natives_to=REKEY).classify(batch[0])[0] == REKEY  # type: ignore[index]
    # Lines of a file are never protobuf: bytes that are not JSON go to the native decoder.
    lines = Router.of(config, text_lines=True)
    assert lines.classify(_message("in", b"\x0a\x02hi"))[0] == SCORE  # type: ignore[index]


async def test_a_rebalance_forgets_only_the_conversations_of_the_revoked_partitions() -> None:
    registry = CollectorRegistry()
    tracker = ConversationTracker(
        ConversationConfig(), ConversationMetrics(registry, AgentLabels(10))
    )
    tier0 = HeuristicEvaluator()
    kept_tp, moved_tp = TopicPartition("in", 0), TopicPartition("in", 1)
    for tp, conversation in ((kept_tp, "kept"), (moved_tp, "moved")):
        for turn in (1, 2):
            trace = make_trace(
                "q?", ["c"], "a", trace_id=f"{conversation}-{turn}", conversation_id=conversation
            )
            with owned_while(lambda: True, (tp,)):
                await tracker.observe(trace, tier0.evaluate(trace))
    assert len(tracker) == 2
    assert tracker.forget_partitions({moved_tp}) == 1
    assert len(tracker) == 1
    assert registry.get_sample_value("ragmon_conversations_active") == 1.0
    # The kept conversation goes on where it was: its next trace is turn 3.
    third = make_trace("q?", ["c"], "a", trace_id="kept-3", conversation_id="kept")
    with owned_while(lambda: True, (kept_tp,)):
        async with tracker.turn(third) as turn:
            assert turn is not None and turn.number == 3
