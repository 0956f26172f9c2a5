"""Real instrumentation -> real OpenTelemetry Collector -> real Kafka -> the daemon.

Each test runs a small RAG app (tests/apps) instrumented with one family's real packages
(OpenInference; OpenTelemetry GenAI; OpenLLMetry's decorators, its LangChain instrumentation
on a `BaseRetriever` chain in two versions, and its LlamaIndex instrumentation): it
answers multi-turn conversations with the real `openai` client against the scripted
OpenAI-compatible server and exports OTLP/HTTP to a Collector built by
scripts/setup-otelcol.sh (examples/otel-collector/config.yaml), whose Kafka exporter writes to
the test broker in protobuf or OTLP/JSON (spans to one topic, logs to another). The daemon
consumes both with the LLM judge on every conversation. For every planned turn the test checks
what reached the store (question, answer, conversation, turn number) and what the judge was
shown and what the OTLP stage handed to scoring (the contexts, ids and text), that nothing
else was scored (stray LLM calls are skipped as not RAG),
and that invented answers score lower than grounded ones -- or, where the instrumentation
records documents without their text, that faithfulness is unmeasured with the reason
`contexts_without_text`.

GenAI `event_only` capture puts no content on the spans at all: the prompts and answers come as
OTLP log records on the Collector's logs topic (`kafka.otlp_logs_topics`), which the daemon
joins to their spans; without that every such trace was dead-lettered `otlp_unmappable`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config import KafkaConfig
from monitor.daemon import Daemon, SourceSpec
from monitor.formats.native import decode_native
from monitor.formats.otlp import OtlpMappingError, decode_otlp, spans_to_trace
from tests.support.instrumented import (
    TITLE_ANSWER,
    AppRun,
    model_script,
    plan_turns,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, read_all
from tests.support.openai_server import OpenAIServer
from tests.support.otelcol import CollectorUnavailable, Encoding, OtelCollector
from tests.support.services import service_unavailable
from tests.support.traces import RunningDaemon, scoring_settings, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# The answers the scripted model invents (the rest are grounded in the retrieved documents).
INVENTED = {("kettle", 2), ("storage", 1), ("returns", 2)}
SERVICE = "support-bot"
TURN_GAP_SECONDS = 3.0
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class Family:
    app: str
    encoding: Encoding
    env: dict[str, str] = field(default_factory=dict)
    documents_with_text: bool = True
    old_traceloop: bool = False
    content_in_logs: bool = False  # event_only: prompts and answers only as OTLP log records


FAMILIES = {
    "openinference-proto": Family("openinference_app", "otlp_proto"),
    "openinference-json": Family("openinference_app", "otlp_json"),
    "genai-span-only-json": Family(
        "genai_app",
        "otlp_json",
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"},
    ),
    "genai-documents-without-text-proto": Family(
        "genai_app",
        "otlp_proto",
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"},
        documents_with_text=False,
    ),
    # event_only records no retrieval documents either: contexts are without text
    "genai-event-only-proto": Family(
        "genai_app",
        "otlp_proto",
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only"},
        documents_with_text=False,
        content_in_logs=True,
    ),
    "genai-event-only-json": Family(
        "genai_app",
        "otlp_json",
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only"},
        documents_with_text=False,
        content_in_logs=True,
    ),
    "traceloop-current-json": Family("traceloop_app", "otlp_json"),
    "traceloop-0.52-proto": Family("traceloop_app", "otlp_proto", old_traceloop=True),
    # a LangChain BaseRetriever chain, the conversation as run metadata: 0.62.4 records a
    # vector_db_retrieve span, 0.52.6 only the chain steps the documents pass through
    "traceloop-langchain-retriever-json": Family("langchain_retriever_app", "otlp_json"),
    "traceloop-0.52-langchain-retriever-proto": Family(
        "langchain_retriever_app", "otlp_proto", old_traceloop=True
    ),
    "traceloop-llamaindex-proto": Family("llamaindex_app", "otlp_proto"),
}
# Apps that make one plain LLM call per conversation outside any turn (a title), each its own
# trace: skipped as not RAG.
TITLE_CALLS_AS_TRACES = {"langchain_retriever_app", "llamaindex_app"}


def _fast_assembly() -> dict[str, Any]:
    """Close the OTLP assembly window soon after a turn's spans arrived, so that turns of one
    conversation (exported TURN_GAP_SECONDS apart) are released one at a time. Only where the
    setting exists: a daemon that releases a trace once it is complete needs none."""
    if "otlp_assembly_window_seconds" in KafkaConfig.model_fields:
        return {"otlp_assembly_window_seconds": 1.5}
    return {}


@pytest.fixture
def collector_factory(tmp_path: Path, otelcol_binary: Path) -> Iterator[Any]:
    started: list[OtelCollector] = []

    def start(brokers: str, spans: str, logs: str, encoding: Encoding) -> OtelCollector:
        collector = OtelCollector(
            tmp_path / f"otelcol-{len(started)}", brokers, spans, logs, encoding
        )
        try:
            collector.start()
        except CollectorUnavailable as exc:
            service_unavailable(f"OpenTelemetry Collector unavailable: {exc}")
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.stop()


@pytest.fixture
def model() -> Iterator[OpenAIServer]:
    """The scripted model, on a loop of its own: the app's and the judge's calls reach it
    whichever event loop the test runs on."""
    server = OpenAIServer()
    server.start_in_thread()
    yield server
    server.stop_in_thread()


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def _judged_contexts(server: OpenAIServer) -> dict[str, list[str]]:
    """Question -> the context texts the judge was shown (faithfulness requests)."""
    shown: dict[str, list[str]] = {}
    for request in server.requests_for("ragmon_faithfulness"):
        data = request.data or {}
        shown[data["question"]] = [
            " ".join(c["sentences"][k] for k in sorted(c["sentences"], key=int))
            for c in data["contexts"]
        ]
    return shown


@pytest.mark.parametrize("name", list(FAMILIES))
async def test_instrumented_app_through_the_collector(
    name: str,
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    collector_factory: Any,
    model: OpenAIServer,
    old_traceloop_python: Path,
) -> None:
    family = FAMILIES[name]
    python = old_traceloop_python if family.old_traceloop else None
    spans_topic, logs_topic = f"{topic_prefix}.in", f"{topic_prefix}.logs"
    await create_topics(kafka_broker.bootstrap, [spans_topic, logs_topic, f"{topic_prefix}.dlq"])
    collector = collector_factory(kafka_broker.bootstrap, spans_topic, logs_topic, family.encoding)
    turns = plan_turns(topic_prefix, INVENTED)
    model.script = model_script(turns)
    db = tmp_path / "results.db"
    settings = scoring_settings(
        kafka_broker.bootstrap,
        topic_prefix,
        db,
        kafka={**_fast_assembly(), "otlp_logs_topics": [logs_topic]},
        judge={"base_url": model.url, "api_key": "test-key", "max_retries": 0},
        sampling={"rate": 1.0},
    )
    daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
    running = RunningDaemon(daemon)
    await running.started()
    run = AppRun(
        app=family.app,
        service=SERVICE,
        turns=turns,
        otlp_endpoint=collector.http_endpoint,
        openai_base_url=model.url,
        workdir=tmp_path,
        turn_gap_seconds=TURN_GAP_SECONDS,
        documents_with_text=family.documents_with_text,
        env=family.env,
        python=python,
    )
    try:
        await asyncio.to_thread(run.run)
        await wait_for(
            lambda: (
                len(_rows(db, "SELECT 1 FROM conversation_turns")) >= len(turns)
                and len(_rows(db, "SELECT 1 FROM evaluation_results WHERE evaluator = 'llm'"))
                >= len(turns)
            ),
            timeout=90,
            what=f"{len(turns)} turns scored by tier 0 and the judge",
        )
    finally:
        assert await running.stop() == 0, collector.log_tail()

    results = {
        row[0]: row
        for row in _rows(
            db,
            "SELECT trace_id, conversation_id, query, answer, result FROM evaluation_results"
            " WHERE evaluator = 'heuristic'",
        )
    }
    turn_of = {
        trace_id: (conversation, turn)
        for conversation, turn, trace_id in _rows(
            db, "SELECT conversation_id, turn, trace_id FROM conversation_turns"
        )
    }
    assert len(results) == len(turns), "one result per turn: stray LLM calls are not turns"
    by_question = {row[2]: row for row in results.values()}
    assert set(by_question) == {t.question for t in turns}, "the question, never the prompt"
    shown = _judged_contexts(model)
    scores: dict[bool, list[float]] = {True: [], False: []}
    for planned in turns:
        trace_id, conversation, _, answer, result_json = by_question[planned.question]
        assert answer == planned.answer
        assert conversation == planned.conversation
        assert turn_of[trace_id] == (planned.conversation, planned.turn)
        result = json.loads(result_json)
        assert result["agent"] == SERVICE, "the service, never a framework class name"
        faithfulness = result["scores"]["faithfulness"]
        if family.documents_with_text:
            assert shown[planned.question] == [text for _, text in planned.contexts]
            scores[planned.grounded].append(result["scores"]["support"]["value"])
        else:
            assert planned.question not in shown, "no faithfulness call without document text"
            assert faithfulness == {"value": None, "reason": "contexts_without_text"}
            assert "contexts_without_text" in result["flags"]
    if family.documents_with_text:
        assert max(scores[False]) < min(scores[True]), scores

    value = daemon.metrics.registry.get_sample_value
    skipped = value("ragmon_traces_skipped_total", {"reason": "otlp_not_rag"}) or 0.0
    if family.app == "openinference_app":
        # one title call per conversation, and OpenInference's own trace of every ChatOpenAI
        # call's OpenAI request (it carries the session, but is a plain LLM call)
        assert skipped == 3 + len(turns)
    if family.app in TITLE_CALLS_AS_TRACES:
        assert skipped == 3, "one title call per conversation"
    assert TITLE_ANSWER not in {row[3] for row in results.values()}
    assert value("ragmon_dead_letters_total", {"reason": "otlp_unmappable"}) == 0.0
    if not family.documents_with_text:
        labels = {
            "agent": SERVICE,
            "metric": "faithfulness",
            "evaluator": "heuristic",
            "reason": "contexts_without_text",
        }
        assert value("ragmon_evaluation_unmeasured_total", labels) == len(turns)
        assert value(
            "ragmon_evaluation_flags_total", {"agent": SERVICE, "reason": "contexts_without_text"}
        ) == len(turns)
    assembled = await read_all(
        kafka_broker.bootstrap, settings.kafka.effective_traces_topic, 10**6, timeout=5
    )
    traces = {t.query: t for t in (decode_native(r.value, assembled=True) for r in assembled)}
    assert len(assembled) == len(turns) and set(traces) == {t.question for t in turns}
    for planned in turns:
        # What the OTLP stage handed to scoring, exactly: the retrieved documents, with their
        # ids and text, once each and in order (or counted as without text).
        trace = traces[planned.question]
        if family.documents_with_text:
            assert [(c.id, c.text) for c in trace.contexts] == planned.contexts
            assert trace.contexts_without_text is None
        else:
            assert trace.contexts == []
            assert trace.contexts_without_text == len(planned.document_ids)
    if family.content_in_logs:
        # The spans alone say a model answered, but not what: the content came only as log
        # records, read from the logs topic and joined to the spans.
        assert (value("ragmon_messages_consumed_total", {"topic": logs_topic}) or 0) > 0
        span_messages = await read_all(kafka_broker.bootstrap, spans_topic, 10**6, timeout=5)
        by_trace: dict[str, list[Any]] = {}
        for message in span_messages:
            for span in decode_otlp(message.value, family.encoding):
                by_trace.setdefault(span.trace_id, []).append(span)
        assert set(by_trace) == set(results)
        for group in by_trace.values():
            with pytest.raises(OtlpMappingError) as caught:
                spans_to_trace(group)
            assert caught.value.reason == "no_answer"
        # Question and answer came from the log records, each trace produced once.
        for planned in turns:
            trace = traces[planned.question]
            assert (trace.answer, trace.conversation_id) == (planned.answer, planned.conversation)


async def test_native_producer_example(kafka_broker: KafkaBroker, topic_prefix: str) -> None:
    """examples/produce_native.py, run as the README says, writes a valid native trace keyed by
    its conversation."""
    topic = f"{topic_prefix}.native"
    await create_topics(kafka_broker.bootstrap, [topic])
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "produce_native.py"), kafka_broker.bootstrap, topic
    )
    assert await asyncio.wait_for(process.wait(), 60) == 0
    (record,) = await read_all(kafka_broker.bootstrap, topic, 1)
    trace = decode_native(record.value)
    assert trace.conversation_id is not None
    assert record.key == trace.conversation_id.encode()
    assert trace.contexts and trace.answer and trace.query
