"""Names of golden-set measures: what each is called in results, labels and targets.

Retrieval (per query, averaged over queries): ``mrr`` (reciprocal rank of the first relevant
document in everything returned), ``ndcg`` (uncut), and for each cutoff K ``mrr_K``,
``recall_K``, ``precision_K``, ``success_K``, ``ndcg_K``. Per mode only: ``coverage`` (
share of queries that returned at least one document) and ``latency_p50_ms``,
``latency_p95_ms``, ``latency_p99_ms``.

Generation (per case, averaged over the cases where it applies): ``must_not_contain_rate``,
``topic_coverage``, ``no_context_pass_rate``, ``false_refusal_rate``, ``language_pass_rate``,
``answer_correctness``, ``semantic_similarity``, ``context_recall``, ``faithfulness``,
``answer_relevancy``, ``context_relevancy``; per mode ``coverage``
(share of cases with a non-empty answer) and the latency percentiles.

Latency and the two ``*_rate`` measures of bad outcomes are better when lower; every other
measure is better when higher. These are the ``metric`` label values of
``ragmon_golden_metric_ratio`` and the keys of a suite's ``targets``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Literal

Kind = Literal["retrieval", "generation"]

LATENCY_MEASURES: Final = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")

GENERATION_MEASURES: Final = (
    "answer_correctness",
    "semantic_similarity",
    "context_recall",
    "faithfulness",
    "answer_relevancy",
    "context_relevancy",
    "topic_coverage",
    "must_not_contain_rate",
    "no_context_pass_rate",
    "false_refusal_rate",
    "language_pass_rate",
)

LOWER_IS_BETTER: Final = frozenset(
    {*LATENCY_MEASURES, "must_not_contain_rate", "false_refusal_rate"}
)

_TREC_TO_OURS: Final = {"recip_rank": "mrr", "ndcg": "ndcg"}
_TREC_CUT = re.compile(r"^(recip_rank_cut|P|recall|success|ndcg_cut)_(\d+)$")
_TREC_PREFIX: Final = {
    "recip_rank_cut": "mrr",
    "P": "precision",
    "recall": "recall",
    "success": "success",
    "ndcg_cut": "ndcg",
}
_RETRIEVAL_CUT = re.compile(r"^(mrr|recall|precision|success|ndcg)_(\d+)$")


def from_trec_name(name: str) -> str:
    """trec_eval's measure name (as :mod:`ranking` returns it) -> ours: ``P_5`` -> precision_5."""
    if name in _TREC_TO_OURS:
        return _TREC_TO_OURS[name]
    match = _TREC_CUT.match(name)
    if match is None:
        raise ValueError(f"unknown measure {name!r}")
    return f"{_TREC_PREFIX[match.group(1)]}_{match.group(2)}"


def retrieval_query_measures(cutoffs: Sequence[int]) -> list[str]:
    """Per-query retrieval measures for ``cutoffs``, in display order."""
    names = ["mrr", "ndcg"]
    for k in cutoffs:
        names += [f"mrr_{k}", f"recall_{k}", f"precision_{k}", f"success_{k}", f"ndcg_{k}"]
    return names


def known_measure(kind: Kind, name: str, cutoffs: Sequence[int]) -> str | None:
    """``None`` when ``name`` is a measure of a ``kind`` suite with these cutoffs, else why not."""
    if name in LATENCY_MEASURES or name == "coverage":
        return None
    if kind == "generation":
        if name in GENERATION_MEASURES:
            return None
        return f"unknown generation measure {name!r} (known: {', '.join(GENERATION_MEASURES)})"
    if name in ("mrr", "ndcg"):
        return None
    match = _RETRIEVAL_CUT.match(name)
    if match is None:
        return (
            f"unknown retrieval measure {name!r} (known: mrr, ndcg, coverage, "
            "mrr_K, recall_K, precision_K, success_K, ndcg_K, latency_p50_ms/p95/p99)"
        )
    if int(match.group(2)) not in cutoffs:
        return f"measure {name!r} needs cutoff {match.group(2)} in cutoffs {list(cutoffs)}"
    return None


def lower_is_better(name: str) -> bool:
    return name in LOWER_IS_BETTER


def is_latency(name: str) -> bool:
    return name in LATENCY_MEASURES


_DISPLAY: Final = {
    "mrr": "MRR",
    "ndcg": "NDCG",
    "coverage": "Coverage",
    "latency_p50_ms": "P50(ms)",
    "latency_p95_ms": "P95(ms)",
    "latency_p99_ms": "P99(ms)",
    "answer_correctness": "Correctness",
    "semantic_similarity": "Similarity",
    "context_recall": "Ctx recall",
    "faithfulness": "Faithful",
    "answer_relevancy": "Relevancy",
    "context_relevancy": "Ctx relevancy",
    "topic_coverage": "Topics",
    "must_not_contain_rate": "Forbidden",
    "no_context_pass_rate": "No-ctx OK",
    "false_refusal_rate": "False refusal",
    "language_pass_rate": "Language OK",
}
_DISPLAY_CUT: Final = {
    "mrr": "MRR@",
    "recall": "Recall@",
    "precision": "P@",
    "success": "Success@",
    "ndcg": "NDCG@",
}


def display_name(name: str) -> str:
    """Report column heading: ``recall_5`` -> ``Recall@5``."""
    if name in _DISPLAY:
        return _DISPLAY[name]
    match = _RETRIEVAL_CUT.match(name)
    if match is not None:
        return f"{_DISPLAY_CUT[match.group(1)]}{match.group(2)}"
    return name


__all__ = [
    "GENERATION_MEASURES",
    "LATENCY_MEASURES",
    "LOWER_IS_BETTER",
    "display_name",
    "from_trec_name",
    "is_latency",
    "known_measure",
    "lower_is_better",
    "retrieval_query_measures",
]
