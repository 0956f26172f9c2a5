"""The tier-0 heuristic evaluator: scores, verdicts and flags on hand-written English and Japanese
traces, properties (range, determinism), and its measured detection quality on the project's
development data (bench/detect.py)."""

# Japanese punctuation and full-width letters are the point of these inputs.

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.evaluators.heuristic import HeuristicEvaluator, is_refusal_statement
from monitor.models import Context, EvaluationResult, Score
from tests.support.bench import load_bench
from tests.support.dev_data import dev_data_path
from tests.support.traces import make_trace

SCORE_KEYS = (
    "faithfulness",
    "support",
    "answer_relevancy",
    "context_precision",
    "context_utilization",
)


def value(result: EvaluationResult, key: str) -> float:
    v = result.scores[key].value
    assert v is not None, f"{key} unmeasured: {result.scores[key].reason}"
    return v


EV = HeuristicEvaluator()

BRIDGE = [
    "The Lumen Bridge in Harwick opened in 1998 and spans 420 metres across the Tamsin River.",
    "It was designed by the engineer Clara Voss and carries about 18,000 vehicles a day.",
]
BRIDGE_Q = "When did the Lumen Bridge open and who designed it?"

LIBRARY = [
    "みどり町の図書館は1975年に開館した。蔵書数は約12万冊で、毎週月曜日が休館日である。",
    "図書館の隣には市民プールがあり、夏季のみ営業している。",
]
LIBRARY_Q = "みどり町の図書館について教えてください。"


# --- English ---------------------------------------------------------------------------------


def test_grounded_english_answer_scores_high() -> None:
    res = EV.evaluate(
        make_trace(
            BRIDGE_Q, BRIDGE, "The Lumen Bridge opened in 1998. It was designed by Clara Voss."
        )
    )
    assert res.evaluator == "heuristic"
    assert value(res, "faithfulness") == 1.0
    assert value(res, "support") >= 0.7
    assert res.flags == []
    assert [v.supported for v in res.statements] == [True, True]
    # each statement points at the chunk that states it
    assert [v.evidence_context_id for v in res.statements] == ["c0", "c1"]
    assert value(res, "context_precision") == 1.0
    assert value(res, "context_utilization") == 1.0
    assert value(res, "answer_relevancy") >= 0.7


def test_invented_number_and_name_score_lower_and_are_flagged() -> None:
    good = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, "The Lumen Bridge opened in 1998."))
    bad = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, "The Lumen Bridge opened in 2004."))
    assert value(bad, "support") < value(good, "support")
    assert value(bad, "faithfulness") == 0.0
    assert "unsupported_entities" in bad.flags
    assert "unsupported_entities" not in good.flags
    (verdict,) = bad.statements
    assert not verdict.supported
    assert verdict.reason is not None and "2004" in verdict.reason

    named = EV.evaluate(
        make_trace(
            BRIDGE_Q, BRIDGE, "The Lumen Bridge opened in 1998. It was designed by Marcus Webb."
        )
    )
    assert "unsupported_entities" in named.flags
    assert value(named, "faithfulness") == 0.5
    assert [v.supported for v in named.statements] == [True, False]
    assert "Webb" in (named.statements[1].reason or "")


def test_number_written_differently_is_still_supported() -> None:
    res = EV.evaluate(
        make_trace("How busy is it?", BRIDGE, "The bridge carries about 18000 vehicles a day.")
    )
    assert "unsupported_entities" not in res.flags
    assert value(res, "faithfulness") == 1.0


