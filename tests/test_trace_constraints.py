"""Constraints are checked on every trace that carries them, with or without a conversation:
the verdicts are the result's `constraints`, `review` shows the broken ones, and the daemon
counts them (ragmon_constraint_checks_total)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.models import Constraint
from tests.support.cli import rag_monitor
from tests.support.traces import make_trace, replay_with_judge

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
    done = rag_monitor("score", "--input", str(source), "--output", str(output), store=store)
    assert done.returncode == 0, done.stderr
    (result,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert result["constraints"] == [
        {"constraint_id": "no-competitors", "status": "violated", "reason": "contains 'MegaMart'"}
    ]
    review = rag_monitor("review", "--json", "--since", "1h", store=store)
    assert review.returncode == 0, review.stderr
    (item,) = json.loads(review.stdout)["items"]
    assert item["violated_constraints"] == [
        {"constraint_id": "no-competitors", "status": "violated", "reason": "contains 'MegaMart'"}
    ]
    listing = rag_monitor("review", "--since", "1h", store=store)
    assert "Violated constraints:" in listing.stdout
    assert "no-competitors [violated]: contains 'MegaMart'" in listing.stdout


async def test_the_daemon_counts_the_verdicts_of_traces_without_a_conversation(
    tmp_path: Path,
) -> None:
    """A replay through the daemon: the verdicts of a trace without a conversation and those of
    a conversation turn are each counted once; the judge's result carries the same verdicts."""
    from monitor.sinks.store import Store

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
    daemon, _ = await replay_with_judge(lines, tmp_path, rate=1.0)
    db = tmp_path / "r.db"
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
