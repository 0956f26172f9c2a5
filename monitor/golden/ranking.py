"""Per-query ranking metrics, coverage, latency percentiles and their aggregation.

Pure functions, no I/O. A *ranking* is the list of document ids a system returned for one
query, best first (see :mod:`monitor.golden.trec` for how a TREC run file becomes one). The
*judgments* of a query map document id -> integer grade (3 perfect, 2 highly
relevant, 1 marginally relevant, 0 not relevant; trec_eval also allows negative grades).

Conventions (each checked against NIST trec_eval's fixtures and JQaRA, see the tests):

Relevance for binary measures
    A document is *relevant* when it is judged and ``grade >= relevance_threshold``. Documents
    missing from the judgments and documents with a negative grade are never relevant (trec_eval
    treats a negative grade as "in the pool but unjudged"). The default threshold is
    ``2`` (``DEFAULT_RELEVANCE_THRESHOLD``: Recall@K counts "Highly Relevant" and above);
    trec_eval's default is ``1`` (``TREC_EVAL_RELEVANCE_THRESHOLD``) and ``trec_eval -l2``
    corresponds to ``relevance_threshold=2``. The threshold applies to reciprocal rank,
    precision, recall and success, never to nDCG, which uses the grades themselves.

Gain for nDCG
    ``"exponential"`` (default): ``2**grade - 1``. ``"linear"`` (trec_eval's ``ndcg``
    and ``ndcg_cut``, JQaRA): ``grade``. Grades ``<= 0`` and unjudged documents give no gain under
    both. The discount is ``1 / log2(rank + 1)`` for rank 1, 2, ... The ideal DCG is computed from
    *all* judged documents of the query (not only the retrieved ones), sorted by gain, cut at the
    same K as the DCG. ``k=None`` means "no cut": DCG over everything retrieved and ideal DCG over
    every positively graded document (trec_eval's ``ndcg``). When the ideal DCG is 0 (no
    positively graded document) nDCG is 0.

Reciprocal rank
    ``1 / rank`` of the first relevant document, 0 when there is none. trec_eval's
    ``recip_rank`` is *not* cut; pass ``k`` for MRR@K (only the top K are searched).

Precision@K, recall@K, success@K
    Precision divides the relevant documents in the top K by K itself, even when fewer than K
    were retrieved (trec_eval ``P_K``, seed "top-K中の正解数/K"). Recall divides them by the
    number of relevant judged documents and is 0 when there are none (trec_eval ``recall_K``).
    Success is 1 when at least one relevant document is in the top K, else 0 (trec_eval
    ``success_K``).

Rankings must not repeat a document id (trec_eval refuses such runs too): every function here
raises ``ValueError`` on a duplicate.

Averaging over queries (:func:`evaluate_run`)
    A query is evaluated when it has judgments (is a key of ``qrels``). Queries that appear only
    in the run are ignored, as trec_eval does. A judged query missing from the run is

    - skipped with ``missing_queries="skip"`` (trec_eval's default: it averages over the
      queries that are both in the run and in the qrels), or
    - scored 0 on every measure with ``missing_queries="zero"`` (``trec_eval -c``, and MRR as
      docs/metrics.md defines it, which divides by all N evaluation queries). This is the
      default here, so that a system that returns nothing for a query cannot hide it.

    A judged query without a single relevant document (under ``relevance_threshold``) is scored
    normally, which makes its reciprocal rank, precision, recall and success 0 (trec_eval counts
    it too), with ``no_relevant="zero"`` (default); ``no_relevant="skip"`` leaves it
    out of the evaluation altogether.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

Gain = Literal["exponential", "linear"]
MissingQueries = Literal["skip", "zero"]
NoRelevant = Literal["zero", "skip"]

DEFAULT_RELEVANCE_THRESHOLD: Final = 2
"""By default a document counts as relevant for binary measures from grade 2 (Highly Relevant)."""

TREC_EVAL_RELEVANCE_THRESHOLD: Final = 1
"""trec_eval's default relevance level (its ``-l`` option)."""

DEFAULT_CUTOFFS: Final[tuple[int, ...]] = (5, 10)
"""The default K values: K=5 is the headline, K=10 the tool's default result count."""

LATENCY_PERCENTILES: Final[tuple[float, float, float]] = (50.0, 95.0, 99.0)


