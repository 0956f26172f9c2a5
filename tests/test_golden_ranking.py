"""Tests of monitor.golden.ranking and monitor.golden.trec.

1. Fixed values computed by hand (the arithmetic is in the comments).
2. NIST trec_eval's own regression fixtures (data/retrieval/trec_eval): our per-query and
   "all" values must equal trec_eval's printed ones within 1e-4 for every measure we compute.
3. JQaRA (data/retrieval/jqara): nDCG/MRR/Recall @5 and @10 of three runs under both
   tie conventions must equal the expected figures within 1e-4.

The data ships in the repository (data/README.md gives its sources and licences).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from monitor.golden.ranking import (
    DEFAULT_CUTOFFS,
    DEFAULT_RELEVANCE_THRESHOLD,
    TREC_EVAL_RELEVANCE_THRESHOLD,
    LatencyPercentiles,
    dcg,
    evaluate_query,
    evaluate_run,
    evaluated_queries,
    gain_of,
    ideal_dcg,
    latency_percentiles,
    mean_over_queries,
    metric_names,
    ndcg_at_k,
    num_relevant,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    result_coverage,
    success_at_k,
)
from monitor.golden.trec import (
    GoldenDataError,
    RunEntry,
    TieBreak,
    load_qrels,
    load_run,
    load_run_entries,
    parse_qrels,
    parse_run,
    rank_entries,
)
from tests.support.dev_data import dev_data_path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "golden"
TOL = 1e-4

# Shared hand example. Grades: d1=3, d2=2, d3=1, d4=0, d5=-1 (trec_eval: unjudged), d6=2.
JUDGMENTS = {"d1": 3, "d2": 2, "d3": 1, "d4": 0, "d5": -1, "d6": 2}
# "x" is not judged at all. d6 is never retrieved.
RANKING = ["d4", "d2", "x", "d3", "d1", "d5"]
LOG2_3 = math.log2(3)  # discount of rank 2 = 1.5849625
LOG2_5 = math.log2(5)  # discount of rank 4 = 2.3219281
LOG2_6 = math.log2(6)  # discount of rank 5 = 2.5849625


# --------------------------------------------------------------------------- binary measures


def test_num_relevant_by_threshold() -> None:
    # >= 2: d1, d2, d6 -> 3;  >= 1: d1, d2, d3, d6 -> 4;  >= 0: d1..d4, d6 -> 5 (d5 is -1)
    assert num_relevant(JUDGMENTS, relevance_threshold=2) == 3
    assert num_relevant(JUDGMENTS, relevance_threshold=1) == 4
    assert num_relevant(JUDGMENTS, relevance_threshold=0) == 5
    assert num_relevant(JUDGMENTS) == 3  # default is >= 2
    assert DEFAULT_RELEVANCE_THRESHOLD == 2 and TREC_EVAL_RELEVANCE_THRESHOLD == 1


def test_reciprocal_rank() -> None:
    # >= 2: first relevant is d2 at rank 2 -> 1/2
    assert reciprocal_rank(RANKING, JUDGMENTS, relevance_threshold=2) == 0.5
    # >= 3: first relevant is d1 at rank 5 -> 1/5
    assert reciprocal_rank(RANKING, JUDGMENTS, relevance_threshold=3) == pytest.approx(0.2)
    # MRR@4 with >= 3: d1 is at rank 5, outside the top 4 -> 0
    assert reciprocal_rank(RANKING, JUDGMENTS, k=4, relevance_threshold=3) == 0.0
    # >= 0: d4 (grade 0) at rank 1 counts -> 1/1
    assert reciprocal_rank(RANKING, JUDGMENTS, relevance_threshold=0) == 1.0
    # nothing relevant retrieved -> 0; empty ranking -> 0
    assert reciprocal_rank(["x", "d4", "d5"], JUDGMENTS, relevance_threshold=1) == 0.0
    assert reciprocal_rank([], JUDGMENTS) == 0.0


def test_negative_grade_is_never_relevant() -> None:
    # d5 has grade -1: not relevant even at threshold 0, and no gain
    assert reciprocal_rank(["d5"], JUDGMENTS, relevance_threshold=0) == 0.0
    assert gain_of(-1, "exponential") == 0.0 and gain_of(-1, "linear") == 0.0
    assert dcg(["d5"], JUDGMENTS) == 0.0


def test_precision_at_k() -> None:
    # top 5 = d4 d2 x d3 d1; >= 2: d2, d1 -> 2 / 5 = 0.4
    assert precision_at_k(RANKING, JUDGMENTS, 5, relevance_threshold=2) == pytest.approx(0.4)
    # >= 1 adds d3 -> 3 / 5 = 0.6
    assert precision_at_k(RANKING, JUDGMENTS, 5, relevance_threshold=1) == pytest.approx(0.6)
    # K = 10 but only 6 retrieved: still divided by K -> 2 / 10 = 0.2
    assert precision_at_k(RANKING, JUDGMENTS, 10, relevance_threshold=2) == pytest.approx(0.2)


def test_recall_at_k() -> None:
    # >= 2 relevant: d1, d2, d6 (3). top 5 holds d2, d1 -> 2/3
    assert recall_at_k(RANKING, JUDGMENTS, 5, relevance_threshold=2) == pytest.approx(2 / 3)
    # top 1 = d4 -> 0/3
    assert recall_at_k(RANKING, JUDGMENTS, 1, relevance_threshold=2) == 0.0
    # >= 1 relevant: d1, d2, d3, d6 (4); top 4 holds d2, d3 -> 2/4
    assert recall_at_k(RANKING, JUDGMENTS, 4, relevance_threshold=1) == pytest.approx(0.5)
    # no relevant document judged -> 0 (not NaN)
    assert recall_at_k(RANKING, {"d4": 0, "d3": 1}, 5, relevance_threshold=2) == 0.0


def test_success_at_k() -> None:
    # >= 2: rank 1 is d4 (0) -> 0; rank 2 is d2 -> success from K = 2
    assert success_at_k(RANKING, JUDGMENTS, 1, relevance_threshold=2) == 0.0
    assert success_at_k(RANKING, JUDGMENTS, 2, relevance_threshold=2) == 1.0


# --------------------------------------------------------------------------- nDCG


def test_gain_functions() -> None:
    # exponential 2^g - 1: 3 -> 7, 2 -> 3, 1 -> 1, 0 -> 0; linear g: 3 -> 3
    assert [gain_of(g, "exponential") for g in (3, 2, 1, 0)] == [7.0, 3.0, 1.0, 0.0]
    assert [gain_of(g, "linear") for g in (3, 2, 1, 0)] == [3.0, 2.0, 1.0, 0.0]
    assert gain_of(None) == 0.0


def test_dcg_and_ideal_dcg_exponential() -> None:
    # DCG@5: ranks 1..5 = d4(0) d2(3) x(0) d3(1) d1(7)
    #   = 3/log2(3) + 1/log2(5) + 7/log2(6) = 1.8927893 + 0.4306766 + 2.7079697 = 5.0314355
    assert dcg(RANKING, JUDGMENTS, 5) == pytest.approx(5.0314355, abs=1e-7)
    assert dcg(RANKING, JUDGMENTS, 5) == pytest.approx(3 / LOG2_3 + 1 / LOG2_5 + 7 / LOG2_6)
    # ideal: gains of all judged docs sorted 7 (d1), 3 (d2), 3 (d6), 1 (d3)
    #   = 7/1 + 3/log2(3) + 3/2 + 1/log2(5) = 7 + 1.8927893 + 1.5 + 0.4306766 = 10.8234658
    assert ideal_dcg(JUDGMENTS, 5) == pytest.approx(10.8234658, abs=1e-7)
    # uncut ideal is the same here: only four documents have a positive grade
    assert ideal_dcg(JUDGMENTS) == pytest.approx(10.8234658, abs=1e-7)


def test_ndcg_exponential() -> None:
    # nDCG@5 = 5.0314355 / 10.8234658 = 0.4648636
    assert ndcg_at_k(RANKING, JUDGMENTS, 5) == pytest.approx(0.4648636, abs=1e-7)
    # nDCG@3: DCG = 3/log2(3) = 1.8927893; IDCG@3 = 7 + 1.8927893 + 1.5 = 10.3927893
    #   -> 0.1821252
    assert ndcg_at_k(RANKING, JUDGMENTS, 3) == pytest.approx(0.1821252, abs=1e-7)
    # no cut: DCG over all 6 retrieved (d5 at rank 6 has no gain) = 5.0314355, IDCG = 10.8234658
    assert ndcg_at_k(RANKING, JUDGMENTS) == pytest.approx(0.4648636, abs=1e-7)


def test_ndcg_linear() -> None:
    # DCG@5 = 2/log2(3) + 1/log2(5) + 3/log2(6) = 1.2618595 + 0.4306766 + 1.1605584 = 2.8530945
    # IDCG@5 = 3 + 2/log2(3) + 2/2 + 1/log2(5) = 3 + 1.2618595 + 1 + 0.4306766 = 5.6925361
    # nDCG@5 = 2.8530945 / 5.6925361 = 0.5011992
    assert dcg(RANKING, JUDGMENTS, 5, gain="linear") == pytest.approx(2.8530945, abs=1e-7)
    assert ideal_dcg(JUDGMENTS, 5, gain="linear") == pytest.approx(5.6925361, abs=1e-7)
    assert ndcg_at_k(RANKING, JUDGMENTS, 5, gain="linear") == pytest.approx(0.5011992, abs=1e-7)


def test_ndcg_edge_cases() -> None:
    # perfect order -> 1; no positive grade at all -> 0 (not NaN); empty ranking -> 0
    assert ndcg_at_k(["d1", "d2", "d6", "d3"], JUDGMENTS, 4) == pytest.approx(1.0)
    assert ndcg_at_k(["d4"], {"d4": 0, "d5": -1}, 5) == 0.0
    assert ndcg_at_k([], JUDGMENTS, 5) == 0.0
    # ideal uses unretrieved judged documents: retrieving only d1 (7) of 7, 3, 3, 1
    # nDCG (uncut) = 7 / 10.8234658 = 0.6467426
    assert ndcg_at_k(["d1"], JUDGMENTS) == pytest.approx(7 / 10.8234658, abs=1e-7)


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="repeats"):
        reciprocal_rank(["d1", "d2", "d1"], JUDGMENTS)
    with pytest.raises(ValueError):
        precision_at_k(RANKING, JUDGMENTS, 0)
    with pytest.raises(ValueError):
        recall_at_k(RANKING, JUDGMENTS, True)
    with pytest.raises(ValueError):
        reciprocal_rank(RANKING, JUDGMENTS, relevance_threshold=-1)
    with pytest.raises(ValueError):
        gain_of(2, "cubic")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        reciprocal_rank("d1", JUDGMENTS)
    with pytest.raises(ValueError):
        evaluate_query(RANKING, JUDGMENTS, cutoffs=(5, 5))


# --------------------------------------------------------------------------- aggregation


def test_evaluate_query_names_and_values() -> None:
    values = evaluate_query(RANKING, JUDGMENTS, cutoffs=(5,))
    assert list(values) == metric_names((5,))
    assert values["recip_rank"] == 0.5  # d2 at rank 2, threshold 2 by default
    assert values["recip_rank_cut_5"] == 0.5
    assert values["P_5"] == pytest.approx(0.4)
    assert values["recall_5"] == pytest.approx(2 / 3)
    assert values["success_5"] == 1.0
    assert values["ndcg_cut_5"] == pytest.approx(0.4648636, abs=1e-7)  # exponential default
    assert values["ndcg"] == pytest.approx(0.4648636, abs=1e-7)
    assert DEFAULT_CUTOFFS == (5, 10)


def test_the_documented_mrr_example() -> None:
    # docs/metrics.md's example: first correct answer at rank 1, 3, 2 and never ->
    # MRR = (1 + 1/3 + 1/2 + 0) / 4 = 0.4583333
    qrels = {f"Q{i}": {"good": 3} for i in range(1, 5)}
    run = {
        "Q1": ["good", "a", "b"],
        "Q2": ["a", "b", "good"],
        "Q3": ["a", "good", "b"],
        "Q4": ["a", "b", "c"],
    }
    per_query = evaluate_run(run, qrels)
    assert mean_over_queries(per_query).means["recip_rank"] == pytest.approx(0.4583333, abs=1e-7)


# qrels: q1 and q2 normal, q3 has only a grade-1 document (no relevant doc at >= 2),
# q4 is judged but missing from the run; the run also has q5, which is not judged.
AVG_QRELS = {
    "q1": {"a": 3, "b": 0},
    "q2": {"c": 2},
    "q3": {"d": 1},
    "q4": {"e": 2},
}
AVG_RUN = {"q1": ["a", "b"], "q2": ["x", "c"], "q3": ["d"], "q5": ["a"]}


def test_averaging_default_counts_missing_queries_as_zero() -> None:
    # default (trec_eval -c): q1 q2 q3 q4 evaluated; q5 ignored
    # recip_rank: q1 1, q2 1/2, q3 0 (d is only grade 1), q4 0 -> 1.5 / 4 = 0.375
    per_query = evaluate_run(AVG_RUN, AVG_QRELS)
    assert list(per_query) == ["q1", "q2", "q3", "q4"]
    assert all(v == 0.0 for v in per_query["q4"].values())
    assert mean_over_queries(per_query).means["recip_rank"] == pytest.approx(0.375)
    assert mean_over_queries(per_query).num_q == 4


def test_averaging_trec_eval_default_skips_missing_queries() -> None:
    # trec_eval without -c: q4 (not in the run) is skipped -> (1 + 0.5 + 0) / 3 = 0.5
    per_query = evaluate_run(AVG_RUN, AVG_QRELS, missing_queries="skip")
    assert list(per_query) == ["q1", "q2", "q3"]
    assert mean_over_queries(per_query).means["recip_rank"] == pytest.approx(0.5)


def test_averaging_can_skip_queries_without_relevant_documents() -> None:
    # no_relevant="skip": q3 has no document with grade >= 2 -> left out: (1 + 0.5 + 0) / 3
    per_query = evaluate_run(AVG_RUN, AVG_QRELS, no_relevant="skip")
    assert list(per_query) == ["q1", "q2", "q4"]
    assert mean_over_queries(per_query).means["recip_rank"] == pytest.approx(0.5)
    # with threshold 1, q3 does have a relevant document and stays
    assert evaluated_queries(AVG_RUN, AVG_QRELS, relevance_threshold=1, no_relevant="skip") == [
        "q1",
        "q2",
        "q3",
        "q4",
    ]
    # q3's nDCG is graded, not thresholded: d (grade 1) at rank 1 is ideal -> 1.0
    assert per_query.get("q3") is None
    assert evaluate_run(AVG_RUN, AVG_QRELS)["q3"]["ndcg"] == 1.0


def test_mean_over_queries_rejects_empty_and_ragged() -> None:
    with pytest.raises(ValueError):
        mean_over_queries({})
    with pytest.raises(ValueError):
        mean_over_queries({"a": {"x": 1.0}, "b": {"y": 1.0}})


def test_success_at_k_averages_to_the_share_of_queries_with_a_hit() -> None:
    # default averaging over q1..q4 (threshold 2): success_1 is q1 only -> 1/4;
    # success_2 adds q2 (c at rank 2) -> 2/4
    means = mean_over_queries(evaluate_run(AVG_RUN, AVG_QRELS, cutoffs=(1, 2))).means
    assert means["success_1"] == pytest.approx(0.25)
    assert means["success_2"] == pytest.approx(0.5)
    # skipping q4 (missing from the run): 2/3
    skipped = evaluate_run(AVG_RUN, AVG_QRELS, cutoffs=(2,), missing_queries="skip")
    assert mean_over_queries(skipped).means["success_2"] == pytest.approx(2 / 3)


def test_result_coverage() -> None:
    # the report's coverage: queries that returned >= 1 document / all queries.
    # q1 q2 q3 returned something, q4 is absent, q6 returned an empty list -> 3/5
    run = {**AVG_RUN, "q6": []}
    assert result_coverage(run, ["q1", "q2", "q3", "q4", "q6"]) == pytest.approx(0.6)
    with pytest.raises(ValueError):
        result_coverage(run, [])


# --------------------------------------------------------------------------- latency


def test_latency_percentiles_linear_interpolation() -> None:
    # sorted [10, 20, 30, 40], n = 4. Position h = (n - 1) * p / 100:
    # P50: h = 1.5  -> 20 + 0.5  * (30 - 20) = 25
    # P95: h = 2.85 -> 30 + 0.85 * (40 - 30) = 38.5
    # P99: h = 2.97 -> 30 + 0.97 * (40 - 30) = 39.7
    result = latency_percentiles([40.0, 10.0, 30.0, 20.0])
    assert result.n == 4 and result.reason is None
    assert result.p50 == pytest.approx(25.0)
    assert result.p95 == pytest.approx(38.5)
    assert result.p99 == pytest.approx(39.7)


def test_latency_percentiles_1_to_100() -> None:
    # 1..100: h = 99 * p / 100. P50: h = 49.5 -> 50.5; P95: h = 94.05 -> 95.05;
    # P99: h = 98.01 -> 99.01
    result = latency_percentiles([float(v) for v in range(1, 101)])
    assert (result.p50, result.p95, result.p99) == pytest.approx((50.5, 95.05, 99.01))


def test_latency_percentiles_degenerate() -> None:
    assert latency_percentiles([]) == LatencyPercentiles(
        n=0, p50=None, p95=None, p99=None, reason="no latencies"
    )
    single = latency_percentiles([123.0])
    assert (single.p50, single.p95, single.p99) == (123.0, 123.0, 123.0)
    with pytest.raises(ValueError):
        latency_percentiles([1.0, float("nan")])
    with pytest.raises(ValueError):
        latency_percentiles([-1.0])


# --------------------------------------------------------------------------- TREC files


def test_load_qrels_fixture() -> None:
    qrels = load_qrels(FIXTURES / "tiny.qrels")
    # the blank line is skipped; grades stay integers, -1 included
    assert qrels == {"q1": {"d3": 1, "9": 2, "10": 0}, "q2": {"x": -1}, "q3": {"y": 3}}


def test_load_run_trec_eval_order() -> None:
    # q1 lines: 10 (rank 1, 0.5), 9 (rank 2, 0.5), d3 (rank 3, 0.9), a (rank 4, 0.5).
    # trec_eval ignores the rank column: score desc -> d3 first; the three 0.5 ties go by doc id
    # descending as strings: "a" > "9" > "10" (a numeric compare would put 10 before 9).
    run = load_run(FIXTURES / "tiny.run")
    assert run == {"q1": ["d3", "a", "9", "10"], "q2": ["x"], "q4": ["z"]}


def test_load_run_stable_order() -> None:
    # "stable" keeps the file order of each query's lines
    run = load_run(FIXTURES / "tiny.run", tie_break="stable")
    assert run["q1"] == ["10", "9", "d3", "a"]


def test_load_run_entries_fields() -> None:
    entries = load_run_entries(FIXTURES / "tiny.run")
    assert entries[1] == RunEntry(qid="q1", docid="9", rank=2, score=0.5, tag="sys", line=2)
    assert entries[-1].score == -0.25  # "-2.5e-1"


def test_separators_are_ascii_whitespace_only(tmp_path: Path) -> None:
    # CRLF line ends are fine; U+3000 (ideographic space) stays inside a field
    path = tmp_path / "ja.run"
    path.write_bytes("q1 Q0 文書\u3000一 1 0.5 sys\r\nq1\tQ0\t文書2\t2\t0.4\tsys\r\n".encode())
    assert load_run(path) == {"q1": ["文書\u3000一", "文書2"]}
    entries = load_run_entries(path)
    assert [e.line for e in entries] == [1, 2]


def test_rank_entries_rejects_unknown_convention() -> None:
    with pytest.raises(ValueError):
        rank_entries([], tie_break="rank")  # type: ignore[arg-type]


def test_duplicate_doc_in_run_names_file_line_field() -> None:
    path = FIXTURES / "duplicate_doc.run"
    with pytest.raises(GoldenDataError) as info:
        load_run(path)
    assert info.value.path == str(path)
    assert info.value.line == 3
    assert info.value.field == "docid"
    assert "first on line 1" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bad_grade_in_qrels_names_file_line_field() -> None:
    path = FIXTURES / "bad_grade.qrels"
    with pytest.raises(GoldenDataError) as info:
        load_qrels(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, "grade")
    assert str(info.value).startswith(f"{path}:2 [grade]")


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("q1 Q0 d1 1 0.5 sys\nq1 Q0 d2 2 high sys\n", 2, "score"),
        ("q1 Q0 d1 1 nan sys\n", 1, "score"),
        ("q1 Q0 d1 first 0.5 sys\n", 1, "rank"),
        ("q1 Q0 d1 1 0.5\n", 1, "tag"),
        ("q1 Q0\n", 1, "docid"),
        ("q1 Q0 d1 1 0.5 sys extra\n", 1, "extra"),
    ],
)
def test_malformed_run_lines(text: str, line: int, field: str) -> None:
    with pytest.raises(GoldenDataError) as info:
        parse_run(text.splitlines(), path="mem.run")
    assert (info.value.path, info.value.line, info.value.field) == ("mem.run", line, field)


def test_malformed_qrels_lines() -> None:
    with pytest.raises(GoldenDataError) as info:
        parse_qrels(["q1 0 d1 1", "q1 0 d1 2"], path="mem.qrels")
    assert (info.value.line, info.value.field) == (2, "docid")
    with pytest.raises(GoldenDataError) as info:
        parse_qrels(["q1 0 d1"], path="mem.qrels")
    assert (info.value.line, info.value.field) == (1, "grade")


def test_missing_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(GoldenDataError) as info:
        load_qrels(tmp_path / "absent.qrels")
    assert info.value.line is None
    bad = tmp_path / "latin1.run"
    bad.write_bytes(b"q1 Q0 d\xe9 1 0.5 sys\n")
    with pytest.raises(GoldenDataError, match="UTF-8"):
        load_run(bad)


# --------------------------------------------------------------------------- trec_eval fixtures

_CUT_MEASURE = re.compile(r"^(P|recall|success|ndcg_cut)_(\d+)$")
_COMPARED = re.compile(r"^(recip_rank|ndcg|(P|recall|success|ndcg_cut)_\d+)$")


def _read_trec_eval_output(path: Path) -> dict[str, dict[str, str]]:
    """trec_eval -q output: ``measure <tab> qid|all <tab> value`` -> {qid: {measure: value}}."""
    table: dict[str, dict[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        measure, qid, value = (part.strip() for part in line.split("\t"))
        table.setdefault(qid, {})[measure] = value
    return table


# (qrels file, trec_eval output file, -l level, measures that must be among those compared).
# Commands from trec_eval's Makefile (quicktest):
#   out.test             trec_eval qrels.test results.test
#   out.test.aq          trec_eval -m all_trec -q qrels.test results.test
#   out.test.aql         trec_eval -m all_trec -mrelstring.20 -q -l2 qrels.rel_level results.test
#   out.test.meas_params trec_eval -q -m P.5,7,3 -m recall.20,2000 -mndcg_cut.10,20,23.4
#                        -msuccess.2,5,20 -mndcg.1=3,2=9,4=4.5 ... qrels.test results.test
TREC_EVAL_CASES = [
    ("qrels.test", "out.test", 1, {"recip_rank", "P_5", "P_10", "P_1000"}),
    (
        "qrels.test",
        "out.test.aq",
        1,
        {"recip_rank", "ndcg", "P_5", "recall_10", "success_1", "ndcg_cut_1000"},
    ),
    (
        "qrels.rel_level",
        "out.test.aql",
        2,
        {"recip_rank", "ndcg", "P_5", "recall_10", "success_10", "ndcg_cut_5"},
    ),
    (
        "qrels.test",
        "out.test.meas_params",
        1,
        {"P_3", "P_7", "recall_2000", "success_2", "ndcg_cut_23"},
    ),
]


@pytest.mark.parametrize(("qrels_name", "out_name", "level", "must_compare"), TREC_EVAL_CASES)
def test_matches_trec_eval_fixtures(
    qrels_name: str, out_name: str, level: int, must_compare: set[str]
) -> None:
    base = dev_data_path("retrieval", "trec_eval")
    qrels = load_qrels(dev_data_path("retrieval", "trec_eval", qrels_name))
    run = load_run(base / "results.test", tie_break="trec_eval")
    expected = _read_trec_eval_output(dev_data_path("retrieval", "trec_eval", out_name))

    measures = {m for values in expected.values() for m in values}
    cutoffs = sorted({int(m.group(2)) for m in map(_CUT_MEASURE.match, measures) if m})
    per_query = evaluate_run(
        run,
        qrels,
        cutoffs=cutoffs,
        relevance_threshold=level,
        gain="linear",
        missing_queries="skip",  # trec_eval without -c
    )
    ours: dict[str, dict[str, float]] = {qid: dict(v) for qid, v in per_query.items()}
    summary = mean_over_queries(per_query)
    ours["all"] = dict(summary.means)
    if "num_q" in expected["all"]:
        assert summary.num_q == int(expected["all"]["num_q"])

    compared: set[str] = set()
    mismatches = []
    for qid, values in expected.items():
        for measure, text in values.items():
            if not _COMPARED.match(measure):
                continue
            compared.add(measure)
            got = ours[qid][measure]
            if abs(got - float(text)) > TOL:
                mismatches.append((qid, measure, got, text))
        if qid == "all":
            continue
        # counts: relevant judged docs, retrieved docs, relevant retrieved docs
        judgments = qrels[qid]
        if "num_rel" in values:
            assert num_relevant(judgments, relevance_threshold=level) == int(values["num_rel"])
        if "num_ret" in values:
            assert len(run[qid]) == int(values["num_ret"])
        if "num_rel_ret" in values:
            rel_ret = sum(1 for d in run[qid] if judgments.get(d, -1) >= level)
            assert rel_ret == int(values["num_rel_ret"])
        # custom gains 1=3,2=9,4=4.5 on binary qrels only rescale every gain by 3: same nDCG
        if "ndcg_1=3,2=9,4=4.5" in values:
            assert abs(ours[qid]["ndcg"] - float(values["ndcg_1=3,2=9,4=4.5"])) <= TOL
    assert not mismatches, mismatches
    assert must_compare <= compared, must_compare - compared
    # with -q, trec_eval printed exactly the queries we evaluated (out.test has no -q)
    printed = set(expected) - {"all"}
    assert printed == set(per_query) or (out_name == "out.test" and not printed)


def test_trec_eval_tie_break_matters_on_its_fixture() -> None:
    # results.test has tied scores and rank numbers unrelated to the scores: the stored order
    # gives recip_rank 0.0790 instead of trec_eval's 0.4064, so the convention is exercised.
    base = dev_data_path("retrieval", "trec_eval")
    qrels = load_qrels(base / "qrels.test")
    expected = _read_trec_eval_output(base / "out.test")["all"]
    cases: list[tuple[TieBreak, bool]] = [("trec_eval", True), ("stable", False)]
    for tie_break, should_match in cases:
        run = load_run(base / "results.test", tie_break=tie_break)
        per_query = evaluate_run(
            run, qrels, relevance_threshold=1, gain="linear", missing_queries="skip"
        )
        got = mean_over_queries(per_query).means["recip_rank"]
        assert (abs(got - float(expected["recip_rank"])) <= TOL) is should_match


def test_missing_query_counts_as_zero_like_trec_eval_c() -> None:
    # Drop topic 302 from the run: trec_eval averages over 2 queries by default, over 3 with -c
    # (302 then scores 0). From out.test.aq per-query recip_rank: 301 0.1667, 303 0.0435.
    base = dev_data_path("retrieval", "trec_eval")
    qrels = load_qrels(base / "qrels.test")
    run = load_run(base / "results.test")
    del run["302"]
    out = _read_trec_eval_output(base / "out.test.aq")
    rr = {q: float(out[q]["recip_rank"]) for q in ("301", "303")}
    skip = evaluate_run(run, qrels, relevance_threshold=1, missing_queries="skip")
    zero = evaluate_run(run, qrels, relevance_threshold=1, missing_queries="zero")
    assert list(skip) == ["301", "303"] and list(zero) == ["301", "302", "303"]
    assert mean_over_queries(skip).means["recip_rank"] == pytest.approx(
        (rr["301"] + rr["303"]) / 2, abs=TOL
    )
    assert mean_over_queries(zero).means["recip_rank"] == pytest.approx(
        (rr["301"] + rr["303"] + 0.0) / 3, abs=TOL
    )


# --------------------------------------------------------------------------- JQaRA

JQARA_RUNS = [
    "jqara_bm25.top10.trec",
    "jqara_multilingual-e5-small.top10.trec",
    "jqara_ruri-reranker-large.top10.trec",
]
JQARA_CONVENTIONS = {
    "stable": "expected_using_rank_column",
    "trec_eval": "expected_using_trec_eval_convention(score desc, docno desc)",
}


@pytest.fixture(scope="module")
def jqara_qrels() -> dict[str, dict[str, int]]:
    return load_qrels(dev_data_path("retrieval", "jqara", "qrels.trec"))


@pytest.mark.parametrize("tie_break", ["stable", "trec_eval"])
@pytest.mark.parametrize("run_name", JQARA_RUNS)
def test_matches_jqara_expected_metrics(
    jqara_qrels: dict[str, dict[str, int]], run_name: str, tie_break: TieBreak
) -> None:
    expected_doc = json.loads(
        dev_data_path("retrieval", "jqara", "jqara_expected_metrics.json").read_text(
            encoding="utf-8"
        )
    )
    assert len(jqara_qrels) == expected_doc["qrels_queries"] == 1667
    expected = expected_doc["top10_files"][run_name][JQARA_CONVENTIONS[tie_break]]
    run = load_run(dev_data_path("retrieval", "jqara", run_name), tie_break=tie_break)
    assert set(run) == set(jqara_qrels)
    # "averaged over ALL 1667 qrels queries"; binary grades, gain = rel, relevant = rel > 0
    per_query = evaluate_run(
        run,
        jqara_qrels,
        cutoffs=(5, 10),
        relevance_threshold=1,
        gain="linear",
        missing_queries="zero",
    )
    summary = mean_over_queries(per_query)
    assert summary.num_q == 1667
    ours = {
        "ndcg@5": summary.means["ndcg_cut_5"],
        "mrr@5": summary.means["recip_rank_cut_5"],
        "recall@5": summary.means["recall_5"],
        "ndcg@10": summary.means["ndcg_cut_10"],
        "mrr@10": summary.means["recip_rank_cut_10"],
        "recall@10": summary.means["recall_10"],
    }
    assert set(expected) == set(ours)
    for name, value in expected.items():
        assert ours[name] == pytest.approx(value, abs=TOL), name
