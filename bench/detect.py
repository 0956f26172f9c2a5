"""How well does tier 0 detect hallucinated RAG answers? Grouped cross-validation on the dev data.

    python bench/detect.py [--data DIR] [--folds 5] [--repeats 3] [--boot 1000] [--json OUT]

Scores ``dev_en.jsonl`` and ``dev_ja.jsonl`` (labelled RAG answers, see data/README.md) with
the heuristic evaluator and prints, per (dataset, task_type) group, the mean AUROC over the
folds of a grouped k-fold cross-validation and its 95% cluster-bootstrap interval, for:

- ``support``: tier 0's headline score, 1 - support as the hallucination score, with the
  grounding model refitted on the training folds of every split;
- ``faith``: 1 - faithfulness (supported / all statements);
- ``base``: a naive token-overlap baseline (share of the answer's tokens found in the contexts;
  words for spaced text, characters for Japanese).

Folds are by source: every item is tied to the document or question it came from (RAGTruth's
``source_id``, HaluEval's pair, WikiEval's question, JHARS's question), and all items of one
source are in the same fold, so no figure rewards remembering a document. Scores that are
learned (the shipped tier-0 model, see bench/train_tier0.py) are refitted on the training folds
of every split, so the test fold never shaped the score it is judged with. Folds are dealt
separately per group with their positives spread evenly, repeated with ``--repeats`` seeds; the
interval resamples each group's sources with replacement.

Items tier 0 leaves unmeasured (a refusal, no claims...) are counted and left out of every
method's AUROC, so all columns rank the same items. The cost line is tier 0's time per trace
(p50 and mean of CPU time, which other processes on the machine do not inflate, and the
wall-clock p50) on the dev traces. Only the dev files are read -- never a holdout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cv import (  # noqa: E402
    auroc,
    bootstrap_mean_auroc,
    grouped_folds,
    interval,
    mean_fold_auroc,
)
from bench.train_tier0 import Example, fit_model, model_of  # noqa: E402
from monitor.evaluators.grounding import token_overlap  # noqa: E402
from monitor.evaluators.heuristic import HeuristicEvaluator  # noqa: E402
from monitor.models import Context, EvaluationResult, Trace  # noqa: E402

__all__ = ["auroc"]

DEFAULT_DATA = REPO / "data" / "hallucination"
DEV_FILES = ("dev_en.jsonl", "dev_ja.jsonl")
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)  # the timestamp of every labelled item's trace


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Item:
    id: str
    file: str
    group: str
    source: str  # the document or question the item came from: never split between folds
    hallucinated: bool
    trace: Trace
    scores: dict[str, float | None] = field(default_factory=dict)
    baseline: float = 0.0
    ms: float = 0.0
    language: str = "en"  # the grounding model that scores it
    features: dict[str, float] = field(default_factory=dict)  # its grounding evidence


_RE_JHARS = re.compile(r"^jhars-(\d+)-")
_RE_WIKIEVAL = re.compile(r"^wikieval-(\d+)-")


def source_of(row: dict[str, Any]) -> str:
    """The unit of independence of a labelled item: what its answers were written from.

    RAGTruth: the source document (``meta.source_id``; several models answered each). HaluEval:
    the question pair (right and hallucinated answer to one question). WikiEval: the question
    (its grounded and ungrounded answer). JHARS: the question (several models answered it).
    """
    meta = row.get("meta") or {}
    item_id = str(row["id"])
    if "source_id" in meta:
        return f"doc-{meta['source_id']}"
    if "pair_index" in meta:
        return f"pair-{meta['pair_index']}"
    for pattern in (_RE_JHARS, _RE_WIKIEVAL):
        m = pattern.match(item_id)
        if m:
            return f"question-{int(m.group(1))}"
    raise ValueError(f"no source for item {item_id!r}: cannot place it in a fold")


def load_items(data_dir: Path, files: Iterable[str] = DEV_FILES) -> list[Item]:
    items: list[Item] = []
    for name in files:
        with (data_dir / name).open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                row: dict[str, Any] = json.loads(line)
                trace = Trace(
                    trace_id=str(row["id"]),
                    timestamp=EPOCH,
                    query=row.get("question") or "",
                    contexts=[
                        Context(id=f"{row['id']}#{i}", text=text, rank=i)
                        for i, text in enumerate(row.get("contexts") or [])
                    ],
                    answer=row.get("answer") or "",
                    language=row.get("lang"),
                )
                items.append(
                    Item(
                        id=str(row["id"]),
                        file=name,
                        group=f"{row['dataset']} / {row['task_type']}",
                        source=source_of(row),
                        hallucinated=bool(row["hallucinated"]),
                        trace=trace,
                    )
                )
    return items


def baseline_overlap(trace: Trace) -> float:
    """The naive baseline: share of the answer's distinct plain tokens (words; characters for
    Japanese) found in some context -- no stemming, stopwords, sentences or weights."""
    return token_overlap(trace.answer, (c.text for c in trace.contexts))


# ---------------------------------------------------------------------------------------------
# Methods: a hallucination score per item, possibly fitted on the training folds


FitPredict = Callable[[list[Item], list[Item]], np.ndarray]


def fixed(score: Callable[[Item], float]) -> FitPredict:
    """A method that learns nothing: the same score whatever the training folds."""

    def run(train: list[Item], test: list[Item]) -> np.ndarray:
        return np.asarray([score(it) for it in test], dtype=float)

    return run


def _one_minus(key: str) -> Callable[[Item], float]:
    def score(it: Item) -> float:
        value = it.scores.get(key)
        return 1.0 - float(value if value is not None else 0.0)

    return score


def learned_support(train: list[Item], test: list[Item]) -> np.ndarray:
    """Tier 0's support with its grounding model refitted on the training folds only."""
    model = model_of(
        fit_model([Example(it.language, it.features, it.hallucinated, it.group) for it in train])
    )
    return np.asarray([1.0 - model.support(it.language, it.features) for it in test])


