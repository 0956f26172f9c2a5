"""GenAI content sent as OTLP logs, through the real daemon on a real Kafka broker.

The telemetry comes from the real OpenTelemetry SDK and opentelemetry-util-genai's
TelemetryHandler (what opentelemetry-instrumentation-openai-v2 records), encoded with the real
OTLP encoders as the Collector's Kafka exporter writes them: spans to one topic, logs to another
(`kafka.otlp_logs_topics`). With `event_only` capture the spans carry no prompt or answer; the
daemon joins the log records to their spans. The spans of a turn are complete before its log
records arrive here, so the trace must wait for them instead of being dead-lettered.

Also here: plain LLM calls (`kafka.otlp_score_plain_llm_calls`), skipped by default and scored
when the setting says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.sinks.store import Store, results_table, turns_table
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce, read_all
from tests.support.otlp_spans import FORMATS, Fmt, serialize
from tests.support.traces import RunningDaemon, scoring_settings, wait_for
from tests.test_otlp_logs import serialize_logs

pytestmark = pytest.mark.kafka

SERVICE = "support-bot"
CONVERSATION = "conv-logs"
TURNS = [
    (
        "How long is the refund window?",
        "Refunds are accepted within 30 days of delivery.",
        "Refunds are accepted within 30 days of delivery. Shipping takes two days.",
    ),
    (
        "And how long does shipping take?",
        "Shipping takes two business days.",
        "Orders ship within two business days of payment.",
    ),
]
LOGS_LATE_SECONDS = 3.0  # the spans are complete (and settled) well before the logs arrive


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    logs: InMemoryLogRecordExporter
    handler: TelemetryHandler

    def span_message(self, fmt: Fmt) -> bytes:
        return serialize(encode_spans(self.spans.get_finished_spans()), fmt)

    def log_message(self, fmt: Fmt) -> bytes:
        return serialize_logs(encode_logs(self.logs.get_finished_logs()), fmt)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    resource = Resource.create({"service.name": SERVICE})
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    handler = TelemetryHandler(tracer_provider=tracer_provider, logger_provider=logger_provider)
    yield Telemetry(spans, logs, handler)
    tracer_provider.shutdown()
    logger_provider.shutdown()


def rag_turn(handler: TelemetryHandler, question: str, answer: str, context: str) -> None:
    """One RAG turn as util-genai records it: workflow, retrieval, inference."""
    workflow = handler.workflow("support_answer")
    workflow.attributes["gen_ai.conversation.id"] = CONVERSATION
    workflow.input_messages = [InputMessage(role="user", parts=[Text(content=question)])]
    with handler.retrieval(data_source_id="kb") as retrieval:
        retrieval.query_text = question
        retrieval.top_k = 2
        retrieval.documents = [{"id": "kb-1", "score": 0.9, "content": context}]
    with handler.inference("openai", request_model="gpt-4o-mini") as inference:
        inference.input_messages = [
            InputMessage(role="system", parts=[Text(content=f"Context: {context}")]),
            InputMessage(role="user", parts=[Text(content=question)]),
        ]
        inference.output_messages = [
            OutputMessage(role="assistant", parts=[Text(content=answer)], finish_reason="stop")
        ]
    workflow.output_messages = [
        OutputMessage(role="assistant", parts=[Text(content=answer)], finish_reason="stop")
    ]
    workflow.stop()


def plain_llm_call(handler: TelemetryHandler, question: str, answer: str) -> None:
    """A title call: one inference, no retrieval, no workflow."""
    with handler.inference("openai", request_model="gpt-4o-mini") as inference:
        inference.input_messages = [InputMessage(role="user", parts=[Text(content=question)])]
        inference.output_messages = [
            OutputMessage(role="assistant", parts=[Text(content=answer)], finish_reason="stop")
        ]


def _settings(
    broker: KafkaBroker, prefix: str, db: Path, *, logs: bool = True, **kafka: Any
) -> Settings:
    return scoring_settings(
        broker.bootstrap,
        prefix,
        db,
        results_topic=f"{prefix}.results",
        kafka={
            "topics": [],
            "otlp_topics": [f"{prefix}.otlp"],
            "otlp_logs_topics": [f"{prefix}.logs"] if logs else [],
            "otlp_assembly_settle_seconds": 0.2,
            "otlp_assembly_max_seconds": 30,
            "otlp_late_span_grace_seconds": 30,
            **kafka,
        },
    )


async def _topics(broker: KafkaBroker, prefix: str) -> None:
    names = ["otlp", "logs", "dlq", "results"]
    await create_topics(broker.bootstrap, [f"{prefix}.{n}" for n in names])


async def _start_daemon(
    broker: KafkaBroker, prefix: str, db: Path, **settings: Any
) -> tuple[Daemon, RunningDaemon]:
    """The test's topics created, then a daemon reading them, started."""
    await _topics(broker, prefix)
    daemon = Daemon(
        _settings(broker, prefix, db, **settings), SourceSpec("kafka"), registry=CollectorRegistry()
    )
    running = RunningDaemon(daemon)
    await running.started()
    return daemon, running