# --------------------------------------------------------------------------- validation


def _check_k(k: int, name: str = "k") -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{name} must be a positive integer, got {k!r}")


def _check_threshold(relevance_threshold: int) -> None:
    if (
        isinstance(relevance_threshold, bool)
        or not isinstance(relevance_threshold, int)
        or relevance_threshold < 0
    ):
        raise ValueError(
            f"relevance_threshold must be a non-negative integer, got {relevance_threshold!r}"
        )


def _check_ranking(ranking: Sequence[str]) -> None:
    if isinstance(ranking, str):
        raise TypeError("ranking must be a sequence of document ids, not a single string")
    if len(set(ranking)) != len(ranking):
        seen: set[str] = set()
        for doc_id in ranking:
            if doc_id in seen:
                raise ValueError(f"ranking repeats document id {doc_id!r}")
            seen.add(doc_id)


def _is_relevant(grade: int | None, relevance_threshold: int) -> bool:
    # relevance_threshold >= 0, so negative grades (trec_eval: unjudged) never qualify.
    return grade is not None and grade >= 0 and grade >= relevance_threshold


# --------------------------------------------------------------------------- per query


def num_relevant(
    judgments: Mapping[str, int], *, relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD
) -> int:
    """Number of judged documents with ``grade >= relevance_threshold`` (trec_eval ``num_rel``)."""
    _check_threshold(relevance_threshold)
    return sum(1 for grade in judgments.values() if _is_relevant(grade, relevance_threshold))


def _relevant_in_top(
    ranking: Sequence[str], judgments: Mapping[str, int], k: int, relevance_threshold: int
) -> int:
    return sum(
        1 for doc_id in ranking[:k] if _is_relevant(judgments.get(doc_id), relevance_threshold)
    )


def reciprocal_rank(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    *,
    k: int | None = None,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
) -> float:
    """``1 / rank`` of the first relevant document (rank 1 = first), 0.0 if there is none.

    ``k=None`` searches the whole ranking (trec_eval ``recip_rank``); with ``k`` only the top
    ``k`` are searched (MRR@K).
    """
    _check_ranking(ranking)
    _check_threshold(relevance_threshold)
    depth = len(ranking)
    if k is not None:
        _check_k(k)
        depth = min(depth, k)
    for index in range(depth):
        if _is_relevant(judgments.get(ranking[index]), relevance_threshold):
            return 1.0 / (index + 1)
    return 0.0


def precision_at_k(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    k: int,
    *,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
) -> float:
    """Relevant documents among the top ``k``, divided by ``k`` (trec_eval ``P_k``)."""
    _check_ranking(ranking)
    _check_k(k)
    _check_threshold(relevance_threshold)
    return _relevant_in_top(ranking, judgments, k, relevance_threshold) / k


def recall_at_k(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    k: int,
    *,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
) -> float:
    """Relevant documents among the top ``k`` divided by all relevant judged documents.

    0.0 when the query has no relevant judged document (trec_eval ``recall_k``).
    """
    _check_ranking(ranking)
    _check_k(k)
    total = num_relevant(judgments, relevance_threshold=relevance_threshold)
    if total == 0:
        return 0.0
    return _relevant_in_top(ranking, judgments, k, relevance_threshold) / total


def success_at_k(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    k: int,
    *,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
) -> float:
    """1.0 when at least one relevant document is in the top ``k``, else 0.0 (``success_k``)."""
    _check_ranking(ranking)
    _check_k(k)
    _check_threshold(relevance_threshold)
    return 1.0 if _relevant_in_top(ranking, judgments, k, relevance_threshold) > 0 else 0.0


def gain_of(grade: int | None, gain: Gain = "exponential") -> float:
    """Gain of one document: ``2**grade - 1`` or ``grade``; 0.0 for grades <= 0 or unjudged."""
    if grade is None or grade <= 0:
        return 0.0
    if gain == "exponential":
        return float(2.0**grade - 1.0)
    if gain == "linear":
        return float(grade)
    raise ValueError(f"gain must be 'exponential' or 'linear', got {gain!r}")


def _discounted_sum(gains: Iterable[float]) -> float:
    total = 0.0
    for index, value in enumerate(gains):
        if value != 0.0:
            total += value / math.log2(index + 2)  # rank = index + 1
    return total


