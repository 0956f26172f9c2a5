"""`rag-monitor run --source file:` with OTLP/JSON lines: assembled in process, scored, stored."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

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

from monitor.formats.otlp_split import encode_request, split_by_trace
from tests.support.faults import REPO, DaemonProcess, wait_until
from tests.support.otlp_spans import App, encode, serialize
from tests.support.otlp_turns import MS, langchain_turn
from tests.test_otlp_logs import serialize_logs

EVENT_QUESTION = "How long is the refund window?"
EVENT_ANSWER = "Refunds are accepted within 30 days of delivery."
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def test_otlp_lines_are_assembled_in_process_and_numbered_by_start(tmp_path: Path) -> None:
    app = App()
    start = time.time_ns()
    first, second, third = (
        langchain_turn(app, n, session="conv-file", start_ns=start + n * MS, llm_ns=ms * MS)
        for n, ms in ((1, 900), (2, 100), (3, 500))
    )
    unanswered = langchain_turn(app, 4, session=None, start_ns=start, answered=False)
    lines = [
        encode([*second.spans, *first.early(), *unanswered.spans], "otlp_json"),  # three traces
        encode(third.spans, "otlp_json"),
        encode(first.late(), "otlp_json"),  # the slow LLM call of the first turn, exported last
    ]
    source = tmp_path / "spans.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    database = tmp_path / "r.db"
    env = {
        **DaemonProcess({}, tmp_path).env,
        "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--source", f"file:{source}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(database) as db:
        turns = dict(db.execute("SELECT turn, trace_id FROM conversation_turns").fetchall())
        stored = {
            trace_id: (query, answer, json.loads(document))
            for trace_id, query, answer, document in db.execute(
                "SELECT trace_id, query, answer, result FROM evaluation_results"
            )
        }
    assert turns == {1: first.trace_id, 2: second.trace_id, 3: third.trace_id}
    for turn in (first, second, third):
        query, answer, document = stored[turn.trace_id]
        assert (query, answer) == (turn.question, turn.answer)
        assert document["flags"] == [] and document["scores"]["faithfulness"]["value"] == 1.0
    assert unanswered.trace_id not in stored
    letters = [
        json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"dead_letter"')
    ]
    assert [(d["line"], d["reason"]) for d in letters] == [(1, "otlp_unmappable")]
    (letter,) = letters
    assert unanswered.trace_id in letter["error"]
    # The value shown is cut to its start. It is the trace's own spans in OTLP/JSON (the unit
    # tests decode such a dead letter back to exactly those spans), far fewer bytes than the
    # line that carried three traces.
    assert letter["value"].startswith('{"resourceSpans"')
    (own,) = [
        p for p in split_by_trace(lines[0], "otlp_json").parts if p.trace_id == unanswered.trace_id
    ]
    assert letter["value_bytes"] == len(encode_request(own.data, "otlp_json"))
    assert letter["value_bytes"] < len(lines[0]) / 2


@pytest.mark.slow
def test_event_only_content_in_a_later_log_line_joins_its_spans(tmp_path: Path) -> None:
    """`run --source file:-` fed an `event_only` turn: its spans (complete, without content)
    first, released once settled and impossible to map on their own; then, seconds later, the
    log export with the turn's prompt and answer. The trace waits for it instead of being
    dead-lettered, and is scored with the question and answer the log records carry."""
    spans_line, logs_line = _event_only_turn()
    database = tmp_path / "r.db"
    daemon = DaemonProcess(
        {
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
            "RAGMON_KAFKA__OTLP_ASSEMBLY_SETTLE_SECONDS": "0.2",
            "RAGMON_LOG__LEVEL": "debug",
        },
        tmp_path,
        command=[sys.executable, "-m", "monitor.cli", "run", "--source", "file:-"],
        stdin_pipe=True,
    ).start()
    try:
        daemon.wait_ready()
        assert daemon.proc is not None and daemon.proc.stdin is not None
        stdin = daemon.proc.stdin
        stdin.write(spans_line + b"\n")
        stdin.flush()
        wait_until(
            lambda: any(
                e.get("event") == "trace waits for its log records" for e in daemon.log_events()
            ),
            30,
            "the spans released, unmappable alone, and held back for their log records",
        )
        time.sleep(2)  # idle ticks meanwhile: a held trace stays held
        assert daemon.value("ragmon_dead_letters_total") == 0
        stdin.write(logs_line + b"\n")
        stdin.close()
        assert daemon.proc.wait(60) == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    assert b'"dead_letter"' not in daemon.stderr_bytes()
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT query, answer, conversation_id FROM evaluation_results"
            " WHERE evaluator = 'heuristic'"
        ).fetchall()
    assert rows == [(EVENT_QUESTION, EVENT_ANSWER, "conv-logs")]


def _event_only_turn() -> tuple[bytes, bytes]:
    """One RAG turn recorded by util-genai with `event_only` capture, as OTLP/JSON lines: the
    spans export and the logs export."""
    previous = os.environ.get(CAPTURE)
    os.environ[CAPTURE] = "event_only"
    try:
        resource = Resource.create({"service.name": "support-bot"})
        spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        handler = TelemetryHandler(tracer_provider=tracer_provider, logger_provider=logger_provider)
        workflow = handler.workflow("support_answer")
        workflow.attributes["gen_ai.conversation.id"] = "conv-logs"
        with handler.retrieval(data_source_id="kb") as retrieval:
            retrieval.query_text = EVENT_QUESTION
            retrieval.top_k = 1
        with handler.inference("openai", request_model="gpt-4o-mini") as inference:
            inference.input_messages = [
                InputMessage(role="user", parts=[Text(content=EVENT_QUESTION)])
            ]
            inference.output_messages = [
                OutputMessage(
                    role="assistant", parts=[Text(content=EVENT_ANSWER)], finish_reason="stop"
                )
            ]
        workflow.stop()
        assert len(logs.get_finished_logs()) == 1
        return (
            serialize(encode_spans(spans.get_finished_spans()), "otlp_json"),
            serialize_logs(encode_logs(logs.get_finished_logs()), "otlp_json"),
        )
    finally:
        if previous is None:
            os.environ.pop(CAPTURE, None)
        else:
            os.environ[CAPTURE] = previous