async def _results(db: Path, evaluator: str = "heuristic") -> dict[str, Any]:
    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    try:
        rows = await store.select_rows(results_table, evaluator=evaluator)
        turns = await store.select_rows(turns_table)
    finally:
        await store.close()
    turn_of = {row["trace_id"]: row["turn"] for row in turns}
    return {
        row["query"]: {
            **json.loads(row["result"]),
            "answer": row["answer"],
            "stored_turn": turn_of.get(row["trace_id"]),
        }
        for row in rows
    }


@pytest.mark.parametrize("fmt", FORMATS)
async def test_event_only_content_waits_for_its_log_records_and_joins_its_spans(
    fmt: Fmt,
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "event_only")
    for question, answer, context in TURNS:
        rag_turn(telemetry.handler, question, answer, context)
    db = tmp_path / "r.db"
    daemon, running = await _start_daemon(kafka_broker, topic_prefix, db)
    value = daemon.metrics.registry.get_sample_value
    try:
        await produce(kafka_broker.bootstrap, f"{topic_prefix}.otlp", [telemetry.span_message(fmt)])
        await wait_for(
            lambda: (value("ragmon_otlp_assembly_traces", {"state": "pending"}) or 0) == 2,
            30,
            "both traces assembled from their spans",
        )
        await asyncio.sleep(LOGS_LATE_SECONDS)
        # complete by their spans, settled, yet neither scored nor dead-lettered: waiting
        assert value("ragmon_traces_processed_total", {"agent": SERVICE, "outcome": "ok"}) is None
        assert value("ragmon_dead_letters_total", {"reason": "otlp_unmappable"}) == 0
        assert value("ragmon_otlp_assembly_traces", {"state": "pending"}) == 2
        await produce(kafka_broker.bootstrap, f"{topic_prefix}.logs", [telemetry.log_message(fmt)])
        await wait_for(
            lambda: (
                value("ragmon_traces_processed_total", {"agent": SERVICE, "outcome": "ok"}) == 2
            ),
            30,
            "both turns scored once their log records arrived",
        )
    finally:
        assert await running.stop() == 0

    results = await _results(db)
    assert set(results) == {question for question, _, _ in TURNS}, "the question, never a prompt"
    for turn, (question, answer, _) in enumerate(TURNS, start=1):
        result = results[question]
        assert result["answer"] == answer
        assert result["conversation_id"] == CONVERSATION
        assert result["turn"] == turn and result["stored_turn"] == turn
        assert result["agent"] == SERVICE
        # event_only records no retrieval documents at all: measured as without text
        assert "contexts_without_text" in result["flags"]
        assert result["scores"]["faithfulness"] == {
            "value": None,
            "reason": "contexts_without_text",
        }
        assert "incomplete_trace" not in result["flags"]
    assert value("ragmon_dead_letters_total", {"reason": "otlp_unmappable"}) == 0
    assert value("ragmon_otlp_traces_released_total", {"outcome": "complete"}) == 2
    assert value("ragmon_otlp_traces_released_total", {"outcome": "revised"}) == 0


