"""How well does the heuristic evaluator detect hallucinated RAG answers?

    python bench/detect.py [--data DIR] [--json OUT]

Scores ``dev_en.jsonl`` and ``dev_ja.jsonl`` (labelled RAG answers, see
data/README.md) with :class:`monitor.evaluate.heuristic.HeuristicEvaluator` and prints
AUROC for detecting ``hallucinated`` answers from ``1 - faithfulness`` and ``1 - support``, per
(dataset, task_type) group, per file and as the macro mean over groups, next to a plain
token-overlap baseline; precision/recall at fixed thresholds for JHARS (rare positives); and the
mean time per trace. Items the evaluator leaves unmeasured (refusal, no claims...) are counted and
excluded from its AUROC. Only development files are read -- never ``holdout/``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monitor.evaluate.heuristic import HeuristicEvaluator  # noqa: E402
from monitor.models import Context, Trace  # noqa: E402

DEFAULT_DATA = REPO / "data" / "hallucination"
DEV_FILES = ("dev_en.jsonl", "dev_ja.jsonl")
SCORES = ("faithfulness", "support")
_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------------------------------------
# Metrics


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
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
    # average rank (1-based) over each run of equal scores
    boundaries = np.flatnonzero(np.diff(sorted_s)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [s.size]))
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + 1 + b) / 2.0
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def precision_recall(flagged: Sequence[bool], labels: Sequence[bool]) -> tuple[float, float]:
    f = np.asarray(flagged, dtype=bool)
    y = np.asarray(labels, dtype=bool)
    tp = int((f & y).sum())
    precision = tp / int(f.sum()) if f.any() else float("nan")
    recall = tp / int(y.sum()) if y.any() else float("nan")
    return precision, recall


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Item:
    id: str
    file: str
    group: str
    hallucinated: bool
    trace: Trace
    scores: dict[str, float | None] = field(default_factory=dict)
    baseline: float = 0.0


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
                    timestamp=_EPOCH,
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
                        hallucinated=bool(row["hallucinated"]),
                        trace=trace,
                    )
                )
    return items


# ---------------------------------------------------------------------------------------------
# Plain token-overlap baseline

_RE_PLAIN = re.compile(r"[^\W_]+")
_RE_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


def _plain_tokens(text: str) -> set[str]:
    out: set[str] = set()
    for tok in _RE_PLAIN.findall(unicodedata.normalize("NFKC", text).lower()):
        if _RE_CJK_CHAR.search(tok):
            out.update(tok)  # no spaces to split on: characters
        else:
            out.add(tok)
    return out


def baseline_overlap(trace: Trace) -> float:
    """Share of the answer's distinct tokens that occur in some context (no stemming/stopwords)."""
    a = _plain_tokens(trace.answer)
    if not a:
        return 1.0
    c: set[str] = set()
    for ctx in trace.contexts:
        c |= _plain_tokens(ctx.text)
    return len(a & c) / len(a)


# ---------------------------------------------------------------------------------------------
# Run


@dataclass
class Report:
    groups: dict[str, dict[str, float]]  # group -> {"n", "pos", "unmeasured", score..., "baseline"}
    files: dict[str, dict[str, float]]
    macro: dict[str, float]
    ms_per_trace: float
    jhars: dict[str, tuple[float, float, int]]  # rule -> (precision, recall, flagged)


def score_items(items: list[Item], evaluator: HeuristicEvaluator | None = None) -> float:
    """Fill every item's scores; return the mean milliseconds per trace."""
    ev = evaluator or HeuristicEvaluator()
    started = time.perf_counter()
    for it in items:
        res = ev.evaluate(it.trace)
        it.scores = {k: res.scores[k].value for k in SCORES}
    elapsed = time.perf_counter() - started
    for it in items:
        it.baseline = baseline_overlap(it.trace)
    return elapsed * 1000.0 / max(1, len(items))


def _auroc_of(items: list[Item], key: str) -> float:
    if key == "baseline":
        return auroc([1.0 - it.baseline for it in items], [it.hallucinated for it in items])
    kept = [it for it in items if it.scores.get(key) is not None]
    return auroc(
        [1.0 - float(it.scores[key] or 0.0) for it in kept], [it.hallucinated for it in kept]
    )


