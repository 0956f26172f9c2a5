"""Recommendations for a run, drawn from the tuning table (docs/metrics.md#tuning-table).

Pure functions, no I/O. One recommendation per missed target (listing the modes that miss
it), in the table's words where it has a row for the measure:

=================  ====================================  ======================================
problem            likely cause                          tuning
=================  ====================================  ======================================
MRR below target   relevant documents do not come first  tune alpha (BM25/vector weight),
                   (正解が上位に来ない)                   strengthen reranking
Recall@K below     relevant documents are not in the     raise candidateK, strengthen query
                   results (正解が結果に含まれない)        expansion
NDCG@K below       the order is not right                change the reranking model, adjust
                   (順序が適切でない)                     RRF k
latency above      search is slow (検索処理が遅い)        embedding cache, index optimisation
=================  ====================================  ======================================

Beyond the table: sweep values that significantly beat their base mode (the sensitivity
analysis), a significant negative correlation between query length and nDCG, the weakest
category, and the answer checks of generation suites.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.config.golden.measures import display_name
from monitor.golden.evaluation import best_mode
from monitor.golden.results import Comparison, ModeResult, Recommendation


@dataclass(frozen=True)
class _Row:
    problem: str
    cause: str
    actions: tuple[str, ...]
    source: str = "tuning table"


_TUNING_ROWS: dict[str, _Row] = {
    "mrr": _Row(
        "{name} below target",
        "relevant documents do not come first (正解が上位に来ない)",
        (
            "tune alpha, the BM25/vector weight (α値調整)",
            "strengthen reranking (リランキング強化)",
        ),
    ),
    "recall": _Row(
        "{name} below target",
        "relevant documents are not in the results (正解が結果に含まれない)",
        (
            "raise candidateK, the candidates fed to fusion (candidateK増加)",
            "strengthen query expansion (クエリ拡張強化)",
        ),
    ),
    "ndcg": _Row(
        "{name} below target",
        "the ranking order is not right (順序が適切でない)",
        (
            "change the reranking model (リランキングモデル変更)",
            "adjust RRF k (RRF k値調整)",
        ),
    ),
    "latency": _Row(
        "{name} above target",
        "search is slow (検索処理が遅い)",
        (
            "cache embeddings (Embeddingキャッシュ)",
            "optimise the index (インデックス最適化)",
        ),
    ),
    "precision": _Row(
        "{name} below target",
        "irrelevant documents crowd the top results",
        ("strengthen reranking", "raise the retrieval score threshold or lower top_k"),
        "rag-monitor",
    ),
    "success": _Row(
        "{name} below target",
        "for some queries no relevant document reaches the top K",
        ("raise candidateK", "strengthen query expansion"),
        "rag-monitor",
    ),
    "coverage": _Row(
        "{name} below target",
        "some queries return nothing (or no answer)",
        (
            "check the index covers the golden set's documents",
            "check filters and minimum-score thresholds",
        ),
        "rag-monitor",
    ),
    "must_not_contain_rate": _Row(
        "answers contain forbidden content ({name} above target)",
        "hallucination: the answer states what the contexts do not support",
        (
            "tighten the grounding instruction (answer only from the contexts)",
            "lower the generation temperature",
            "check the contexts for misleading passages",
        ),
        "answer checks",
    ),
    "no_context_pass_rate": _Row(
        "answers without supporting context do not admit it ({name} below target)",
        "the model answers from its own knowledge when retrieval finds nothing",
        (
            "instruct the model to say it does not know when the contexts lack the answer",
            "pass an explicit 'no relevant documents' marker when retrieval is empty",
        ),
        "answer checks",
    ),
    "language_pass_rate": _Row(
        "answers in the wrong language ({name} below target)",
        "the prompt does not pin the answer language",
        ("instruct the model to answer in the question's language",),
        "answer checks",
    ),
    "topic_coverage": _Row(
        "expected topics missing from answers ({name} below target)",
        "the contexts lack the facts, or the answer is too terse",
        ("check retrieval recall for these questions", "raise top_k or the context budget"),
        "answer checks",
    ),
    "false_refusal_rate": _Row(
        "answerable questions are refused ({name} above target)",
        "retrieval misses the answer, or the refusal instruction is too eager",
        ("check retrieval recall for these questions", "soften the refusal instruction"),
        "rag-monitor",
    ),
    "answer_correctness": _Row(
        "answers disagree with the references ({name} below target)",
        "wrong or incomplete answers",
        ("check context recall first; if it is high, revisit the prompt or the model",),
        "reference scores",
    ),
    "semantic_similarity": _Row(
        "answers drift from the references ({name} below target)",
        "the answer's content differs from the reference",
        ("revisit the prompt or the model",),
        "reference scores",
    ),
    "context_recall": _Row(
        "contexts miss facts the references need ({name} below target)",
        "retrieval does not find everything the answer needs",
        ("raise candidateK / top_k", "strengthen query expansion"),
        "reference scores",
    ),
    "faithfulness": _Row(
        "answers state what the contexts do not support ({name} below target)",
        "the model adds knowledge or invents details beyond the retrieved text",
        (
            "tell the model to answer only from the contexts and to say when they lack it",
            "lower the temperature",
        ),
        "answer checks",
    ),
    "answer_relevancy": _Row(
        "answers do not address the question ({name} below target)",
        "evasive, off-topic or padded answers",
        ("revisit the prompt", "check that the question reaches the model unaltered"),
        "answer checks",
    ),
    "context_relevancy": _Row(
        "retrieved contexts are mostly irrelevant ({name} below target)",
        "retrieval returns noise around the useful passages",
        ("add or tune a reranker", "lower top_k", "chunk documents smaller"),
        "answer checks",
    ),
}

_FAMILY = re.compile(r"^(mrr|recall|ndcg|precision|success)(?:_\d+)?$")


def _row_for(metric: str) -> _Row | None:
    if metric.startswith("latency_"):
        return _TUNING_ROWS["latency"]
    match = _FAMILY.match(metric)
    if match is not None:
        return _TUNING_ROWS[match.group(1)]
    return _TUNING_ROWS.get(metric)


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "unmeasured"
    return f"{value:.0f} ms" if metric.startswith("latency_") else f"{value:.3f}"


def _missed_targets(modes: Sequence[ModeResult]) -> list[Recommendation]:
    missed: dict[str, list[ModeResult]] = {}
    for mode in modes:
        for check in mode.targets:
            if check.passed is False:
                missed.setdefault(check.metric, []).append(mode)
    out: list[Recommendation] = []
    for metric, failing in missed.items():
        row = _row_for(metric)
        if row is None:
            continue
        target = next(c.target for c in failing[0].targets if c.metric == metric)
        values = ", ".join(f"{m.label} {_fmt(m.metrics.get(metric), metric)}" for m in failing)
        out.append(
            Recommendation(
                metric=metric,
                problem=row.problem.format(name=display_name(metric)),
                cause=row.cause,
                actions=list(row.actions),
                modes=[m.label for m in failing],
                detail=f"target {_fmt(target, metric)}; {values}",
                source=row.source,
            )
        )
    return out


def _sweep_findings(
    sweeps: Sequence[ModeResult], comparisons: Sequence[Comparison], primary: str
) -> list[Recommendation]:
    if not sweeps:
        return []
    better = [c for c in comparisons if c.metric == primary and c.verdict == "better"]
    if not better:
        base = sweeps[0].variant_of or "?"
        return [
            Recommendation(
                metric=primary,
                problem="no swept parameter value significantly beats the current setting",
                cause="the current parameters are at (or near) the best this sweep covers",
                actions=[f"keep the parameters of mode {base}; widen the sweep ranges if needed"],
                modes=[base],
                source="sensitivity analysis",
            )
        ]
    best = max(better, key=lambda c: c.mean_diff or 0.0)
    variant = next(m for m in sweeps if m.label == best.candidate)
    setting = ", ".join(f"{k}={v!r}" for k, v in (variant.sweep or {}).items())
    return [
        Recommendation(
            metric=primary,
            problem=f"{setting} improves {display_name(primary)} over mode {best.baseline}",
            cause="parameter sensitivity analysis (パラメータ感度分析)",
            actions=[f"set {setting} on mode {best.baseline}, then re-evaluate"],
            modes=[best.baseline],
            detail=(
                f"{display_name(primary)} {best.baseline_mean:.3f} -> "
                f"{best.candidate_mean:.3f} (p={best.p_value:.3g}, d={best.cohens_d:.2f})"
                if best.baseline_mean is not None
                and best.candidate_mean is not None
                and best.p_value is not None
                and best.cohens_d is not None
                else None
            ),
            source="sensitivity analysis",
        )
    ]


def _length_findings(modes: Sequence[ModeResult], alpha: float) -> list[Recommendation]:
    hits = [
        m
        for m in modes
        if m.length_correlation is not None
        and m.length_correlation.r is not None
        and m.length_correlation.p_value is not None
        and m.length_correlation.r < 0
        and m.length_correlation.p_value < alpha
    ]
    if not hits:
        return []
    metric = hits[0].length_correlation.metric if hits[0].length_correlation else "ndcg"
    detail = "; ".join(
        f"{m.label} r={m.length_correlation.r:.2f} (p={m.length_correlation.p_value:.3g})"
        for m in hits
        if m.length_correlation is not None
        and m.length_correlation.r is not None
        and m.length_correlation.p_value is not None
    )
    return [
        Recommendation(
            metric=metric,
            problem=f"longer queries score lower on {display_name(metric)}",
            cause="the retriever/reranker handles long questions poorly",
            actions=[
                "rewrite or condense long questions before retrieval (e.g. HyDE, keyword "
                "extraction)",
                "prefer a reranker that is robust to long queries",
            ],
            modes=[m.label for m in hits],
            detail=detail,
            source="question length",
        )
    ]


def _weakest_category(
    modes: Sequence[ModeResult], primary: str, targets: dict[str, float]
) -> list[Recommendation]:
    best = best_mode([m for m in modes if m.gated], primary)
    if best is None or "category" not in best.groups or len(best.groups["category"]) < 2:
        return []
    scored = [
        (label, group.metrics.get(primary))
        for label, group in best.groups["category"].items()
        if group.metrics.get(primary) is not None
    ]
    if not scored:
        return []
    label, value = min(scored, key=lambda item: item[1] or 0.0)
    target = targets.get(primary)
    if value is None or target is None or value >= target:
        return []
    return [
        Recommendation(
            metric=primary,
            problem=f"category {label!r} is the weakest in mode {best.label}",
            cause="documents of this category are missing, poorly chunked or phrased unlike "
            "the questions",
            actions=[
                "review the failure analysis for this category",
                "check the category's documents are indexed and chunked sensibly",
            ],
            modes=[best.label],
            detail=f"{display_name(primary)} {value:.3f} against target {target:.2f}",
            source="rag-monitor",
        )
    ]


def recommend(
    modes: Sequence[ModeResult],
    *,
    primary_metric: str,
    targets: dict[str, float],
    sweeps: Sequence[ModeResult] = (),
    sweep_comparisons: Sequence[Comparison] = (),
    alpha: float = 0.05,
) -> list[Recommendation]:
    """Every recommendation for a run (see the module docstring), most important first."""
    return [
        *_missed_targets(modes),
        *_weakest_category(modes, primary_metric, targets),
        *_length_findings(modes, alpha),
        *_sweep_findings(sweeps, sweep_comparisons, primary_metric),
    ]


__all__ = ["recommend"]
