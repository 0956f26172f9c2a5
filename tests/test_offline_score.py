"""`rag-monitor score`: a file of traces scored offline, with tier 0 or a judge."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.openai_server import OpenAIServer, Received, Reply
from tests.support.score_cli import run_score


def _score(
    tmp_path: Path, evaluator: str, *flags: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    output = tmp_path / "results.jsonl"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    full_env.update({"RAGMON_STORE__URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", **env})
    result = run_score("examples/traces.jsonl", output, evaluator, full_env, *flags)
    rows = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    return result, rows


def _score_with_judge(
    tmp_path: Path, script: Callable[[Received], Reply | None] | None, *flags: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    """`_score` with ``--evaluator llm`` against a scripted judge server."""
    with OpenAIServer(script=script) as server:
        return _score(tmp_path, "llm", *flags, RAGMON_JUDGE__BASE_URL=server.url, **env)


@pytest.mark.slow
def test_heuristic_scoring_writes_results_turns_and_a_summary(tmp_path: Path) -> None:
    result, rows = _score(tmp_path, "heuristic")
    assert result.returncode == 0, result.stderr
    assert "scored 6 traces (1 rejected lines)" in result.stdout
    assert {r["evaluator"] for r in rows} == {"heuristic"} and len(rows) == 6
    invented = next(r for r in rows if r["conversation_id"] == "c-101")
    assert invented["scores"]["faithfulness"]["value"] < 1.0
    with sqlite3.connect(tmp_path / "r.db") as db:
        turns = db.execute("SELECT count(*) FROM conversation_turns").fetchone()[0]
    assert turns == 6, "the same conversation tracking as the daemon"
    assert '"line": 7' in result.stderr, "the malformed line is reported with its number"


@pytest.mark.slow
def test_judge_scoring_judges_every_trace(tmp_path: Path) -> None:
    result, rows = _score_with_judge(tmp_path, None, RAGMON_JUDGE__API_KEY="sk-offline-test")
    assert result.returncode == 0, result.stderr
    judged = [r for r in rows if r["evaluator"] == "llm"]
    assert len(judged) == 6, "offline scoring samples every trace"
    assert "sk-offline-test" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_judge_evaluator_needs_an_endpoint(tmp_path: Path) -> None:
    result, _ = _score(tmp_path, "llm")
    assert result.returncode != 0 and "RAGMON_JUDGE__BASE_URL" in result.stderr


def _judge_line(stdout: str) -> str:
    (line,) = [x.strip() for x in stdout.splitlines() if x.strip().startswith("judge:")]
    return line


@pytest.mark.slow
def test_a_token_budget_still_caps_offline_judging_and_the_exit_says_so(tmp_path: Path) -> None:
    """A token budget of one token (a cap the user set, the one thing offline scoring still
    sheds for): one trace at a time (--max-concurrency 1), the first is judged, the budget is
    then spent and the other five are shed (token_budget); exit 3 with the counts."""
    result, rows = _score_with_judge(
        tmp_path,
        None,
        "--max-concurrency",
        "1",
        RAGMON_SAMPLING__TOKEN_BUDGET_PER_HOUR="1",
    )
    assert result.returncode == 3, result.stderr
    assert len([r for r in rows if r["evaluator"] == "llm"]) == 1
    assert _judge_line(result.stdout) == (
        "judge: 6 traces selected (sampled 1, priority 0), 0 not in the sample;"
        " shed 5 (token_budget 5); judged 1"
    )
    assert result.stdout.startswith("scored 1 traces (1 rejected lines)")
    assert result.stderr.splitlines()[-1].startswith(
        "rag-monitor: 5 of 6 traces were not judged (token_budget 5)"
    )


@pytest.mark.slow
def test_the_summary_reports_traces_left_unjudged_by_reason(tmp_path: Path) -> None:
    """A judge endpoint that fails every call: each trace is left unjudged (judge_error)."""
    result, _rows = _score_with_judge(
        tmp_path,
        lambda received: Reply.error(500),
        RAGMON_JUDGE__MAX_RETRIES="0",
        RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD="100",
    )
    assert result.returncode == 3, result.stderr
    line = _judge_line(result.stdout)
    # Offline scoring draws every trace, and a drawn priority counts as drawn.
    assert line.startswith("judge: 6 traces selected (sampled 6, priority 0)"), line
    assert line.endswith("judged 0; left unjudged 6 (judge_error 6)"), line
    assert "unmeasured (llm) judge_error: " in result.stdout
    assert result.stderr.splitlines()[-1] == (
        "rag-monitor: 6 of 6 traces were not judged (judge_error 6); their llm results are"
        f" unmeasured or missing in {tmp_path / 'results.jsonl'}"
    )


@pytest.mark.slow
def test_a_slow_judge_is_waited_for_and_nothing_is_shed(tmp_path: Path) -> None:
    """Every reply takes 0.4 s and one counted failure would open the circuit: the deadlines
    follow the server's pace instead of a fixed timeout, nothing times out or is shed, and
    every trace is judged."""
    result, rows = _score_with_judge(
        tmp_path,
        lambda received: Reply(delay=0.4),
        RAGMON_JUDGE__TIMEOUT_FLOOR_SECONDS="0.1",
        RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD="1",
    )
    assert result.returncode == 0, result.stderr
    assert _judge_line(result.stdout) == (
        "judge: 6 traces selected (sampled 6, priority 0), 0 not in the sample; judged 6"
    )
    assert len([r for r in rows if r["evaluator"] == "llm"]) == 6


@pytest.mark.slow
def test_an_open_circuit_is_waited_out_and_nothing_is_shed(tmp_path: Path) -> None:
    """One trace at a time; both requests of the first fail and one failure opens the circuit
    for a second. The daemon's judge would fail the calls that find it open (circuit_open);
    offline they wait for the probe, and every other trace is judged."""
    failures = [Reply.error(500), Reply.error(500)]

    def first_two_fail(received: Received) -> Reply | None:
        return failures.pop() if failures else None

    result, rows = _score_with_judge(
        tmp_path,
        first_two_fail,
        "--max-concurrency",
        "1",
        RAGMON_JUDGE__MAX_RETRIES="0",
        RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD="1",
        RAGMON_JUDGE__CIRCUIT_RESET_SECONDS="1",
    )
    assert result.returncode == 3, result.stderr
    assert _judge_line(result.stdout).endswith("judged 5; left unjudged 1 (judge_error 1)")
    assert "circuit_open" not in result.stdout + result.stderr
    assert '"state": "open"' in result.stderr, "the circuit did open"
    judged = [r for r in rows if r["evaluator"] == "llm"]
    assert len(judged) == 6
    failed = {
        str(r["trace_id"])
        for r in judged
        for score in r["scores"].values()  # type: ignore[attr-defined]
        if score["value"] is None and score["reason"] in ("judge_error", "circuit_open")
    }
    assert len(failed) == 1, "only the first trace's calls failed"


@pytest.mark.slow
def test_the_timeout_flag_fixes_the_time_limit_of_every_request(tmp_path: Path) -> None:
    result, _rows = _score_with_judge(
        tmp_path,
        lambda received: Reply(delay=0.6),
        "--timeout",
        "0.2",
        RAGMON_JUDGE__MAX_RETRIES="0",
        RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD="100",
    )
    assert result.returncode == 3, result.stderr
    assert "judge_timeout 6" in result.stderr.splitlines()[-1]
    assert "timed out after 0.2 s" in result.stderr


@pytest.mark.parametrize(
    ("flag", "value"), [("--max-concurrency", "0"), ("--timeout", "-1"), ("--timeout", "inf")]
)
def test_bad_pacing_flags_are_usage_errors(tmp_path: Path, flag: str, value: str) -> None:
    result, _rows = _score(tmp_path, "llm", flag, value, RAGMON_JUDGE__BASE_URL="http://x/v1")
    assert result.returncode == 2
    assert flag in result.stderr


def test_the_summary_counts_the_priorities_the_cap_skipped() -> None:
    from collections import Counter

    from monitor.offline import RunSummary

    decisions = Counter(
        {("sampled",): 3, ("priority",): 2, ("priority_capped",): 4, ("skipped",): 10}
    )
    line = RunSummary(decisions=decisions, judge_active=True).judge_line()
    assert line.startswith(
        "judge: 5 traces selected (sampled 3, priority 2), 10 not in the sample,"
        " 4 priorities over sampling.priority_max_share; judged 0"
    ), line


@pytest.mark.slow
def test_a_trace_with_one_of_its_judge_calls_failed_is_not_called_judged(tmp_path: Path) -> None:
    """One trace at a time; the very first judge call fails (no retry), its other call and
    every other trace's succeed. That trace's scores from the failed call are unmeasured: the
    summary says so and the exit is 3, as for a trace left wholly unjudged."""
    failures = [Reply.error(500)]

    def first_fails(received: Received) -> Reply | None:
        return failures.pop() if failures else None

    result, rows = _score_with_judge(
        tmp_path,
        first_fails,
        "--max-concurrency",
        "1",
        RAGMON_JUDGE__MAX_RETRIES="0",
        RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD="5",
    )
    assert result.returncode == 3, result.stderr
    assert _judge_line(result.stdout).endswith("judged 5; left unjudged 1 (judge_error 1)")
    assert "unmeasured (llm) judge_error: faithfulness 1" in result.stdout
    judged = [r for r in rows if r["evaluator"] == "llm"]
    assert len(judged) == 6, "the trace's measured scores are still written"