def dcg(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    k: int | None = None,
    *,
    gain: Gain = "exponential",
) -> float:
    """``sum_{i=1..K} gain(rel_i) / log2(i + 1)`` over the top ``k`` (everything if ``None``)."""
    _check_ranking(ranking)
    if k is not None:
        _check_k(k)
    top = ranking if k is None else ranking[:k]
    return _discounted_sum(gain_of(judgments.get(doc_id), gain) for doc_id in top)


def ideal_dcg(
    judgments: Mapping[str, int], k: int | None = None, *, gain: Gain = "exponential"
) -> float:
    """DCG of the best possible ranking of all judged documents, cut at ``k`` (or not)."""
    if k is not None:
        _check_k(k)
    gains = sorted((gain_of(grade, gain) for grade in judgments.values()), reverse=True)
    gains = [value for value in gains if value > 0.0]
    if k is not None:
        gains = gains[:k]
    return _discounted_sum(gains)


def ndcg_at_k(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    k: int | None = None,
    *,
    gain: Gain = "exponential",
) -> float:
    """``DCG@K / IDCG@K``; 0.0 when the ideal DCG is 0. ``k=None`` is trec_eval's ``ndcg``."""
    ideal = ideal_dcg(judgments, k, gain=gain)
    actual = dcg(ranking, judgments, k, gain=gain)
    if ideal <= 0.0:
        return 0.0
    return actual / ideal


def metric_names(cutoffs: Sequence[int] = DEFAULT_CUTOFFS) -> list[str]:
    """Names of the measures :func:`evaluate_query` returns, in order (trec_eval's names)."""
    names = ["recip_rank", "ndcg"]
    for k in cutoffs:
        names += [f"recip_rank_cut_{k}", f"P_{k}", f"recall_{k}", f"success_{k}", f"ndcg_cut_{k}"]
    return names


def evaluate_query(
    ranking: Sequence[str],
    judgments: Mapping[str, int],
    *,
    cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
    gain: Gain = "exponential",
) -> dict[str, float]:
    """All measures of one query, keyed by trec_eval-style names (see :func:`metric_names`).

    ``recip_rank`` (uncut), ``ndcg`` (uncut) and, for each K in ``cutoffs``:
    ``recip_rank_cut_K`` (MRR@K), ``P_K``, ``recall_K``, ``success_K``, ``ndcg_cut_K``.
    """
    _check_ranking(ranking)
    _check_threshold(relevance_threshold)
    if len(set(cutoffs)) != len(cutoffs):
        raise ValueError(f"cutoffs repeat a value: {list(cutoffs)!r}")
    for k in cutoffs:
        _check_k(k, "cutoff")
    result = {
        "recip_rank": reciprocal_rank(ranking, judgments, relevance_threshold=relevance_threshold),
        "ndcg": ndcg_at_k(ranking, judgments, None, gain=gain),
    }
    for k in cutoffs:
        result[f"recip_rank_cut_{k}"] = reciprocal_rank(
            ranking, judgments, k=k, relevance_threshold=relevance_threshold
        )
        result[f"P_{k}"] = precision_at_k(
            ranking, judgments, k, relevance_threshold=relevance_threshold
        )
        result[f"recall_{k}"] = recall_at_k(
            ranking, judgments, k, relevance_threshold=relevance_threshold
        )
        result[f"success_{k}"] = success_at_k(
            ranking, judgments, k, relevance_threshold=relevance_threshold
        )
        result[f"ndcg_cut_{k}"] = ndcg_at_k(ranking, judgments, k, gain=gain)
    return result


# --------------------------------------------------------------------------- over queries


def evaluated_queries(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
    missing_queries: MissingQueries = "zero",
    no_relevant: NoRelevant = "zero",
) -> list[str]:
    """The query ids that enter the averages, in ``qrels`` order (see the module docstring)."""
    if missing_queries not in ("skip", "zero"):
        raise ValueError(f"missing_queries must be 'skip' or 'zero', got {missing_queries!r}")
    if no_relevant not in ("skip", "zero"):
        raise ValueError(f"no_relevant must be 'skip' or 'zero', got {no_relevant!r}")
    _check_threshold(relevance_threshold)
    selected: list[str] = []
    for qid, judgments in qrels.items():
        if qid not in run and missing_queries == "skip":
            continue
        if (
            no_relevant == "skip"
            and num_relevant(judgments, relevance_threshold=relevance_threshold) == 0
        ):
            continue
        selected.append(qid)
    return selected


