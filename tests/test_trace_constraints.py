"""Constraints are checked on every trace that carries them, with or without a conversation:
the verdicts are the result's `constraints`, `review` shows the broken ones, and the daemon
counts them (ragmon_constraint_checks_total)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.models import Constraint
from tests.support.traces import make_trace

REPO = Path(__file__).resolve().parents[1]
CONTEXT = "Refunds are issued within 14 days of the return. Store credit never expires."
FORBIDDEN = {"id": "no-competitors", "text": "Never name a competitor", "kind": "forbidden_terms"}


def _constraints(trace_constraints: list[dict[str, Any]], answer: str) -> list[dict[str, Any]]:
    trace = make_trace(
        "How long do refunds take?",
        [CONTEXT],
        answer,
        constraints=[Constraint.model_validate(c) for c in trace_constraints],
    )
    assert trace.conversation_id is None
    result = HeuristicEvaluator().evaluate(trace)
    return [v.model_dump() for v in result.constraints]


def test_a_trace_without_a_conversation_gets_its_constraints_checked() -> None:
    verdicts = _constraints(
        [
            {**FORBIDDEN, "value": ["MegaMart"]},
            {"id": "short", "text": "At most 200 characters", "kind": "max_chars", "value": 200},
            {"id": "english", "text": "Answer in English", "kind": "language", "value": "en-GB"},
            {"id": "tone", "text": "Be polite"},
        ],
        "Refunds are issued within 14 days, faster than at MegaMart.",
    )
    assert verdicts == [
        {"constraint_id": "no-competitors", "status": "violated", "reason": "contains 'MegaMart'"},
        {"constraint_id": "short", "status": "satisfied", "reason": None},
        {"constraint_id": "english", "status": "satisfied", "reason": None},
        {
            "constraint_id": "tone",
            "status": "unmeasured",
            "reason": "free-text constraint needs the LLM judge",
        },
    ]


def test_language_constraints_hold_for_every_language() -> None:
    german = "Rückerstattungen erfolgen innerhalb von 14 Tagen nach der Rücksendung."
    wanted = {"id": "lang", "text": "Antworte auf Deutsch", "kind": "language"}
    assert _constraints([{**wanted, "value": "de"}], german)[0]["status"] == "satisfied"
    english = _constraints([{**wanted, "value": "en"}], german)[0]
    assert english == {
        "constraint_id": "lang",
        "status": "violated",
        "reason": "answer is de, expected en",
    }
    too_short = _constraints([{**wanted, "value": "de"}], "14 Tage.")[0]
    assert too_short["status"] == "unmeasured"


def test_a_trace_without_constraints_has_none() -> None:
    assert _constraints([], "Refunds are issued within 14 days.") == []


def _cli(*argv: str, store: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env["RAGMON_STORE__URL"] = f"sqlite+aiosqlite:///{store}"
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.slow
def test_score_and_review_show_the_violation_of_a_trace_without_a_conversation(
    tmp_path: Path,
) -> None:
    """The issue's case through the CLI and a real SQLite store: a `forbidden_terms` constraint
    broken by the answer of a trace with no `conversation_id`."""
    trace = {
        "trace_id": "no-conversation",
        "timestamp": "2026-03-01T12:00:00Z",
        "query": "How long do refunds take?",
        "contexts": [{"id": "kb-1", "text": CONTEXT}],
        "answer": "Refunds are issued within 14 days, faster than at MegaMart.",
        "constraints": [{**FORBIDDEN, "value": ["MegaMart"]}],
    }
    source = tmp_path / "traces.jsonl"
    source.write_text(json.dumps(trace) + "\n", encoding="utf-8")
    output = tmp_path / "results.jsonl"
    store = tmp_path / "r.db"
    done = _cli("score", "--input", str(source), "--output", str(output), store=store)
    assert done.returncode == 0, done.stderr
    (result,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert result["constraints"] == [
        {"constraint_id": "no-competitors", "status": "violated", "reason": "contains 'MegaMart'"}
    ]
    review = _cli("review", "--json", "--since", "1h", store=store)
    assert review.returncode == 0, review.stderr
    (item,) = json.loads(review.stdout)["items"]
    assert item["violated_constraints"] == [
        {"constraint_id": "no-competitors", "status": "violated", "reason": "contains 'MegaMart'"}
    ]
    listing = _cli("review", "--since", "1h", store=store)
    assert "Violated constraints:" in listing.stdout
    assert "no-competitors [violated]: contains 'MegaMart'" in listing.stdout


async def test_the_daemon_counts_the_verdicts_of_traces_without_a_conversation(
    tmp_path: Path,
) -> None:
    """A replay through the daemon: the verdicts of a trace without a conversation and those of
    a conversation turn are each counted once; the judge's result carries the same verdicts."""
    from prometheus_client import CollectorRegistry

    from monitor.config import Settings
    from monitor.daemon import Daemon, SourceSpec
    from monitor.sinks.store import Store
    from tests.support.openai_server import OpenAIServer

    lines = [
        {
            "trace_id": trace_id,
            "timestamp": "2026-03-01T12:00:00Z",
            "query": "How long do refunds take?",
            "contexts": [{"id": "kb-1", "text": CONTEXT}],
            "answer": "Refunds are issued within 14 days, faster than at MegaMart.",
            "constraints": [{**FORBIDDEN, "value": ["MegaMart"]}],
            **extra,
        }
        for trace_id, extra in (("alone", {}), ("in-conversation", {"conversation_id": "c-1"}))
    ]
    source = tmp_path / "traces.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    db = tmp_path / "r.db"
    async with OpenAIServer() as server:
        settings = Settings.model_validate(
            {
                "http": {"host": "127.0.0.1", "port": 0},
                "store": {"url": f"sqlite+aiosqlite:///{db}"},
                "sampling": {"rate": 1.0},
                "judge": {"base_url": server.url, "api_key": "k", "max_retries": 0},
            }
        )
        daemon = Daemon(settings, SourceSpec("file", str(source)), registry=CollectorRegistry())
        assert await daemon.run() == 0
    value = daemon.metrics.registry.get_sample_value
    labels = {"agent": "default", "outcome": "violated"}
    assert value("ragmon_constraint_checks_total", labels) == 2
    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    try:
        for evaluator in ("heuristic", "llm"):
            stored = await store.get_result("alone", evaluator)
            assert stored is not None, evaluator
            assert [v.status for v in stored.constraints] == ["violated"], evaluator
    finally:
        await store.close()
