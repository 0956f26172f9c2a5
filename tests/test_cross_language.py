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
from monitor.models import Score
from tests.support.traces import make_trace, replay_with_judge

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


WARRANTY_DE = (
    "Die Garantie gilt zwei Jahre ab dem Kaufdatum. Sie deckt nur Herstellungsfehler ab, keine "
    "Schäden durch Stürze oder Wasser."
)
ASK_EN = "How long is the warranty?"
ASK_DE = "Wie lange gilt die Garantie?"
ANSWER_DE = "Die Garantie gilt zwei Jahre ab dem Kaufdatum."
WARRANTY_ZH = "保修期为自购买之日起两年，仅涵盖制造缺陷，不包括跌落或进水造成的损坏。"


@pytest.mark.parametrize(
    ("query", "contexts", "answer"),
    [
        # the case: a correct German answer over English contexts
        (ASK_EN, [WARRANTY_EN], ANSWER_DE),
        (ASK_DE, [WARRANTY_EN], ANSWER_DE),
        # English over German contexts, Spanish over English, Japanese over Chinese
        (ASK_EN, [WARRANTY_DE], "The warranty lasts two years from the date of purchase."),
        (ASK_EN, [WARRANTY_EN], "La garantía dura dos años desde la fecha de compra."),
        ("保証期間は？", [WARRANTY_ZH], "保証期間は購入日から2年間です。"),
    ],
)
def test_an_answer_in_any_other_language_than_its_contexts_is_cross_language(
    query: str, contexts: list[str], answer: str
) -> None:
    """Any pair of languages, not only English and Japanese: unmeasured, never 0, and the
    sampler's priority (judged whatever the rate)."""
    from monitor.config.scoring import SamplingConfig
    from monitor.evaluators.sampler import Sampler

    trace = make_trace(query, contexts, answer)
    res = EV.evaluate(trace)
    for key in UNMEASURED_ACROSS:
        assert res.scores[key] == Score.unmeasured("cross_language"), key
    assert res.statements == []
    assert "cross_language" in res.flags
    assert "unsupported_entities" not in res.flags
    assert Sampler(SamplingConfig(rate=0.0)).decide(trace, res) == "priority"


@pytest.mark.parametrize(
    ("query", "context", "answer", "language"),
    [
        (ASK_DE, WARRANTY_DE, ANSWER_DE, "de"),
        (
            "¿Cuánto dura la garantía?",
            "La garantía dura dos años desde la fecha de compra y cubre solo defectos.",
            "La garantía dura dos años desde la compra.",
            "es",
        ),
        (
            "Как долго действует гарантия?",
            "Гарантия действует два года с даты покупки и покрывает только дефекты.",
            "Гарантия действует два года с даты покупки.",
            "ru",
        ),
        ("保修期多长？", WARRANTY_ZH, "保修期为自购买之日起两年，仅涵盖制造缺陷。", "zh"),
    ],
)
def test_a_language_tier0_has_no_analyser_for_is_unmeasured_with_its_own_reason(
    query: str, context: str, answer: str, language: str
) -> None:
    """Same language throughout, but neither English nor Japanese: English stemming would
    score it, so every score is unmeasured (`unsupported_language`), never 0."""
    res = EV.evaluate(make_trace(query, [context], answer))
    for key in (*UNMEASURED_ACROSS, "answer_relevancy"):
        assert res.scores[key] == Score.unmeasured("unsupported_language"), (language, key)
    assert res.flags == ["unsupported_language"]
    assert res.statements == []


def test_a_short_answer_over_contexts_in_another_language_is_analysed_as_theirs() -> None:
    """Too short to tell ("Zwei Jahre.") over German contexts: the contexts' language decides,
    so it is not scored with the English analyser either."""
    res = EV.evaluate(make_trace(ASK_DE, [WARRANTY_DE], "Zwei Jahre."))
    assert res.scores["faithfulness"] == Score.unmeasured("unsupported_language")


def test_a_question_in_another_language_leaves_only_relevancy_unmeasured() -> None:
    res = EV.evaluate(
        make_trace(
            "Combien de temps dure la garantie ?", [WARRANTY_EN], "The warranty lasts two years."
        )
    )
    assert res.scores["faithfulness"].value == 1.0
    assert res.scores["answer_relevancy"] == Score.unmeasured("cross_language")
    assert "language_mismatch" in res.flags
    assert "cross_language" not in res.flags


@pytest.mark.parametrize("answer", ["Delhi", "Jonathan Stark", "1998", "Yes, two years."])
def test_names_and_short_answers_stay_measured(answer: str) -> None:
    """One or two words are too little to tell a language: compared, never cross_language."""
    res = EV.evaluate(make_trace(ASK_EN, [WARRANTY_EN + " Delhi. Jonathan Stark. 1998."], answer))
    assert res.scores["faithfulness"].value is not None, res.scores["faithfulness"]
    assert "cross_language" not in res.flags


STORAGE_EN = (
    "Standard storage costs 2 cents per gigabyte per month. "
    "Archive storage costs 0.4 cents per gigabyte per month."
)


@pytest.mark.parametrize(
    "answer",
    [
        # fastText's compressed model: Italian 0.60, English 0.20
        "Standard storage costs 15 dollars per terabyte per day in Frankfurt.",
        # Italian 0.46, English 0.35: below the confidence bound anyway
        "Standard storage costs 2 cents per gigabyte per month.",
    ],
)
def test_english_the_model_reads_as_italian_is_english_over_english_contexts(answer: str) -> None:
    """The contexts' language still counts when the model gives it a fair share: the invented
    answer is measured (and caught), never left unmeasured as cross_language."""
    res = EV.evaluate(make_trace("How much does standard storage cost?", [STORAGE_EN], answer))
    assert res.scores["support"].value is not None, res.scores["support"]
    assert not {"cross_language", "unsupported_language", "language_mismatch"} & set(res.flags)


def test_a_german_answer_is_still_another_language_over_english_contexts() -> None:
    """The rule above does not hide a real change of language: German gives English under
    0.05 (here over contexts the model tells as English)."""
    res = EV.evaluate(
        make_trace(
            ASK_EN,
            [WARRANTY_EN],
            "Die Garantie gilt zwei Jahre ab dem Kaufdatum.",
        )
    )
    assert res.scores["faithfulness"] == Score.unmeasured("cross_language")
    assert "cross_language" in res.flags


def test_every_sentence_of_a_mixed_script_answer_is_told_apart() -> None:
    """A Japanese answer with an English and a German sentence over Japanese contexts."""
    answer = (
        "保証期間は2年です。The warranty also covers accidental damage. "
        "Die Garantie deckt auch Unfallschäden ab."
    )
    res = EV.evaluate(make_trace("保証期間は？", [WARRANTY_JA], answer))
    assert [v.statement for v in res.statements] == ["保証期間は2年です。"]
    assert "cross_language" in res.flags


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
    from monitor.sinks.store import Store

    lines = [
        {
            "trace_id": trace_id,
            "timestamp": "2026-03-01T12:00:00Z",
            "query": ASK_JA,
            "contexts": [{"id": "kb-1", "text": WARRANTY_JA, "rank": 1}],
            "answer": answer,
        }
        for trace_id, answer in (
            ("across", "The warranty period is two years."),
            ("same", "保証期間は2年です。"),
        )
    ]
    daemon, requests = await replay_with_judge(lines, tmp_path, rate=0.0)
    asked = {(r.data or {}).get("answer") for r in requests}
    assert asked == {"The warranty period is two years."}
    db = tmp_path / "r.db"
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
