"""bench/alert_pages.py replays the daemon's estimate counters and evaluates the alert rule on
their increases: the replay must read what the real recorder exports, mid-stream too."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.estimates.estimator import TERMS, Observation, terms_of
from monitor.models import Selection
from tests.support.bench import load_bench
from tests.support.estimates import recorder_on, result
from tests.support.traces import make_trace

LABELS = {"agent": "default", "metric": "faithfulness", "evaluator": "llm", "quantity": "mean"}
SUMS = [term for term in TERMS if term not in ("traces", "predicted")]


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("alert_pages")


def _exported(registry: CollectorRegistry) -> dict[str, float]:
    return {
        term: registry.get_sample_value("ragmon_estimate_terms_total", {**LABELS, "term": term})
        or 0.0
        for term in SUMS
    }


def test_replayed_counters_read_what_the_recorder_exports_at_every_reading(bench: Any) -> None:
    """The replay's readings are the recorder's counters at the same points; a window's terms are
    the difference of two readings (``increase``), which, for conversations that span a reading,
    are not the terms of the window's traces taken alone."""
    rng = random.Random(3)
    registry = CollectorRegistry()
    recorder = recorder_on(registry)
    replayed: list[tuple[int, Observation]] = []
    snapshots = []
    for i in range(40):
        conversation = f"c{rng.randrange(6)}"
        trace = make_trace("q", ["ctx"], "answer", trace_id=f"t{i}", conversation_id=conversation)
        tier0 = result("heuristic", support=rng.random())
        predicted = recorder.predict(trace, tier0, read_at=0.0)
        judge = rng.choice([0.0, 1.0])
        drawn = Selection(uniform=True, inclusion_probability=0.5, predictions=predicted)
        recorder.count_judged(trace, tier0, drawn, result("llm", faithfulness=judge), now=0.0)
        bucket = i // 20
        replayed.append(
            (bucket, Observation(conversation, 2.0, judge, predicted["faithfulness"].mean))
        )
        if i % 20 == 19:
            snapshots.append(_exported(registry))
    readings = bench.readings(replayed, 2)
    for row, exported in zip(readings, snapshots, strict=True):
        for term in SUMS:
            assert row[TERMS.index(term)] == pytest.approx(exported[term]), term
    second_half = terms_of([o for b, o in replayed if b == 1], [])
    increase = readings[1] - readings[0]
    assert increase[TERMS.index("mm")] != pytest.approx(second_half.mm), "spanning conversations"


def _window(bench: Any, judged: int, conversations: int, mean: float) -> Any:
    """A window whose estimate is `mean` with a small spread, from `judged` drawn traces."""
    rows = [
        Observation(f"c{i % conversations}", 20.0, mean + (0.1 if i % 2 else -0.1), mean)
        for i in range(judged)
    ]
    drawn = terms_of(rows, [mean] * (judged * 20))
    return bench.Window(drawn, terms_of(rows, []))


def test_the_rule_pages_on_both_windows_below_the_threshold_with_enough_drawn(bench: Any) -> None:
    holds = bench.rules(0.8)["now"]
    bad, good = _window(bench, 40, 20, 0.6), _window(bench, 40, 20, 0.9)
    assert holds(bad, bad)
    assert not holds(bad, good) and not holds(good, bad), "both windows decide"
    assert not holds(_window(bench, 19, 10, 0.6), bad), "fewer than minSamples drawn in the hour"
    assert bench.rules(0.8)["1 h alone"](bad, good)
    assert not bench.rules(0.8)["k >= 20"](_window(bench, 40, 10, 0.6), bad), "10 conversations"


def test_t_quantile_and_the_judge_error_correction(bench: Any) -> None:
    for dof, exact in ((5, 2.5706), (10, 2.2281), (30, 2.0423)):
        assert bench.t_quantile(dof) == pytest.approx(exact, abs=0.025)
    rate = bench.human_rate_for(0.8, 0.05)
    assert 1 - (rate * 0.95 + (1 - rate) * 0.05) == pytest.approx(0.8)