def default_methods() -> dict[str, FitPredict]:
    """Column name -> method, in print order."""
    return {
        "support": learned_support,
        "faith": fixed(_one_minus("faithfulness")),
        "base": fixed(lambda it: 1.0 - it.baseline),
    }


# ---------------------------------------------------------------------------------------------
# Run


@dataclass
class Row:
    n: int
    pos: int
    sources: int
    unmeasured: int
    mean: dict[str, float]  # method -> mean fold AUROC
    ci: dict[str, tuple[float, float]]  # method -> 95% bootstrap interval


@dataclass
class Report:
    groups: dict[str, Row]
    macro: Row
    methods: list[str]
    folds: int
    repeats: int
    n_boot: int
    ms_p50: float  # CPU time per trace
    ms_mean: float
    wall_p50: float
    jhars: dict[str, tuple[float, float, int]]  # rule -> (precision, recall, flagged)


def score_items(
    items: list[Item], evaluator: HeuristicEvaluator | None = None
) -> tuple[list[float], list[float]]:
    """Fill every item's scores, grounding evidence and baseline; return tier 0's milliseconds
    per trace, as CPU time of this process and as wall-clock time."""
    ev = evaluator or HeuristicEvaluator()
    cpu: list[float] = []
    wall: list[float] = []
    for it in items:
        started, started_cpu = time.perf_counter(), time.process_time()
        res = ev.evaluate(it.trace)
        cpu.append((time.process_time() - started_cpu) * 1000.0)
        wall.append((time.perf_counter() - started) * 1000.0)
        it.scores = scores_of(res)
        it.ms = cpu[-1]
        it.baseline = baseline_overlap(it.trace)
        found = ev.grounding_features(it.trace)
        if found is not None:
            it.language, it.features = found
    return cpu, wall


