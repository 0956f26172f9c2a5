"""The markdown report (docs/metrics.md#golden-report), its JSON result and the recommendations."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.config.golden import DEFAULT_RETRIEVAL_TARGETS
from monitor.golden.dataset import RetrievalQuery
from monitor.golden.evaluation import (
    Observation,
    compare_modes,
    score_retrieval_query,
    summarise_mode,
)
from monitor.golden.recommend import recommend
from monitor.golden.report import (
    describe_significant,
    fmt_value,
    json_path_for,
    render_markdown,
    write_report,
)
from monitor.golden.results import ModeResult, RunResult

STARTED = datetime(2026, 2, 2, 3, 0, 0, tzinfo=UTC)
FINISHED = datetime(2026, 2, 2, 3, 0, 12, tzinfo=UTC)


def _query(i: int, category: str) -> RetrievalQuery:
    return RetrievalQuery.model_validate(
        {
            "id": f"Q{i:03d}",
            "query": f"query {i} | with a pipe",
            "category": category,
            "expected_docs": [
                {"doc_id": f"good{i}", "relevance": 3},
                {"doc_id": f"ok{i}", "relevance": 2},
                {"doc_id": f"meh{i}", "relevance": 1},
            ],
            "metadata": {"language": "ja" if i % 2 else "en"},
        }
    )


QUERIES = [_query(i, "handler_queue" if i <= 4 else "api_usage") for i in range(1, 9)]


def _mode(
    label: str,
    rankings: dict[int, list[str]],
    latency_ms: float,
    *,
    description: str | None = None,
    gated: bool = True,
) -> ModeResult:
    results = []
    for i, query in enumerate(QUERIES, start=1):
        ranking = rankings.get(i, [f"good{i}", f"ok{i}", f"meh{i}"])
        results.append(
            score_retrieval_query(
                query,
                Observation(query.id, doc_ids=tuple(ranking), latency_ms=latency_ms + i),
                cutoffs=[5, 10],
            )
        )
    return summarise_mode(
        label,
        results,
        kind="retrieval",
        params={"mode": label},
        targets=DEFAULT_RETRIEVAL_TARGETS,
        description=description,
        gated=gated,
        length_metric="ndcg_10",
    )


def _noise(i: int, n: int) -> list[str]:
    return [f"x{i}_{k}" for k in range(n)]


def _result() -> RunResult:
    good = _mode("D", {}, 80.0, description="Hybrid + Rerank")
    # the baseline pushes the relevant documents below 5-6 noise documents -> far worse
    worse = {i: [*_noise(i, 5 + i % 2), f"good{i}", f"ok{i}"] for i in range(1, 9)}
    base = _mode("E", worse, 320.0, description="Phase 1 baseline", gated=False)
    comparisons = compare_modes(base, good, ["mrr", "recall_5", "ndcg_5"], n_resamples=500)
    modes = [base, good]
    return RunResult(
        suite="search",
        kind="retrieval",
        dataset="golden/retrieval.yaml",
        dataset_version="1.0",
        n_queries=len(QUERIES),
        started_at=STARTED,
        finished_at=FINISHED,
        duration_seconds=12.0,
        outcome="passed",
        conventions={
            "gain": "exponential",
            "relevance_threshold": 2,
            "cutoffs": [5, 10],
            "top_k": 10,
            "min_effect": 0.3,
            "worst_queries": 3,
        },
        targets=dict(DEFAULT_RETRIEVAL_TARGETS),
        primary_metric="ndcg_5",
        baseline_mode="E",
        modes=modes,
        comparisons=comparisons,
        recommendations=recommend(
            modes, primary_metric="ndcg_5", targets=DEFAULT_RETRIEVAL_TARGETS
        ),
    )


def _section(report: str, heading: str) -> str:
    start = report.index(f"## {heading}")
    end = report.find("\n## ", start + 1)
    return report[start:] if end < 0 else report[start:end]


def test_sections_in_seed_order() -> None:
    report = render_markdown(_result())
    assert report.startswith("# 検索品質評価レポート / Retrieval quality report: search\n")
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    assert headings == [
        "## 概要 (Overview)",
        "## メトリクス比較 (Metrics per mode)",
        "## 有意差検定 (Significance, vs baseline E)",
        "## カテゴリ別分析 (By category)",
        "## 失敗分析 (Failure analysis)",
        "## 推奨事項 (Recommendations)",
    ]
    assert "\n\n\n" not in report


def test_overview() -> None:
    overview = _section(render_markdown(_result()), "概要")
    assert "- 評価日 / Date: 2026-02-02 03:00:00 UTC (12.0 s)" in overview
    assert (
        "`golden/retrieval.yaml`, version 1.0: 8 queries "
        "(2 categories: handler_queue 4, api_usage 4)" in overview
    )
    assert "- 検索方式 / Modes: 2 -- [E] Phase 1 baseline, [D] Hybrid + Rerank" in overview
    assert "relevant = grade ≥ 2, nDCG gain 2^rel - 1" in overview
    assert "- Outcome: **PASSED**" in overview


def test_metrics_table_against_targets() -> None:
    table = _section(render_markdown(_result()), "メトリクス比較")
    header = (
        "| 方式 / Mode | MRR | Recall@5 | NDCG@5 | Recall@10 | NDCG@10 | Coverage | P50(ms) | "
        "P95(ms) | P99(ms) | Targets |"
    )
    assert header in table
    # D is ideal: every quality target met; latencies 81..88 ms: P50 84.5, P95 87.65 -> "88"
    assert (
        "| [D] Hybrid + Rerank | 1.000 ✓ | 1.000 ✓ | 1.000 ✓ | 1.000 | 1.000 | 1.000 | 84 ✓ |"
        in table
    )
    # E: first relevant at rank 6 or 7 -> RR 1/6 (odd i) or 1/7; nothing relevant in the top 5
    e_line = next(line for line in table.splitlines() if line.startswith("| [E]"))
    assert e_line.startswith("| [E] Phase 1 baseline | 0.155 ✗ | 0.000 ✗ | 0.000 ✗ |")
    assert e_line.endswith("| fail (not gated) |")
    assert "324 ✗" in e_line  # P50 324.5 ms against <= 200
    target_row = (
        "| **目標 / Target** | **≥0.70** | **≥0.80** | **≥0.70** | - | - | - | **≤200** | "
        "**≤300** | - |  |"
    )
    assert target_row in table
    assert "Query length (characters) vs NDCG@10, Pearson:" in table


def test_significance_names_the_differences() -> None:
    result = _result()
    section = _section(render_markdown(result), "有意差検定")
    assert "| D vs E | MRR | 0.155 | 1.000 | +0.845 |" in section
    assert "**better**" in section
    sentences = describe_significant(result.comparisons)
    assert sentences[0].startswith("**D** is significantly better than **E** on MRR: 0.155 → 1.000")
    assert "Significant differences:" in section
    # recall 0 -> 1 on every query: identical differences, the t-test is undefined
    assert "| D vs E | Recall@5 | 0.000 | 1.000 | +1.000 |" in section
    assert "undefined (differences have zero variance)" in section


def test_no_significant_difference_is_said() -> None:
    result = _result()
    same = compare_modes(result.modes[1], result.modes[1], ["mrr"], n_resamples=100)
    result = result.model_copy(update={"comparisons": same})
    section = _section(render_markdown(result), "有意差検定")
    assert "No significant difference at alpha = 0.05." in section


def test_group_tables() -> None:
    section = _section(render_markdown(_result()), "カテゴリ別分析")
    assert "| category | n | E: MRR / Recall@5 / NDCG@5 | D: MRR / Recall@5 / NDCG@5 |" in section
    assert "| handler_queue | 4 |" in section and "### By language" in section
    assert "| ja | 4 |" in section


def test_failure_analysis_lists_expected_and_returned_ids() -> None:
    section = _section(render_markdown(_result()), "失敗分析")
    assert "No query of mode D is below the NDCG@5 target." in section
    rows = [line for line in section.splitlines() if line.startswith("| Q")]
    assert len(rows) == 3  # worst_queries = 3
    first = rows[0]
    assert first.startswith("| Q001 | query 1 \\| with a pipe | handler_queue | 0.000 | 0.143 |")
    assert "**`good1`(3)**, **`ok1`(2)**, `meh1`(1)" in first  # expected, relevant in bold
    assert "`x1_0`, `x1_1`" in first and "**`good1`(3)**, **`ok1`(2)** |" in first  # returned


def test_recommendations_come_from_the_tuning_table() -> None:
    result = _result()
    by_metric = {r.metric: r for r in result.recommendations}
    assert by_metric["mrr"].modes == ["E"]
    assert "正解が上位に来ない" in by_metric["mrr"].cause
    assert any("alpha" in a for a in by_metric["mrr"].actions)
    assert any("candidateK" in a for a in by_metric["recall_5"].actions)
    assert any("RRF k" in a for a in by_metric["ndcg_5"].actions)
    latency = by_metric["latency_p50_ms"]
    assert any("Embedding" in a for a in latency.actions) and latency.detail is not None
    assert latency.detail.startswith("target 200 ms; E 324 ms")
    assert {r.source for r in result.recommendations} == {"tuning table"}
    section = _section(render_markdown(result), "推奨事項")
    assert "1. **MRR below target** (modes E)" in section
    assert "   - Cause: relevant documents do not come first (正解が上位に来ない)" in section


def test_recommendations_for_length_and_category() -> None:
    # NDCG@10 falls with query length: the longer queries get the worse rankings
    long_queries = [
        RetrievalQuery.model_validate(
            {
                "id": f"L{i}",
                "query": "x" * (10 * i),
                "category": "long" if i > 3 else "short",
                "expected_docs": [{"doc_id": "a", "relevance": 3}],
            }
        )
        for i in range(1, 7)
    ]
    results = [
        score_retrieval_query(
            q, Observation(q.id, doc_ids=(*(f"n{k}" for k in range(i)), "a")), cutoffs=[5, 10]
        )
        for i, q in enumerate(long_queries)
    ]
    mode = summarise_mode(
        "A",
        results,
        kind="retrieval",
        params={},
        targets={"ndcg_5": 0.7},
        length_metric="ndcg_10",
    )
    assert mode.length_correlation is not None and mode.length_correlation.r is not None
    # nDCG@10 = 1/log2(rank + 1) for ranks 1..6 against lengths 10..60
    assert mode.length_correlation.r == pytest.approx(-0.89241, abs=1e-4)
    assert mode.length_correlation.p_value is not None and mode.length_correlation.p_value < 0.05
    recs = recommend([mode], primary_metric="ndcg_5", targets={"ndcg_5": 0.7})
    problems = [r.problem for r in recs]
    assert "NDCG@5 below target" in problems
    assert "category 'long' is the weakest in mode A" in problems
    assert "longer queries score lower on NDCG@10" in problems
    assert next(r for r in recs if r.source == "question length").modes == ["A"]


def test_all_targets_met() -> None:
    good = _mode("D", {}, 80.0)
    result = _result().model_copy(
        update={"modes": [good], "comparisons": [], "recommendations": []}
    )
    report = render_markdown(result)
    assert "Every target is met; no tuning suggested." in report
    assert "## 有意差検定" not in report


def test_error_outcome_report() -> None:
    result = RunResult(
        suite="search",
        kind="retrieval",
        dataset="x.yaml",
        started_at=STARTED,
        finished_at=FINISHED,
        duration_seconds=1.0,
        outcome="error",
        error="mode A: 12 of 12 queries failed | max 0",
    )
    report = render_markdown(result)
    assert "- Outcome: **ERROR**" in report
    assert "- Error: mode A: 12 of 12 queries failed \\| max 0" in report
    assert "## メトリクス比較" not in report


def test_write_report_puts_json_beside(tmp_path: Path) -> None:
    result = _result()
    md, js = write_report(result, tmp_path / "out" / "search.md")
    assert (md, js) == (tmp_path / "out" / "search.md", tmp_path / "out" / "search.json")
    assert md.read_text(encoding="utf-8") == render_markdown(result)
    data = json.loads(js.read_text(encoding="utf-8"))
    assert data["suite"] == "search" and data["modes"][1]["metrics"]["mrr"] == 1.0
    assert data["comparisons"][0]["verdict"] == "better"
    assert RunResult.model_validate(data) == result
    assert json_path_for(Path("r.json")) == Path("r.json.result.json")


@pytest.mark.parametrize(
    ("metric", "value", "text"),
    [("mrr", 0.70049, "0.700"), ("latency_p95_ms", 312.4, "312"), ("latency_p50_ms", 4.25, "4.2"),
     ("answer_correctness", None, "n/m")],
)  # fmt: skip
def test_fmt_value(metric: str, value: float | None, text: str) -> None:
    assert fmt_value(metric, value) == text