def _summary(items: list[Item]) -> dict[str, float]:
    row: dict[str, float] = {
        "n": len(items),
        "pos": sum(it.hallucinated for it in items),
        "unmeasured": sum(it.scores.get("faithfulness") is None for it in items),
    }
    for key in (*SCORES, "baseline"):
        row[key] = _auroc_of(items, key)
    measured = [it for it in items if it.scores.get("faithfulness") is not None]
    row["baseline_measured"] = _auroc_of(measured, "baseline")
    return row


def evaluate(items: list[Item], evaluator: HeuristicEvaluator | None = None) -> Report:
    ms = score_items(items, evaluator)
    groups = {
        g: _summary([it for it in items if it.group == g])
        for g in sorted({it.group for it in items})
    }
    files = {
        f: _summary([it for it in items if it.file == f]) for f in sorted({it.file for it in items})
    }
    macro = {
        key: float(np.nanmean([row[key] for row in groups.values()]))
        for key in (*SCORES, "baseline", "baseline_measured")
    }
    jh = [
        it for it in items if it.group.startswith("JHARS") and it.scores["faithfulness"] is not None
    ]
    rules: dict[str, Callable[[Item], bool]] = {
        "faithfulness < 1.0": lambda it: (it.scores["faithfulness"] or 0.0) < 1.0,
        "faithfulness < 0.8": lambda it: (it.scores["faithfulness"] or 0.0) < 0.8,
        "support < 0.3": lambda it: (it.scores["support"] or 0.0) < 0.3,
        "support < 0.2": lambda it: (it.scores["support"] or 0.0) < 0.2,
        "support < 0.1": lambda it: (it.scores["support"] or 0.0) < 0.1,
    }
    jhars: dict[str, tuple[float, float, int]] = {}
    for rule, pred in rules.items():
        flagged = [pred(it) for it in jh]
        p, r = precision_recall(flagged, [it.hallucinated for it in jh])
        jhars[rule] = (p, r, sum(flagged))
    return Report(groups=groups, files=files, macro=macro, ms_per_trace=ms, jhars=jhars)


def _fmt(x: float) -> str:
    return "  n/a" if x != x else f"{x:.3f}"


def print_report(rep: Report) -> None:
    head = (
        f"{'group':<44} {'n':>4} {'pos':>4} {'unm':>4}  {'faith':>6} {'support':>7}"
        f" {'base':>6} {'base*':>6}"
    )
    print("AUROC for detecting hallucinated answers (higher is better; 0.5 = chance)")
    print(head)
    print("-" * len(head))

    def line(name: str, row: dict[str, float], counts: bool = True) -> None:
        n = f"{int(row['n']):>4} {int(row['pos']):>4} {int(row['unmeasured']):>4}" if counts else ""
        print(
            f"{name:<44} {n:>14}  {_fmt(row['faithfulness']):>6} {_fmt(row['support']):>7}"
            f" {_fmt(row['baseline']):>6} {_fmt(row['baseline_measured']):>6}"
        )

    for name, row in rep.groups.items():
        line(name, row)
    print("-" * len(head))
    for name, row in rep.files.items():
        line(name, row)
    print("-" * len(head))
    line("macro mean over groups", rep.macro, counts=False)
    print()
    print("faith   = 1 - faithfulness (supported / all statements) as the hallucination score")
    print("support = 1 - support (lower-quartile statement support, pulled toward invented")
    print("          numbers/names), the continuous score")
    print("unm     = unmeasured (refusal / no claims), counted and excluded from faith/support")
    print("base    = plain token overlap (share of answer tokens found in the contexts), all items")
    print("base*   = the same baseline on the items the evaluator measured")
    print()
    print("JHARS (rare positives), measured items only:")
    for rule, (p, r, k) in rep.jhars.items():
        print(f"  flag when {rule:<20} flagged={k:>3}  precision={_fmt(p)}  recall={_fmt(r)}")
    print()
    print(f"mean time per trace (heuristic evaluator): {rep.ms_per_trace:.2f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="hallucination data dir")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    args = parser.parse_args(argv)
    items = load_items(args.data)
    rep = evaluate(items)
    print_report(rep)
    if args.json:
        args.json.write_text(json.dumps(rep.__dict__, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
