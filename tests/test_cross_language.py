"""Tier 0 across languages: an answer in one language over contexts in another is not measured
as unfaithful (lexical matching cannot compare English words with Japanese ones), and such a turn
does not count as a hallucination in H_t."""

# Japanese text is the point of these inputs.

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.evaluators.heuristic import HeuristicEvaluator
from tests.support.traces import make_trace

REPO = Path(__file__).resolve().parents[1]
EV = HeuristicEvaluator()
UNMEASURED_ACROSS = ("faithfulness", "support", "context_precision", "context_utilization")

WARRANTY_JA = "保証期間は2年です。保証は購入日から始まり、自然故障のみを対象とします。"
ASK_JA = "保証期間はどのくらいですか？"
WARRANTY_EN = "The warranty period is two years. It starts on the day of purchase."


@pytest.mark.parametrize(
    ("query", "contexts", "answer"),
    [
        # the demo's case: a Japanese question over a Japanese context, answered in English
        (ASK_JA, ["保証期間は2年です"], "The warranty period is two years."),
        (ASK_JA, [WARRANTY_JA], "The warranty lasts two years from purchase."),
        # and the reverse: English question and context, Japanese answer
        ("How long is the warranty?", [WARRANTY_EN], "保証期間は2年です。"),
        ("How long is the warranty?", [WARRANTY_EN], "保証は購入日から2年間有効です。"),
    ],
)
def test_answer_in_another_language_than_the_contexts_is_unmeasured(
    query: str, contexts: list[str], answer: str
) -> None:
    res = EV.evaluate(make_trace(query, contexts, answer))
    for key in UNMEASURED_ACROSS:
        assert res.scores[key].value is None, (key, res.scores[key])
        assert res.scores[key].reason == "cross_language", key
    assert res.scores["answer_relevancy"].reason == "cross_language"
    assert res.statements == [], "no statement is counted unsupported (nor supported)"
    assert res.unsupported_claims == []
    assert "cross_language" in res.flags


@pytest.mark.parametrize(
    ("query", "contexts", "answer"),
    [
        (ASK_JA, ["保証期間は2年です"], "保証期間は2年です。"),
        ("How long is the warranty?", [WARRANTY_EN], "The warranty period is two years."),
    ],
)
def test_same_language_answer_is_measured_and_supported(
    query: str, contexts: list[str], answer: str
) -> None:
    res = EV.evaluate(make_trace(query, contexts, answer))
    assert res.scores["faithfulness"].value == 1.0
    assert res.scores["support"].value is not None and res.scores["support"].value > 0.5
    assert res.scores["answer_relevancy"].value is not None
    assert "cross_language" not in res.flags
    assert [v.supported for v in res.statements] == [True]


def test_invented_claim_in_the_contexts_language_is_still_caught() -> None:
    res = EV.evaluate(
        make_trace("保証期間は？", [WARRANTY_JA], "保証期間は5年で、盗難も対象です。")
    )
    assert res.scores["faithfulness"].value == 0.0
    assert "cross_language" not in res.flags


def test_mixed_answer_scores_only_the_comparable_statements() -> None:
    """A Japanese answer with one English sentence over Japanese contexts: the Japanese claims
    are checked, the English one is neither supported nor unsupported."""
    answer = "保証期間は2年です。The warranty also covers accidental damage."
    res = EV.evaluate(make_trace("保証期間は？", [WARRANTY_JA], answer))
    assert [v.statement for v in res.statements] == ["保証期間は2年です。"]
    assert res.scores["faithfulness"].value == 1.0
    assert "cross_language" in res.flags


def test_contexts_in_both_languages_compare_with_either() -> None:
    res = EV.evaluate(
        make_trace("保証期間は？", [WARRANTY_JA, WARRANTY_EN], "The warranty period is two years.")
    )
    assert res.scores["faithfulness"].value == 1.0
    assert "cross_language" not in res.flags


@pytest.mark.slow
def test_cross_language_turn_is_not_a_hallucination_in_h_t(tmp_path: Path) -> None:
    """Through `rag-monitor score` into a real SQLite store: the cross-language turn's H_t is
    unmeasured (NULL), the grounded same-language turn's is 0, an invented one's is 1."""
    turns = [
        (ASK_JA, "保証期間は2年です。"),
        (ASK_JA, "The warranty period is two years."),
        (ASK_JA, "保証期間は5年で、盗難も対象です。"),
    ]
    lines = [
        json.dumps(
            {
                "trace_id": f"t{turn}",
                "timestamp": f"2026-03-01T12:0{turn}:00Z",
                "agent": "warranty-bot",
                "conversation_id": "conv-ja",
                "turn": turn,
                "query": query,
                "contexts": [{"id": "kb-1", "text": WARRANTY_JA, "rank": 1}],
                "answer": answer,
            },
            ensure_ascii=False,
        )
        for turn, (query, answer) in enumerate(turns, start=1)
    ]
    source = tmp_path / "traces.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env["RAGMON_STORE__URL"] = f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "score", "--input", str(source), "--output", output],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    results = {r["trace_id"]: r for r in map(json.loads, output.read_text().splitlines())}
    assert results["t2"]["scores"]["faithfulness"] == {"value": None, "reason": "cross_language"}
    assert results["t2"]["statements"] == []
    with sqlite3.connect(tmp_path / "r.db") as db:
        h = dict(db.execute("SELECT turn, hallucination FROM conversation_turns").fetchall())
    assert h == {1: 0.0, 2: None, 3: 1.0}


async def test_the_daemon_sends_cross_language_turns_to_the_judge_whatever_the_rate(
    tmp_path: Path,
) -> None:
    """The replay through the daemon, judge at the scripted server, sampling rate 0: the
    English answer over a Japanese context is judged (tier 0 could not score it), the
    Japanese one is not."""
    from prometheus_client import CollectorRegistry

    from monitor.config import Settings
    from monitor.daemon import Daemon, SourceSpec
    from monitor.sinks.store import Store
    from tests.support.openai_server import OpenAIServer

    lines = [
        json.dumps(
            {
                "trace_id": trace_id,
                "timestamp": "2026-03-01T12:00:00Z",
                "query": ASK_JA,
                "contexts": [{"id": "kb-1", "text": WARRANTY_JA, "rank": 1}],
                "answer": answer,
            },
            ensure_ascii=False,
        )
        for trace_id, answer in (
            ("across", "The warranty period is two years."),
            ("same", "保証期間は2年です。"),
        )
    ]
    source = tmp_path / "traces.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "r.db"
    async with OpenAIServer() as server:
        settings = Settings.model_validate(
            {
                "http": {"host": "127.0.0.1", "port": 0},
                "store": {"url": f"sqlite+aiosqlite:///{db}"},
                "sampling": {"rate": 0.0},
                "judge": {"base_url": server.url, "api_key": "k", "max_retries": 0},
            }
        )
        daemon = Daemon(settings, SourceSpec("file", str(source)), registry=CollectorRegistry())
        assert await daemon.run() == 0
        asked = {(r.data or {}).get("answer") for r in server.requests}
    assert asked == {"The warranty period is two years."}
    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    try:
        judged = await store.get_result("across", "llm")
        assert judged is not None and judged.scores["faithfulness"].value == 1.0
        assert await store.get_result("same", "llm") is None
    finally:
        await store.close()
    value = daemon.metrics.registry.get_sample_value
    assert value("ragmon_sampler_decisions_total", {"agent": "default", "outcome": "priority"}) == 1
    assert value("ragmon_sampler_decisions_total", {"agent": "default", "outcome": "skipped"}) == 1
