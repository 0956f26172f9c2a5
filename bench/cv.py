"""Grouped cross-validation for detection benchmarks: folds by source, AUROC, cluster bootstrap.

Pure functions on arrays, shared by ``bench/detect.py`` (which prints the figures) and
``bench/train_tier0.py`` (which fits the shipped model). Nothing here reads files.

- :func:`grouped_folds` assigns every *source* (a document, a question: the unit two labelled
  items can share) to one of ``k`` folds, separately within each dataset group, so that no source
  is ever split between training and test and every fold gets a share of each group's positives.
- :func:`fold_aurocs` gives the AUROC of every (repeat, fold) of one group.
- :func:`bootstrap_mean_auroc` resamples the sources of each fold with replacement (a cluster
  bootstrap: items of one source stay together) and returns the 95% interval of the mean fold
  AUROC, for one group or the macro mean over groups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np


def auroc(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Area under the ROC curve of `scores` (higher = more positive) against boolean `labels`.

    Rank-based (Mann-Whitney U) with tied scores given their average rank. NaN when one class is
    missing.
    """
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(s.size, dtype=float)
    boundaries = np.flatnonzero(np.diff(sorted_s)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [s.size]))
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + 1 + b) / 2.0  # average 1-based rank of a run of ties
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def grouped_folds(
    groups: Sequence[str],
    sources: Sequence[str],
    labels: Sequence[bool],
    k: int,
    seed: int,
) -> np.ndarray:
    """Fold number (0..k-1) of every item; all items of one (group, source) share a fold.

    Within each group, sources that hold positives are dealt out first, most positives first
    (ties in a seeded random order), each to the fold with the fewest positives so far; the
    other sources follow, each to the fold with the fewest items. So every fold of a group gets
    positives whenever the group has at least k sources with positives.
    """
    rng = np.random.default_rng(seed)
    by_source: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (g, s) in enumerate(zip(groups, sources, strict=True)):
        by_source[(g, s)].append(i)
    fold = np.full(len(groups), -1, dtype=int)
    for group in sorted(set(groups)):
        keys = [key for key in by_source if key[0] == group]
        order = rng.permutation(len(keys))
        shuffled = [keys[i] for i in order]
        pos = {key: sum(bool(labels[i]) for i in by_source[key]) for key in shuffled}
        positive = sorted((key for key in shuffled if pos[key]), key=lambda key: -pos[key])
        negative = [key for key in shuffled if not pos[key]]
        fold_pos = np.zeros(k)
        fold_n = np.zeros(k)
        for key in positive:
            f = int(np.lexsort((fold_n, fold_pos))[0])
            fold[by_source[key]] = f
            fold_pos[f] += pos[key]
            fold_n[f] += len(by_source[key])
        for key in negative:
            f = int(np.argmin(fold_n))
            fold[by_source[key]] = f
            fold_n[f] += len(by_source[key])
    return fold


def fold_aurocs(
    scores: np.ndarray, labels: np.ndarray, folds: np.ndarray, idx: np.ndarray | None = None
) -> list[float]:
    """AUROC of each fold over the items `idx` (all when None); folds with one class are skipped.

    `scores` and `folds` are (repeats, items): one row per repetition of the fold assignment.
    """
    out: list[float] = []
    sel = np.arange(labels.size) if idx is None else idx
    for r in range(folds.shape[0]):
        f_sel = folds[r, sel]
        for f in np.unique(f_sel):
            part = sel[f_sel == f]
            a = auroc(scores[r, part], labels[part])
            if a == a:
                out.append(a)
    return out


def mean_fold_auroc(
    scores: np.ndarray, labels: np.ndarray, folds: np.ndarray, idx: np.ndarray | None = None
) -> float:
    values = fold_aurocs(scores, labels, folds, idx)
    return float(np.mean(values)) if values else float("nan")


def bootstrap_mean_auroc(
    scores: dict[str, np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    groups: np.ndarray,
    sources: np.ndarray,
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, np.ndarray]]:
    """Bootstrap distribution of the mean fold AUROC of every method, per group and macro.

    Each replicate resamples, within every group, the group's sources with replacement (items
    of a source travel together, keeping their out-of-fold scores and folds), so the interval
    reflects how many independent sources the figure rests on, not how many items. All methods
    share the replicates, so their intervals are comparable (paired).

    Returns {method: {group: array of n_boot means, ..., "macro": array}}.
    """
    rng = np.random.default_rng(seed)
    group_names = sorted(set(groups.tolist()))
    members: dict[str, list[np.ndarray]] = {}
    for g in group_names:
        in_group = np.flatnonzero(groups == g)
        by_src: dict[str, list[int]] = defaultdict(list)
        for i in in_group:
            by_src[str(sources[i])].append(int(i))
        members[g] = [np.asarray(v) for v in by_src.values()]
    out: dict[str, dict[str, np.ndarray]] = {
        m: {g: np.full(n_boot, np.nan) for g in [*group_names, "macro"]} for m in scores
    }
    for b in range(n_boot):
        per_group: dict[str, np.ndarray] = {}
        for g in group_names:
            srcs = members[g]
            pick = rng.integers(0, len(srcs), len(srcs))
            per_group[g] = np.concatenate([srcs[j] for j in pick])
        for m, s in scores.items():
            values = []
            for g in group_names:
                idx = per_group[g]
                v = _resampled_mean(s, labels, folds, idx)
                out[m][g][b] = v
                values.append(v)
            out[m]["macro"][b] = float(np.nanmean(values))
    return out


def _resampled_mean(
    scores: np.ndarray, labels: np.ndarray, folds: np.ndarray, idx: np.ndarray
) -> float:
    """Mean fold AUROC over a resampled index list (repeated items allowed)."""
    values: list[float] = []
    y = labels[idx]
    for r in range(folds.shape[0]):
        f_sel = folds[r, idx]
        s_r = scores[r, idx]
        for f in np.unique(f_sel):
            mask = f_sel == f
            a = auroc(s_r[mask], y[mask])
            if a == a:
                values.append(a)
    return float(np.mean(values)) if values else float("nan")


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap samples (NaN replicates dropped)."""
    s = samples[~np.isnan(samples)]
    if s.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(s, [tail, 100.0 - tail])
    return float(lo), float(hi)
