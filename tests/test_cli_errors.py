"""Errors as a user meets them at a terminal: one report each, every path named."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import RAG_MONITOR, clean_env, rag_monitor
from tests.support.terminal import Terminal

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "traces.jsonl"


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return rag_monitor(*args, cwd=cwd, **env)


def _finished(terminal: Terminal, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(terminal.pid, os.WNOHANG)
        if pid:
            time.sleep(0.3)  # the reader takes the last output
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    raise AssertionError(f"still running after {timeout}s:\n{terminal.output}")


@pytest.mark.slow
def test_a_replay_at_a_terminal_reports_each_bad_line_once(tmp_path: Path) -> None:
    replay = tmp_path / "replay.jsonl"
    good = EXAMPLE.read_text().splitlines()[:2]
    replay.write_text("\n".join([*good, '{"not": "a trace"}', "not json"]) + "\n")
    terminal = Terminal(
        [str(RAG_MONITOR), "run", "--source", f"file:{replay}"],
        cwd=tmp_path,
        env=clean_env(
            RAGMON_STORE__ENABLED="false",
            RAGMON_HTTP__PORT="0",
            RAGMON_HTTP__HOST="127.0.0.1",
            TERM="dumb",
        ),
    )
    assert _finished(terminal, 90) == 0
    output = re.sub(r"\x1b\[[0-9;]*m", "", terminal.output)  # the console log's colours
    assert output.count('"line": 3') == output.count('"line": 4') == 1, output
    assert "message dead-lettered" not in output
    assert "<ExitCode" not in output and "exit_code=0" in output
    assert "2 traces scored, 2 dead-lettered (invalid_json 1, schema_violation 1)" in output


def test_review_and_agents_where_no_store_is_say_so_and_create_none(tmp_path: Path) -> None:
    for command in ("review", "agents"):
        result = _cli(tmp_path, command)
        assert (result.returncode, result.stdout) == (3, ""), result.stderr
        assert result.stderr.splitlines() == [
            f"rag-monitor: no results store at sqlite+aiosqlite:///ragmon.db"
            f" ({tmp_path / 'ragmon.db'}); nothing was scored into it: run the daemon (`run`)"
            " or `score` from this folder first, or point store.url (RAGMON_STORE__URL) at the"
            " store they write"
        ]
        assert list(tmp_path.iterdir()) == [], "no empty store was left behind"


@pytest.mark.slow
def test_review_and_agents_name_the_store_they_read(tmp_path: Path) -> None:
    scored = _cli(tmp_path, "score", "--input", str(EXAMPLE), "--output", "r.jsonl")
    assert scored.returncode == 0, scored.stderr
    for command in ("review", "agents"):
        result = _cli(tmp_path, command)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1] == (
            f"results store: sqlite+aiosqlite:///ragmon.db ({tmp_path / 'ragmon.db'})"
        )
    listing = _cli(tmp_path, "review", "--json")
    assert listing.stdout.lstrip().startswith("{") and "results store" not in listing.stdout


def test_output_into_a_closed_pipe_ends_quietly_with_141(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written (`| head -0`)
    try:
        result = subprocess.run(
            [str(RAG_MONITOR), "schema"], stdout=write_end, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env=clean_env(), timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")