def scores_of(res: EvaluationResult) -> dict[str, float | None]:
    return {k: s.value for k, s in res.scores.items()}


def measured(it: Item) -> bool:
    return it.scores.get("faithfulness") is not None


def out_of_fold(
    items: list[Item], methods: dict[str, FitPredict], folds: np.ndarray
) -> dict[str, np.ndarray]:
    """(repeats, items) out-of-fold hallucination scores of every method."""
    out = {m: np.full(folds.shape, np.nan) for m in methods}
    for r in range(folds.shape[0]):
        for f in np.unique(folds[r]):
            test_idx = np.flatnonzero(folds[r] == f)
            train = [it for i, it in enumerate(items) if folds[r, i] != f]
            test = [items[i] for i in test_idx]
            for name, method in methods.items():
                out[name][r, test_idx] = method(train, test)
    return out


def cross_validate(
    items: list[Item],
    methods: dict[str, FitPredict] | None = None,
    *,
    k: int = 5,
    repeats: int = 3,
    n_boot: int = 1000,
    evaluator: HeuristicEvaluator | None = None,
    score: bool = True,
) -> Report:
    """Score the items (unless `score` is False), cross-validate every method, bootstrap."""
    methods = methods or default_methods()
    times, wall = score_items(items, evaluator) if score else ([it.ms for it in items], [])
    kept = [it for it in items if measured(it)]
    labels = np.asarray([it.hallucinated for it in kept], dtype=bool)
    groups = np.asarray([it.group for it in kept])
    sources = np.asarray([it.source for it in kept])
    folds = np.stack(
        [grouped_folds(groups.tolist(), sources.tolist(), labels.tolist(), k, seed) for seed in
         range(repeats)]
    )  # fmt: skip
    oof = out_of_fold(kept, methods, folds)
    boot = bootstrap_mean_auroc(oof, labels, folds, groups, sources, n_boot=n_boot, seed=7)
    rows: dict[str, Row] = {}
    for g in sorted(set(groups.tolist())):
        idx = np.flatnonzero(groups == g)
        every = [it for it in items if it.group == g]
        rows[g] = Row(
            n=len(every),
            pos=sum(it.hallucinated for it in every),
            sources=len({it.source for it in every}),
            unmeasured=sum(not measured(it) for it in every),
            mean={m: mean_fold_auroc(oof[m], labels, folds, idx) for m in methods},
            ci={m: interval(boot[m][g]) for m in methods},
        )
    macro = Row(
        n=len(items),
        pos=sum(it.hallucinated for it in items),
        sources=len({(it.group, it.source) for it in items}),
        unmeasured=sum(not measured(it) for it in items),
        mean={m: float(np.mean([row.mean[m] for row in rows.values()])) for m in methods},
        ci={m: interval(boot[m]["macro"]) for m in methods},
    )
    return Report(
        groups=rows,
        macro=macro,
        methods=list(methods),
        folds=k,
        repeats=repeats,
        n_boot=n_boot,
        ms_p50=float(np.median(times)) if times else float("nan"),
        ms_mean=float(np.mean(times)) if times else float("nan"),
        wall_p50=float(np.median(wall)) if wall else float("nan"),
        jhars=_jhars_rules(kept),
    )


def _precision_recall(flagged: Sequence[bool], labels: Sequence[bool]) -> tuple[float, float]:
    f = np.asarray(flagged, dtype=bool)
    y = np.asarray(labels, dtype=bool)
    tp = int((f & y).sum())
    precision = tp / int(f.sum()) if f.any() else float("nan")
    recall = tp / int(y.sum()) if y.any() else float("nan")
    return precision, recall