def test_one_invented_date_in_a_long_answer_is_not_averaged_away() -> None:
    """The lower quartile ignores one weak statement among five; an invented year is not a weak
    fragment: the grounding model counts it apart, so it still pulls the answer's support down."""
    grounded = [
        "The Lumen Bridge is in Harwick.",
        "It spans 420 metres across the Tamsin River.",
        "It was designed by the engineer Clara Voss.",
        "It carries about 18,000 vehicles a day.",
    ]
    good = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, " ".join([*grounded, "It opened in 1998."])))
    bad = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, " ".join([*grounded, "It opened in 2004."])))
    assert "unsupported_entities" in bad.flags
    weakest = min(v.support or 0.0 for v in bad.statements)
    assert value(bad, "support") < value(good, "support") - 0.1
    assert weakest < value(bad, "support") < value(good, "support")
    # Japanese: an invented year in a three-sentence answer
    ja_good = EV.evaluate(
        make_trace(
            LIBRARY_Q,
            LIBRARY,
            "図書館は1975年に開館した。蔵書数は約12万冊である。隣には市民プールがある。",
        )
    )
    ja_bad = EV.evaluate(
        make_trace(
            LIBRARY_Q,
            LIBRARY,
            "図書館は1982年に開館した。蔵書数は約12万冊である。隣には市民プールがある。",
        )
    )
    assert "unsupported_entities" in ja_bad.flags
    assert value(ja_bad, "support") < value(ja_good, "support")


# --- Japanese --------------------------------------------------------------------------------


def test_japanese_answer_without_spaces_is_split_and_supported() -> None:
    res = EV.evaluate(
        make_trace(
            LIBRARY_Q,
            LIBRARY,
            "みどり町の図書館は1975年に開館しました。蔵書数は約12万冊です。休館日は毎週月曜日です。",
        )
    )
    assert [v.statement for v in res.statements] == [
        "みどり町の図書館は1975年に開館しました。",
        "蔵書数は約12万冊です。",
        "休館日は毎週月曜日です。",
    ]
    assert value(res, "faithfulness") == 1.0
    assert value(res, "support") >= 0.7
    assert res.flags == []


def test_japanese_invented_facts_are_caught() -> None:
    res = EV.evaluate(
        make_trace(
            LIBRARY_Q,
            LIBRARY,
            "みどり町の図書館は1982年に開館しました。館長はタナカ・ヒロシです。",
        )
    )
    assert "unsupported_entities" in res.flags
    assert value(res, "faithfulness") == 0.0
    assert value(res, "support") < 0.3
    reasons = " ".join(v.reason or "" for v in res.statements)
    assert "1982" in reasons and "タナカ" in reasons


# --- refusals, missing inputs ----------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "I don't know.",
        "I'm sorry, but the provided context does not mention who maintains the bridge.",
        "There is not enough information to answer that.",
        "分かりません。",
        "申し訳ありませんが、提供された情報には館長についての記載がありません。",
        "その情報はありません。",
    ],
)
def test_refusal_is_flagged_and_not_scored_as_unfaithful(answer: str) -> None:
    res = EV.evaluate(make_trace("Who maintains it? 誰が管理していますか？", BRIDGE, answer))
    assert "refusal" in res.flags
    for key in ("faithfulness", "support", "context_precision", "context_utilization"):
        assert res.scores[key].value is None
        assert res.scores[key].reason == "refusal"
    # as in ragas, a non-committal answer is not a relevant one
    assert value(res, "answer_relevancy") == 0.0
    assert res.statements == []


def test_claims_about_the_world_are_not_refusals() -> None:
    assert not is_refusal_statement("The cafe does not offer take-out.")
    assert not is_refusal_statement("この製品には砂糖が含まれていません。")
    assert is_refusal_statement("The passages do not provide the opening hours.")


def test_partial_refusal_keeps_scoring_the_claims() -> None:
    res = EV.evaluate(
        make_trace(
            "When did it open and what did it cost?",
            BRIDGE,
            "The Lumen Bridge opened in 1998. The context does not mention what it cost. "
            "It spans 420 metres.",
        )
    )
    assert "partial_refusal" in res.flags and "refusal" not in res.flags
    assert value(res, "faithfulness") == 1.0
    assert len(res.statements) == 2


