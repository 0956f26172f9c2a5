"""`rag-monitor run --source file:` with OTLP/JSON lines: assembled in process, scored, stored."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from monitor.source.otlp_split import encode_request, split_by_trace
from tests.support.faults import REPO, DaemonProcess
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, langchain_turn


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
    (own,) = [p for p in split_by_trace(lines[0], "otlp_json") if p.trace_id == unanswered.trace_id]
    assert letter["value_bytes"] == len(encode_request(own.data, "otlp_json"))
    assert letter["value_bytes"] < len(lines[0]) / 2