async def test_without_a_logs_topic_event_only_traces_are_dead_lettered_at_once(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No logs topic configured: nothing can bring the content, so nothing waits for it."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "event_only")
    question, answer, context = TURNS[0]
    rag_turn(telemetry.handler, question, answer, context)
    await _topics(kafka_broker, topic_prefix)
    daemon = Daemon(
        _settings(kafka_broker, topic_prefix, tmp_path / "r.db", logs=False),
        SourceSpec("kafka"),
        registry=CollectorRegistry(),
    )
    value = daemon.metrics.registry.get_sample_value
    running = RunningDaemon(daemon)
    await running.started()
    try:
        await produce(
            kafka_broker.bootstrap, f"{topic_prefix}.otlp", [telemetry.span_message("otlp_proto")]
        )
        await wait_for(
            lambda: value("ragmon_dead_letters_total", {"reason": "otlp_unmappable"}) == 1,
            15,  # far less than the 30 s assembly maximum
            "the unmappable trace dead-lettered",
        )
    finally:
        assert await running.stop() == 0
    (dead,) = await read_all(kafka_broker.bootstrap, f"{topic_prefix}.dlq", 1)
    assert b"no_answer" in dict(dead.headers)["ragmon.error.message"]


async def test_log_records_repeating_what_the_spans_say_do_not_rescore(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`span_and_event` capture: the spans carry the content, the log records repeat it. The
    trace is scored from its spans; its log records, arriving after, change nothing, so it is
    neither produced nor scored again."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_and_event")
    for question, answer, context in TURNS:
        rag_turn(telemetry.handler, question, answer, context)
    assert telemetry.logs.get_finished_logs(), "span_and_event sends log records too"
    db = tmp_path / "r.db"
    daemon, running = await _start_daemon(kafka_broker, topic_prefix, db)
    value = daemon.metrics.registry.get_sample_value
    try:
        await produce(
            kafka_broker.bootstrap, f"{topic_prefix}.otlp", [telemetry.span_message("otlp_json")]
        )
        await wait_for(
            lambda: (
                value("ragmon_traces_processed_total", {"agent": SERVICE, "outcome": "ok"}) == 2
            ),
            30,
            "both turns scored from their spans",
        )
        await produce(
            kafka_broker.bootstrap, f"{topic_prefix}.logs", [telemetry.log_message("otlp_json")]
        )
        await wait_for(
            lambda: value("ragmon_messages_consumed_total", {"topic": f"{topic_prefix}.logs"}) == 1,
            30,
            "the log records read",
        )
        await asyncio.sleep(3)  # their parts through the spans topic and the assembler
    finally:
        assert await running.stop() == 0
    assert value("ragmon_traces_processed_total", {"agent": SERVICE, "outcome": "ok"}) == 2
    assert value("ragmon_otlp_traces_released_total", {"outcome": "revised"}) == 0
    assert value("ragmon_otlp_assembly_traces", {"state": "kept"}) == 2, "still remembered"
    records = await read_all(kafka_broker.bootstrap, f"{topic_prefix}.results", 3, timeout=5)
    assert len(records) == 2, "one result per trace, never re-published"
    results = await _results(db)
    assert [results[q]["turn"] for q, _, _ in TURNS] == [1, 2]
    assert all("contexts_without_text" not in results[q]["flags"] for q, _, _ in TURNS)


@pytest.mark.parametrize("score_plain", [False, True])
async def test_plain_llm_calls_are_skipped_unless_the_setting_scores_them(
    score_plain: bool,
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    plain_llm_call(telemetry.handler, "Give this chat a title.", "Refund window question")
    question, answer, context = TURNS[0]
    rag_turn(telemetry.handler, question, answer, context)
    db = tmp_path / "r.db"
    daemon, running = await _start_daemon(
        kafka_broker, topic_prefix, db, logs=False, otlp_score_plain_llm_calls=score_plain
    )
    value = daemon.metrics.registry.get_sample_value
    try:
        await produce(
            kafka_broker.bootstrap, f"{topic_prefix}.otlp", [telemetry.span_message("otlp_proto")]
        )
        scored = 2 if score_plain else 1
        await wait_for(
            lambda: (
                value("ragmon_traces_processed_total", {"agent": SERVICE, "outcome": "ok"})
                == scored
                and value("ragmon_otlp_traces_released_total", {"outcome": "complete"}) == 2
            ),
            30,
            f"{scored} traces scored",
        )
    finally:
        assert await running.stop() == 0
    results = await _results(db)
    assert value("ragmon_traces_skipped_total", {"reason": "otlp_not_rag"}) == (
        0 if score_plain else 1
    )
    assert results[question]["answer"] == answer
    if score_plain:
        title = results["Give this chat a title."]
        assert title["answer"] == "Refund window question"
        assert "no_contexts" in title["flags"]
    else:
        assert set(results) == {question}