def test_no_contexts_leaves_faithfulness_unmeasured_with_reason() -> None:
    res = EV.evaluate(make_trace(BRIDGE_Q, [], "The Lumen Bridge opened in 1998."))
    assert "no_contexts" in res.flags
    for key in ("faithfulness", "support", "context_precision", "context_utilization"):
        assert res.scores[key].value is None
        assert res.scores[key].reason == "no_contexts"
    assert res.scores["answer_relevancy"].measured


def test_blank_contexts_count_as_none() -> None:
    res = EV.evaluate(make_trace(BRIDGE_Q, ["", "   "], "The bridge opened in 1998."))
    assert "no_contexts" in res.flags
    assert res.scores["faithfulness"].reason == "no_contexts"


def test_empty_answer_is_unmeasured() -> None:
    res = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, "  \n"))
    assert "empty_answer" in res.flags
    assert all(res.scores[k].value is None for k in SCORE_KEYS)
    assert res.scores["faithfulness"].reason == "empty_answer"


def test_filler_only_answer_has_no_claims() -> None:
    res = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, "Sure! Here is what I found:"))
    assert res.scores["faithfulness"].reason == "no_claims"
    assert res.statements == []


def test_fillers_do_not_count_against_faithfulness() -> None:
    res = EV.evaluate(
        make_trace(BRIDGE_Q, BRIDGE, "Sure! The Lumen Bridge opened in 1998. I hope this helps.")
    )
    assert value(res, "faithfulness") == 1.0
    assert [v.statement for v in res.statements] == ["The Lumen Bridge opened in 1998."]


# --- flags -----------------------------------------------------------------------------------


def test_language_mismatch() -> None:
    ja_answer = EV.evaluate(make_trace(BRIDGE_Q, BRIDGE, "ルーメン橋は1998年に開通しました。"))
    assert "language_mismatch" in ja_answer.flags
    en_answer = EV.evaluate(make_trace(LIBRARY_Q, LIBRARY, "The library opened in 1975."))
    assert "language_mismatch" in en_answer.flags
    same = EV.evaluate(make_trace(LIBRARY_Q, LIBRARY, "図書館は1975年に開館しました。"))
    assert "language_mismatch" not in same.flags
    # a bare name or number says nothing about the language
    short = EV.evaluate(make_trace("ルーメン橋を設計したのは誰？", BRIDGE, "Clara Voss"))
    assert "language_mismatch" not in short.flags


def test_language_mismatch_falls_back_to_the_trace_language() -> None:
    res = EV.evaluate(make_trace("", LIBRARY, "The library opened in 1975.", language="ja"))
    assert "language_mismatch" in res.flags


def test_must_not_contain() -> None:
    ev = HeuristicEvaluator(must_not_contain=["Java is better", "競合製品"])
    ctx = ["Python is a high-level programming language."]
    hit = ev.evaluate(
        make_trace("What is Python?", ctx, "Python is a language, but JAVA IS BETTER.")
    )
    assert "must_not_contain" in hit.flags
    wide = ev.evaluate(make_trace("What is Python?", ctx, "Ｊａｖａ ｉｓ ｂｅｔｔｅｒ, honestly."))
    assert "must_not_contain" in wide.flags  # full-width text is normalised first
    ja = ev.evaluate(make_trace("Pythonとは？", ctx, "競合製品の方が優れています。"))
    assert "must_not_contain" in ja.flags
    clean = ev.evaluate(make_trace("What is Python?", ctx, "Python is a programming language."))
    assert "must_not_contain" not in clean.flags
    assert "must_not_contain" not in EV.evaluate(make_trace("q", ctx, "Java is better")).flags


