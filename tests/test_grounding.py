"""Tier 0's grounding model and the cross-validation that measures it (bench/cv.py,
bench/detect.py, bench/train_tier0.py)."""

# Japanese text is the point of some inputs.

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.evaluators.grounding import (
    DEFAULT_MODEL_PATH,
    FEATURES,
    GroundingModel,
    load_model,
    token_overlap,
)
from tests.support.bench import load_bench
from tests.support.dev_data import dev_data_path

# --- the shipped model -----------------------------------------------------------------------


def test_shipped_model_is_a_fresh_fit_on_the_dev_data() -> None:
    """Nobody edits coefficients by hand, and a change to the features ships a refitted model."""
    dev_data_path("hallucination", "dev_en.jsonl")
    train = load_bench("train_tier0")
    assert train.main(["--check"]) == 0


def test_model_weighs_the_evidence_the_right_way_round() -> None:
    model = load_model()
    grounded = {
        "lexical_lower_quartile": 1.0,
        "lexical_min": 1.0,
        "invented_numbers": 0.0,
        "invented_names": 0.0,
        "token_overlap": 1.0,
    }
    for lang in ("en", "ja"):
        base = model.support(lang, grounded)
        assert base > 0.8, lang
        for feature, worse in (
            ("lexical_lower_quartile", 0.1),
            ("lexical_min", 0.0),
            ("invented_numbers", np.log1p(2)),
            ("invented_names", np.log1p(2)),
        ):
            assert model.support(lang, {**grounded, feature: worse}) < base, (lang, feature)
    # a language without a model of its own is scored by the English one
    assert model.support("ko", grounded) == model.support("en", grounded)


def test_model_file_is_validated() -> None:
    document = json.loads(DEFAULT_MODEL_PATH.read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="features"):
        GroundingModel.from_dict({**document, "features": list(reversed(FEATURES))})
    bad = json.loads(json.dumps(document))
    bad["languages"]["en"]["coef"] = [1.0]
    with pytest.raises(ValueError, match="one value per feature"):
        GroundingModel.from_dict(bad)
    with pytest.raises(ValueError, match="'en'"):
        GroundingModel.from_dict({**document, "languages": {"ja": document["languages"]["ja"]}})


def test_token_overlap_is_words_for_english_and_characters_for_japanese() -> None:
    assert token_overlap("The bridge opened", ["the Bridge opened in 1998"]) == 1.0
    assert token_overlap("The bridge closed", ["the bridge opened"]) == pytest.approx(2 / 3)
    assert token_overlap("保証は2年", ["保証期間は2年です"]) == 1.0
    assert token_overlap("保証は5年", ["保証期間は2年です"]) == pytest.approx(4 / 5)
    assert token_overlap("", ["anything"]) == 1.0


# --- cross-validation ------------------------------------------------------------------------


def test_folds_never_split_a_source_and_spread_the_positives() -> None:
    cv = load_bench("cv")
    rng = np.random.default_rng(3)
    groups, sources, labels = [], [], []
    for g in ("a", "b"):
        for s in range(23):
            for _ in range(int(rng.integers(1, 4))):
                groups.append(g)
                sources.append(f"s{s}")
                labels.append(bool(s % 3 == 0))
    folds = cv.grouped_folds(groups, sources, labels, 5, seed=1)
    seen: dict[tuple[str, str], int] = {}
    for g, s, f in zip(groups, sources, folds, strict=True):
        assert seen.setdefault((g, s), int(f)) == f, "a source was split between folds"
    for g in ("a", "b"):
        in_group = [i for i, x in enumerate(groups) if x == g]
        for f in range(5):
            part = [labels[i] for i in in_group if folds[i] == f]
            assert any(part) and not all(part), (g, f)
    again = cv.grouped_folds(groups, sources, labels, 5, seed=1)
    assert (again == folds).all(), "deterministic for a seed"


def test_bootstrap_interval_surrounds_the_figure_and_narrows_with_more_sources() -> None:
    cv = load_bench("cv")
    rng = np.random.default_rng(5)

    def width(n_sources: int) -> tuple[float, float, float]:
        labels = np.asarray([i % 2 == 0 for i in range(n_sources)])
        scores = labels + rng.normal(0, 0.8, n_sources)
        groups = np.asarray(["g"] * n_sources)
        sources = np.asarray([f"s{i}" for i in range(n_sources)])
        folds = cv.grouped_folds(groups.tolist(), sources.tolist(), labels.tolist(), 5, 0)[None]
        mean = cv.mean_fold_auroc(scores[None], labels, folds)
        boot = cv.bootstrap_mean_auroc(
            {"m": scores[None]}, labels, folds, groups, sources, n_boot=300
        )
        lo, hi = cv.interval(boot["m"]["g"])
        return lo, mean, hi

    lo_small, mean_small, hi_small = width(40)
    lo_big, mean_big, hi_big = width(400)
    assert lo_small < mean_small < hi_small
    assert lo_big < mean_big < hi_big
    assert hi_big - lo_big < hi_small - lo_small


def test_sources_of_the_dev_data() -> None:
    detect = load_bench("detect")
    items = detect.load_items(dev_data_path("hallucination"))
    by_group: dict[str, set[str]] = {}
    for it in items:
        by_group.setdefault(it.group, set()).add(it.source)
    # several answers per source: RAGTruth documents, JHARS questions, HaluEval/WikiEval pairs
    counts = {g: len(s) for g, s in by_group.items()}
    assert counts["JHARS / QA"] == 79
    assert counts["RAGTruth / Summary"] == 14
    assert counts["WikiEval / QA"] == 22
    with pytest.raises(ValueError, match="no source"):
        detect.source_of({"id": "mystery-1", "meta": {}})
