"""bench/estimates.py --metric answer_relevancy: the relevancy replay is built from WikiEval's
labelled answers as documented, and its weighted estimates undo the priorities' selection."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from tests.support.bench import load_bench


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("estimates")


@pytest.fixture(scope="module")
def prepared(bench: Any) -> Any:
    return bench.prepare_relevancy(bench.DEFAULT_DATA, k=5, seed=0, judge_error=0.05)


def test_every_question_gives_its_answer_and_its_poor_answer_held_out_together(
    bench: Any, prepared: Any
) -> None:
    """Two items a question, the poor answer below the threshold; a question's two answers
    are in one fold, so no calibration learns from the question it then predicts."""
    by_question: dict[str, list[Any]] = defaultdict(list)
    for i in prepared.usable:
        by_question[prepared.cases[i].item.source].append(i)
    assert len(by_question) == 22
    for members in by_question.values():
        labels = sorted(prepared.cases[i].item.hallucinated for i in members)
        assert labels == [False, True]
        assert len({int(prepared.folds[i]) for i in members}) == 1
    assert set(prepared.folds[prepared.usable]) == set(range(5))


def test_the_prediction_is_tier_zeros_own_answer_relevancy(bench: Any, prepared: Any) -> None:
    for i in prepared.usable:
        case = prepared.cases[i]
        assert set(case.support.values()) == {case.tier0.scores["answer_relevancy"].value}
    assert prepared.metric == "answer_relevancy"


def test_weighted_estimates_undo_the_priorities_that_pick_out_weak_answers(bench: Any) -> None:
    """Weak (poor) answers are mostly ungrounded, so the support priorities judge them far more
    often than the rest: the judge's raw mean reads high, the weighted estimates do not."""
    summaries, _ = bench.run(
        [0.3], reps=10, traces=6000, judge_error=0.05, k=5, seed=1,
        data=bench.DEFAULT_DATA, metric="answer_relevancy",
    )  # fmt: skip
    (summary,) = summaries
    assert summary.bias["raw judged"] > 0.1
    for method in ("uniform-only", "prediction-powered"):
        assert abs(summary.bias[method]) < 0.03, (method, summary.bias[method])
        assert summary.missing[method] == 0
    assert np.isfinite(summary.width["prediction-powered"])
