"""`rag-monitor score` takes the OTLP/JSON lines `run --source file:` takes, and scores them the
same way: the same traces, the same scores, the same line rejected for the same reason."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import rag_monitor
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, langchain_turn

REPO = Path(__file__).resolve().parents[1]
BAD_OTLP = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}'


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return rag_monitor(
        *args,
        cwd=tmp_path,
        RAGMON_STORE__URL=f"sqlite+aiosqlite:///{tmp_path / (args[0] + '.db')}",
        RAGMON_HTTP__PORT="0",
        RAGMON_HTTP__HOST="127.0.0.1",
    )


def _stored(database: Path) -> dict[str, tuple[str, str, float]]:
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT trace_id, query, answer, result FROM evaluation_results")
        return {
            trace_id: (query, answer, json.loads(doc)["scores"]["support"]["value"])
            for trace_id, query, answer, doc in rows
        }


@pytest.mark.slow
def test_score_takes_the_otlp_lines_a_replay_takes_and_scores_them_alike(tmp_path: Path) -> None:
    app, start = App(), time.time_ns()
    turns = [
        langchain_turn(app, n, session="conv-otlp", start_ns=start + n * MS, llm_ns=100 * MS)
        for n in (1, 2)
    ]
    native = (REPO / "examples" / "traces.jsonl").read_bytes().splitlines()[0]
    lines = [
        encode(turns[0].spans, "otlp_json"),
        BAD_OTLP,
        native,
        encode(turns[1].spans, "otlp_json"),
    ]
    source = tmp_path / "mixed.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")

    scored = _cli(tmp_path, "score", "--input", str(source), "--output", "results.jsonl")
    replayed = _cli(tmp_path, "run", "--source", f"file:{source}")

    assert scored.returncode == replayed.returncode == 0, scored.stderr + replayed.stderr
    assert "scored 3 traces (1 rejected lines)" in scored.stdout
    assert "3 traces scored, 1 dead-lettered (otlp_undecodable 1)" in replayed.stdout
    rejected = json.loads(scored.stderr.splitlines()[0])
    assert rejected == {
        "line": 2,
        "reason": "otlp_undecodable",
        "error": "invalid_id: traceId is neither hex nor base64",
    }
    by_score = _stored(tmp_path / "score.db")
    assert by_score == _stored(tmp_path / "run.db")
    for turn in turns:
        assert by_score[turn.trace_id][:2] == (turn.question, turn.answer)
    written = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["trace_id"] for r in written} == set(by_score)