def test_structured_context_yes_no_fields_are_checked() -> None:
    ctx = ['{"name": "Blue Fern Cafe", "OutdoorSeating": false, "RestaurantsTakeOut": true}']
    wrong = EV.evaluate(
        make_trace("", ctx, "Blue Fern Cafe offers outdoor seating. It does not offer take-out.")
    )
    assert value(wrong, "faithfulness") == 0.0
    assert all("yes/no field" in (v.reason or "") for v in wrong.statements)
    right = EV.evaluate(
        make_trace("", ctx, "Blue Fern Cafe has no outdoor seating, but it offers take-out.")
    )
    assert value(right, "faithfulness") == 1.0


# --- context precision / utilization ---------------------------------------------------------


def test_context_precision_rewards_useful_chunks_ranked_first() -> None:
    noise = "The Harwick town fair takes place every October near the old mill."
    answer = "The Lumen Bridge opened in 1998 and spans 420 metres."
    first = EV.evaluate(make_trace(BRIDGE_Q, [BRIDGE[0], noise], answer))
    last = EV.evaluate(make_trace(BRIDGE_Q, [noise, BRIDGE[0]], answer))
    assert value(first, "context_precision") == 1.0
    assert value(last, "context_precision") == pytest.approx(0.5)
    assert value(first, "context_utilization") == value(last, "context_utilization") == 0.5


def test_context_rank_field_orders_chunks() -> None:
    noise = "The Harwick town fair takes place every October near the old mill."
    trace = make_trace(BRIDGE_Q, [noise, BRIDGE[0]], "The Lumen Bridge opened in 1998.")
    reranked = trace.model_copy(
        update={
            "contexts": [
                Context(id="c0", text=noise, rank=2),
                Context(id="c1", text=BRIDGE[0], rank=1),
            ]
        }
    )
    assert value(EV.evaluate(reranked), "context_precision") == 1.0


# --- properties ------------------------------------------------------------------------------


def test_deterministic() -> None:
    trace = make_trace(
        BRIDGE_Q, BRIDGE, "The bridge opened in 2004 and was designed by Clara Voss."
    )
    a = EV.evaluate(trace).model_dump(exclude={"latency_ms"})
    b = HeuristicEvaluator().evaluate(trace).model_dump(exclude={"latency_ms"})
    assert a == b


_words = st.sampled_from(
    [
        "bridge", "opened", "1998", "2004", "Clara", "Voss", "the", "in", "not", "図書館", "開館",
        "した", "。", ".", "!", "\n", "- ", "I don't know", "分かりません", "{\"WiFi\": false}",
        "WiFi", "420", "metres", "タナカ", "東京", "", " ",
    ]
)  # fmt: skip
_texts = st.lists(_words, max_size=25).map(" ".join) | st.text(max_size=120)


@settings(max_examples=150, deadline=None)
@given(query=_texts, contexts=st.lists(_texts, max_size=4), answer=_texts)
def test_scores_are_in_range_or_unmeasured_with_reason(
    query: str, contexts: list[str], answer: str
) -> None:
    res = EV.evaluate(make_trace(query, contexts, answer))
    assert set(SCORE_KEYS) == set(res.scores)
    for key, score in res.scores.items():
        if score.value is None:
            assert score.reason, key
        else:
            assert not math.isnan(score.value)
            assert 0.0 <= score.value <= 1.0, key
    for v in res.statements:
        assert v.support is not None and 0.0 <= v.support <= 1.0