def evaluate_run(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
    relevance_threshold: int = DEFAULT_RELEVANCE_THRESHOLD,
    gain: Gain = "exponential",
    missing_queries: MissingQueries = "zero",
    no_relevant: NoRelevant = "zero",
) -> dict[str, dict[str, float]]:
    """Per-query measures (qid -> :func:`evaluate_query` result) for the evaluated queries.

    ``run`` maps qid -> ranking, ``qrels`` maps qid -> judgments. Which queries are evaluated is
    decided by :func:`evaluated_queries`; a judged query missing from the run is evaluated as an
    empty ranking (every measure 0) under ``missing_queries="zero"``. For trec_eval's default
    behaviour pass ``missing_queries="skip", relevance_threshold=1, gain="linear"``.
    """
    per_query: dict[str, dict[str, float]] = {}
    for qid in evaluated_queries(
        run,
        qrels,
        relevance_threshold=relevance_threshold,
        missing_queries=missing_queries,
        no_relevant=no_relevant,
    ):
        per_query[qid] = evaluate_query(
            run.get(qid, ()),
            qrels[qid],
            cutoffs=cutoffs,
            relevance_threshold=relevance_threshold,
            gain=gain,
        )
    return per_query


@dataclass(frozen=True)
class MeanMetrics:
    """Arithmetic means of per-query measures over ``num_q`` queries."""

    num_q: int
    means: Mapping[str, float]


def mean_over_queries(per_query: Mapping[str, Mapping[str, float]]) -> MeanMetrics:
    """Mean of each measure over the queries (each query weighs the same).

    Raises ``ValueError`` when there is no query (trec_eval stops with "No queries with both
    results and relevance info") or when the queries do not all carry the same measures.
    """
    if not per_query:
        raise ValueError("no queries to average")
    rows = list(per_query.items())
    names = list(rows[0][1].keys())
    sums = dict.fromkeys(names, 0.0)
    for qid, values in rows:
        if set(values.keys()) != set(names):
            raise ValueError(f"query {qid!r} does not carry the same measures as the others")
        for name in names:
            sums[name] += float(values[name])
    count = len(rows)
    return MeanMetrics(num_q=count, means={name: sums[name] / count for name in names})


def result_coverage(run: Mapping[str, Sequence[str]], query_ids: Iterable[str]) -> float:
    """The report's "Coverage": share of ``query_ids`` for which the run returned >= 1 document.

    A query id absent from ``run`` counts as having returned nothing. Raises ``ValueError`` for
    an empty (or repeated) list of query ids.
    """
    ids = list(query_ids)
    if not ids:
        raise ValueError("no query ids")
    if len(set(ids)) != len(ids):
        raise ValueError("query ids repeat")
    answered = sum(1 for qid in ids if len(run.get(qid, ())) > 0)
    return answered / len(ids)


# --------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class LatencyPercentiles:
    """P50/P95/P99 of latencies (same unit as the input); ``None`` with a reason when empty."""

    n: int
    p50: float | None
    p95: float | None
    p99: float | None
    reason: str | None = None


def latency_percentiles(latencies: Sequence[float]) -> LatencyPercentiles:
    """P50, P95 and P99 by ``numpy.percentile(..., method="linear")``.

    That is the default (Hyndman & Fan type 7) definition: with the ``n`` values sorted as
    ``x[0] <= ... <= x[n-1]``, percentile ``p`` sits at position ``h = (n - 1) * p / 100`` and
    is ``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``. So P50 of an even
    count is the midpoint of the two middle values, and with fewer than 100 values P99 is
    interpolated between the two largest. One value gives that value for every percentile.
    Raises ``ValueError`` for a negative or non-finite latency.
    """
    values = np.asarray(list(latencies), dtype=np.float64)
    if values.size == 0:
        return LatencyPercentiles(n=0, p50=None, p95=None, p99=None, reason="no latencies")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("latencies must be finite and non-negative")
    p50, p95, p99 = (float(v) for v in np.percentile(values, LATENCY_PERCENTILES, method="linear"))
    return LatencyPercentiles(n=int(values.size), p50=p50, p95=p95, p99=p99)