def _jhars_rules(kept: list[Item]) -> dict[str, tuple[float, float, int]]:
    """Precision and recall of plain thresholds on JHARS (rare positives: AUROC alone misleads)."""
    jh = [it for it in kept if it.group.startswith("JHARS")]
    out: dict[str, tuple[float, float, int]] = {}
    for key, threshold in (("faithfulness", 1.0), ("support", 0.5), ("support", 0.3)):
        flagged = [(it.scores.get(key) or 0.0) < threshold for it in jh]
        p, r = _precision_recall(flagged, [it.hallucinated for it in jh])
        out[f"{key} < {threshold}"] = (p, r, sum(flagged))
    return out


# ---------------------------------------------------------------------------------------------
# Output


def _fmt(x: float) -> str:
    return "  n/a" if x != x else f"{x:.3f}"


def _cell(row: Row, m: str) -> str:
    lo, hi = row.ci[m]
    return f"{_fmt(row.mean[m])} [{_fmt(lo)}-{_fmt(hi)}]"


def print_report(rep: Report) -> None:
    width = 21
    head = f"{'group':<26} {'n':>4} {'pos':>4} {'src':>4} {'unm':>4}  " + " ".join(
        f"{m:<{width}}" for m in rep.methods
    )
    print(
        f"AUROC for detecting hallucinated answers, grouped {rep.folds}-fold cross-validation "
        f"by source x {rep.repeats} repeats:"
    )
    print(
        f"mean over folds [95% cluster-bootstrap interval, {rep.n_boot} resamples of sources]; "
        "0.5 = chance"
    )
    print(head)
    print("-" * len(head))

    def line(name: str, row: Row) -> None:
        counts = f"{row.n:>4} {row.pos:>4} {row.sources:>4} {row.unmeasured:>4}"
        cells = " ".join(f"{_cell(row, m):<{width}}" for m in rep.methods)
        print(f"{name:<26} {counts}  {cells}")

    for name, row in rep.groups.items():
        line(name.replace("(one-turn generation file)", ""), row)
    print("-" * len(head))
    line("macro mean over groups", rep.macro)
    print()
    print("support = 1 - support, tier 0's headline score (its grounding model refitted on the")
    print("          training folds of every split)")
    print("faith   = 1 - faithfulness (supported / all statements)")
    print("base    = naive token overlap: share of answer tokens found in the contexts")
    print("src     = independent sources (documents/questions); unm = left unmeasured by")
    print("          tier 0 (refusal, no claims, cross-language), excluded from every column")
    print()
    print("JHARS (rare positives), measured items, whole dev file:")
    for rule, (p, r, k) in rep.jhars.items():
        print(f"  flag when {rule:<20} flagged={k:>3}  precision={_fmt(p)}  recall={_fmt(r)}")
    print()
    print(
        f"tier 0 time per trace on the dev traces (CPU time, caches cold): p50 {rep.ms_p50:.2f} "
        f"ms, mean {rep.ms_mean:.2f} ms; wall-clock p50 {rep.wall_p50:.2f} ms"
    )


def report_json(rep: Report) -> dict[str, Any]:
    def row(r: Row) -> dict[str, Any]:
        return {
            "n": r.n,
            "pos": r.pos,
            "sources": r.sources,
            "unmeasured": r.unmeasured,
            "auroc": {m: {"mean": r.mean[m], "ci95": list(r.ci[m])} for m in rep.methods},
        }

    return {
        "folds": rep.folds,
        "repeats": rep.repeats,
        "bootstrap": rep.n_boot,
        "groups": {g: row(r) for g, r in rep.groups.items()},
        "macro": row(rep.macro),
        "ms_per_trace": {"cpu_p50": rep.ms_p50, "cpu_mean": rep.ms_mean, "wall_p50": rep.wall_p50},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="hallucination data dir")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="fold assignments (seeds)")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    args = parser.parse_args(argv)
    items = load_items(args.data)
    rep = cross_validate(items, k=args.folds, repeats=args.repeats, n_boot=args.boot)
    print_report(rep)
    if args.json:
        args.json.write_text(json.dumps(report_json(rep), indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