def test_fast_on_a_typical_trace() -> None:
    contexts = [" ".join(BRIDGE) * 3, " ".join(LIBRARY) * 3, BRIDGE[1] * 4]
    answer = " ".join(
        ["The Lumen Bridge opened in 1998 and spans 420 metres across the Tamsin River."] * 6
    )
    trace = make_trace(BRIDGE_Q, contexts, answer)
    EV.evaluate(trace)
    runs = [EV.evaluate(trace).latency_ms or 0.0 for _ in range(20)]
    assert sorted(runs)[len(runs) // 2] < 20.0  # generous: the target is a few ms


# --- measured quality on the development data (data/) -----------------------------------------

# bench/detect.py (grouped 5-fold cross-validation by source, 3 repeats) measured tier 0's
# support at a macro AUROC of 0.880 over the six (dataset, task) groups, every group at 0.80 or
# more, against 0.830 for the naive token-overlap baseline. The floors leave a margin for
# harmless changes and the variance of one repeat; a real regression fails.
MACRO_AUROC_FLOOR = 0.85
GROUP_AUROC_FLOOR = 0.76


def test_auroc_ranks_with_ties_averaged() -> None:
    bench = load_bench("detect")
    assert bench.auroc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert bench.auroc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]) == 0.0
    assert bench.auroc([0.5, 0.5, 0.5, 0.5], [True, False, True, False]) == 0.5
    assert bench.auroc([0.7, 0.5, 0.5, 0.1], [True, True, False, False]) == pytest.approx(0.875)
    assert math.isnan(bench.auroc([0.1, 0.2], [True, True]))


def test_detection_quality_under_cross_validation_does_not_regress() -> None:
    for name in ("dev_en.jsonl", "dev_ja.jsonl"):
        dev_data_path("hallucination", name)
    bench = load_bench("detect")
    report = bench.cross_validate(
        bench.load_items(dev_data_path("hallucination")), repeats=1, n_boot=0
    )
    assert report.macro.mean["support"] >= MACRO_AUROC_FLOOR, report.macro
    for group, row in report.groups.items():
        assert row.mean["support"] >= GROUP_AUROC_FLOOR, (group, row)
    # it beats the naive token-overlap baseline, and support is the better-ranking headline
    assert report.macro.mean["support"] > report.macro.mean["base"] + 0.03, report.macro
    assert report.macro.mean["support"] > report.macro.mean["faith"], report.macro
    jhars = report.groups["JHARS / QA"]
    assert jhars.mean["support"] > jhars.mean["base"], jhars


def test_window_search_through_postings_matches_the_plain_scan() -> None:
    """Big traces find the best window through token postings (not statements x windows);
    it must pick the same window with the same recall as scanning every window."""
    from monitor.evaluators import support

    words = [f"w{i}" for i in range(40)]
    sentences = [
        " ".join(words[(i * 7 + k * 3) % 40] for k in range(6)).capitalize() + "."
        for i in range(200)
    ]
    contexts = [(f"c{j}", " ".join(sentences[j * 20 : (j + 1) * 20])) for j in range(10)]
    index = support.ContextIndex.build(contexts, question="w1 w2")
    assert len(index.windows) > support._SMALL_INDEX
    for i in range(0, 200, 13):
        statement = " ".join(words[(i * 5 + k) % 40] for k in range(5))
        toks = support.content_tokens(statement)
        weights = index.weights(dict.fromkeys(toks))
        partial = {t: 0.5 for t in weights if t in index.question_tokens}
        total = sum(weights.values())
        scanned, scanned_pos = 0.0, None
        for pos, window in index.windows:
            r = support._recall(weights, total, window, partial)
            if r > scanned:
                scanned, scanned_pos = r, pos
        value, pos = support._best_window(index, weights, total, partial)
        assert value == pytest.approx(scanned, abs=1e-12)
        assert pos == scanned_pos


def test_documents_without_text_leave_faithfulness_unmeasured_not_wrong() -> None:
    """The model saw documents the trace cannot show: an answer grounded in them would look
    invented, so faithfulness and the context scores are unmeasured, with their own reason."""
    answer = "The Lumen Bridge opened in 1998."
    for contexts in ([], BRIDGE):  # none with text, or some with text and some without
        base = make_trace(BRIDGE_Q, contexts, answer)
        res = EV.evaluate(base.model_copy(update={"contexts_without_text": 2}))
        assert "contexts_without_text" in res.flags and "no_contexts" not in res.flags
        for key in ("faithfulness", "support", "context_precision", "context_utilization"):
            assert res.scores[key] == Score.unmeasured("contexts_without_text")
        assert res.scores["answer_relevancy"].measured
        assert res.statements == []
