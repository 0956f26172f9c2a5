"""Fit tier 0's grounding model (monitor/evaluators/grounding_model.json) on the dev data only.

    python bench/train_tier0.py            # fit on dev_en.jsonl + dev_ja.jsonl, write the file
    python bench/train_tier0.py --check    # exit 1 when the shipped file differs from a fresh fit

One logistic regression per language (English, Japanese) on the grounding evidence of
:mod:`monitor.evaluators.grounding`, standardised, with an L2 penalty (``--l2``, 1.0) on the
feature weights. Each (dataset, task) group gets an intercept of its own while fitting: the
groups differ in how often their answers are hallucinated, and without those intercepts the
weights would learn to recognise the group (a summary, a table) instead of a hallucination.
The shipped intercept is the mean of the language's group intercepts, each less its group's
log-odds of hallucination: support reads as if half the answers were hallucinated, the same
scale for both languages.

bench/detect.py calls :func:`fit_model` on the training folds of every cross-validation split,
so the figures it prints never saw the items they are measured on. Only dev files are read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monitor.evaluators.grounding import (  # noqa: E402
    DEFAULT_MODEL_PATH,
    FEATURES,
    MODEL_LANGUAGES,
    GroundingModel,
    LanguageModel,
)
from monitor.evaluators.heuristic import HeuristicEvaluator  # noqa: E402

L2 = 1.0


@dataclass(frozen=True)
class Example:
    language: str  # the model that scores it: "en" or "ja"
    features: dict[str, float]
    hallucinated: bool
    group: str  # (dataset, task) group: its own intercept while fitting


def fit_logistic(
    x: np.ndarray, y: np.ndarray, groups: Sequence[str], l2: float = L2
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, coef, intercept) of a logistic regression of `y` on standardised `x`.

    Newton-Raphson on the penalised log-likelihood (L2 on the coefficients only), with one
    intercept per group. The returned intercept is the mean over groups of each group's
    intercept less the log-odds of its own hallucination rate: the score is then calibrated as
    if half the answers were hallucinated, whatever the rate of the data it was fitted on (8%
    in JHARS, about half in the English sets), so English and Japanese support share a scale
    and 0.5 means the evidence is even.
    """
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a constant feature: weight it 0 rather than divide by 0
    z = (x - mean) / scale
    names = sorted(set(groups))
    onehot = np.asarray([[g == name for name in names] for g in groups], dtype=float)
    design = np.hstack([z, onehot])
    penalty = np.concatenate([np.full(z.shape[1], l2), np.zeros(len(names))])
    w = np.zeros(design.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        gradient = design.T @ (p - y) + penalty * w
        hessian = (design * (p * (1.0 - p))[:, None]).T @ design + np.diag(penalty + 1e-6)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    coef = w[: z.shape[1]]
    rates = np.asarray([np.mean([y[i] for i, g in enumerate(groups) if g == n]) for n in names])
    rates = np.clip(rates, 0.01, 0.99)
    intercept = float(np.mean(w[z.shape[1] :] - np.log(rates / (1.0 - rates))))
    return mean, scale, coef, intercept


def fit_model(examples: Sequence[Example], l2: float = L2) -> dict[str, Any]:
    """The grounding model fitted on `examples`, as the JSON document the package reads."""
    languages: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    for lang in MODEL_LANGUAGES:
        mine = [e for e in examples if e.language == lang]
        if not mine:
            continue
        x = np.asarray([[e.features[f] for f in FEATURES] for e in mine], dtype=float)
        y = np.asarray([e.hallucinated for e in mine], dtype=float)
        mean, scale, coef, intercept = fit_logistic(x, y, [e.group for e in mine], l2)
        languages[lang] = {
            "mean": [round(float(v), 6) for v in mean],
            "scale": [round(float(v), 6) for v in scale],
            "coef": [round(float(v), 6) for v in coef],
            "intercept": round(intercept, 6),
        }
        counts[lang] = {"items": len(mine), "hallucinated": int(y.sum())}
    return {
        "description": (
            "tier-0 grounding model: logistic regression per language on standardised features "
            "(z = (x - mean) / scale); coef > 0 means more likely hallucinated; "
            "support = 1 / (1 + exp(intercept + coef . z)). Fitted by bench/train_tier0.py."
        ),
        "features": list(FEATURES),
        "l2": l2,
        "trained_on": counts,
        "languages": languages,
    }


def model_of(document: dict[str, Any]) -> GroundingModel:
    return GroundingModel.from_dict(document)


def neutral_model() -> GroundingModel:
    """A model that weighs nothing: lets the evaluator compute features before any fit."""
    zeros = tuple(0.0 for _ in FEATURES)
    ones = tuple(1.0 for _ in FEATURES)
    flat = LanguageModel(mean=zeros, scale=ones, coef=zeros, intercept=0.0)
    return GroundingModel(features=FEATURES, languages={"en": flat, "ja": flat})


def dev_examples(data_dir: Path) -> list[Example]:
    """Grounding evidence of every dev item tier 0 measures."""
    from bench.detect import load_items

    evaluator = HeuristicEvaluator(model=neutral_model())
    out: list[Example] = []
    for item in load_items(data_dir):
        found = evaluator.grounding_features(item.trace)
        if found is not None:
            lang, features = found
            out.append(Example(lang, features, item.hallucinated, item.group))
    return out


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    from bench.detect import DEFAULT_DATA

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="hallucination data dir")
    parser.add_argument("--l2", type=float, default=L2)
    parser.add_argument("--output", type=Path, default=DEFAULT_MODEL_PATH)
    parser.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = parser.parse_args(argv)
    text = render(fit_model(dev_examples(args.data), args.l2))
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} differs from a fresh fit: run bench/train_tier0.py", file=sys.stderr
            )
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
