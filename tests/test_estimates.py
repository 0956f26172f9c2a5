"""The population estimates: their arithmetic against closed forms, the running sums the daemon
keeps against their definition, the calibration, and unbiasedness whatever the prediction."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client import CollectorRegistry

from monitor.config.scoring import SamplingConfig
from monitor.estimates.calibration import (
    BINS,
    FOLDS,
    RETAINED_FITS,
    UNFITTED,
    Calibration,
    Calibrations,
    fold_of,
    isotonic,
)
from monitor.estimates.estimator import (
    TERMS,
    Observation,
    Terms,
    correction,
    prediction_powered,
    terms_of,
    uniform,
)
from monitor.evaluators.sampler import Sampler, unit_hash
from monitor.models import EvaluationResult, Prediction, Score, Selection
from tests.support.clock import Clock
from tests.support.estimates import THRESHOLDS, recorder_on, result
from tests.support.traces import FIXED_TIME, make_trace

RATE = 0.1
FPC = math.sqrt(1 - RATE)  # the draw takes a conversation at most once: no replacement


def obs(cluster: str, y: float, f: float = 0.0, w: float = 1 / RATE) -> Observation:
    return Observation(cluster=cluster, weight=w, judge=y, prediction=f)


def test_uniform_estimate_of_independent_traces_is_the_sample_mean_and_its_standard_error() -> None:
    """Four conversations of one trace each, drawn at a tenth: the mean and
    s / sqrt(n) * sqrt(1 - 1/10) of a simple sample without replacement."""
    ys = [1.0, 0.0, 1.0, 1.0]
    est = uniform(terms_of([obs(f"c{i}", y) for i, y in enumerate(ys)], []))
    assert est is not None
    assert est.value == pytest.approx(0.75)
    s2 = sum((y - 0.75) ** 2 for y in ys) / 3  # sample variance, 1/4
    assert est.stderr == pytest.approx(math.sqrt(s2 / 4) * FPC)  # 0.25 * 0.949
    low, high = est.interval()
    assert (low, high) == pytest.approx((0.75 - 1.96 * 0.25 * FPC, 1.0))


def test_a_census_has_no_sampling_error() -> None:
    """Every conversation judged (rate 1): the mean is the traffic's, known exactly."""
    est = uniform(terms_of([obs(f"c{i}", y, w=1.0) for i, y in enumerate([1.0, 0.0])], []))
    assert est is not None and est.value == 0.5 and est.stderr == 0.0


def test_the_turns_of_one_conversation_are_one_unit_of_the_variance() -> None:
    """Two conversations of two turns, one all bad, one all good: the cluster-robust error is
    that of two units, (1/2) for a mean of 1/2, not that of four independent turns."""
    sample = [obs("a", 0.0), obs("a", 0.0), obs("b", 1.0), obs("b", 1.0)]
    est = uniform(terms_of(sample, []))
    assert est is not None and est.value == pytest.approx(0.5)
    # Y = (0, 2), M = (2, 2) (in units of the weight): 2/1 * ((0 - 1)^2 + (2 - 1)^2) / 4^2
    assert est.stderr == pytest.approx(0.5 * FPC)
    independent = uniform(terms_of([obs(str(i), o.judge) for i, o in enumerate(sample)], []))
    assert independent is not None
    assert independent.stderr == pytest.approx(math.sqrt(1 / 3 / 4) * FPC)


def test_weights_undo_a_rate_that_changed_while_sampling() -> None:
    """Half the traffic judged at 0.5 (score 1), half at 0.1 after the rate was lowered (score
    0): two judged traces of the first half per bad one of the second would read 2/3 unweighted;
    weighted by 1/p, each half counts for its share of the traffic."""
    sample = [obs("a", 1.0, w=2.0), obs("b", 1.0, w=2.0), obs("c", 0.0, w=10.0)]
    est = uniform(terms_of(sample, []))
    assert est is not None and est.value == pytest.approx(4 / 14)


def test_prediction_powered_estimate_in_closed_form() -> None:
    """Traffic predictions average 0.6; on the three judged traces the judge exceeds the
    prediction by 0.1, -0.2 and 0.4: estimate 0.6 + 0.1, error sd(differences) / sqrt(3) (the
    with-replacement error: nothing is taken off for the draw's rate)."""
    traffic = [0.2, 0.4, 0.8, 1.0, 0.6]
    sample = [obs("a", 0.9, 0.8), obs("b", 0.0, 0.2), obs("c", 1.0, 0.6)]
    drawn = terms_of(sample, traffic)
    est = prediction_powered(drawn, drawn)  # no priorities: every judged trace is drawn
    assert est is not None
    assert est.value == pytest.approx(0.7)
    diffs = [0.1, -0.2, 0.4]
    s2 = sum((d - 0.1) ** 2 for d in diffs) / 2
    assert est.stderr == pytest.approx(math.sqrt(s2 / 3))
    assert correction(drawn) == pytest.approx(0.1)


def test_priorities_count_by_their_inverse_chance_of_being_judged() -> None:
    """The draw (rate 1/10) took conversations a and b; priorities outside it were judged with
    chance 1/2 (c) and 1/4 (d). The correction weighs each judged trace by its inverse chance:
    (10 * 0.1 + 10 * -0.2 + 2 * 0.5 + 4 * -0.1) / 26; the variance is the with-replacement
    one over the four conversations."""
    traffic = [0.5] * 30
    drawn = [obs("a", 0.9, 0.8), obs("b", 0.0, 0.2)]
    priorities = [obs("c", 0.5, 0.0, w=2.0), obs("d", 0.3, 0.4, w=4.0)]
    shift = (10 * 0.1 + 10 * -0.2 + 2 * 0.5 + 4 * -0.1) / 26
    est = prediction_powered(terms_of(drawn, traffic), terms_of(drawn + priorities, []))
    assert est is not None
    assert est.value == pytest.approx(0.5 + shift)
    judged = [(10, 0.1), (10, -0.2), (2, 0.5), (4, -0.1)]  # (weight, y - f) per conversation
    variance = 4 / 3 * sum((w * d - shift * w) ** 2 for w, d in judged)
    assert est.stderr == pytest.approx(math.sqrt(variance) / 26)
    # without the draw there is no estimate: traffic no priority reaches would have no say
    assert prediction_powered(terms_of([], traffic), terms_of(priorities, [])) is None


def test_a_perfect_prediction_leaves_no_sampling_error_and_a_constant_one_is_uniform_only() -> None:
    sample = [obs("a", 0.9, 0.9), obs("b", 0.1, 0.1), obs("b", 0.5, 0.5)]
    exact = terms_of(sample, [0.9, 0.1, 0.5, 0.3])
    perfect = prediction_powered(exact, exact)
    assert perfect is not None and perfect.value == pytest.approx(0.45)
    assert perfect.stderr == pytest.approx(0.0, abs=1e-12)
    constant = [obs(o.cluster, o.judge, 0.4) for o in sample]
    powered = prediction_powered(terms_of(constant, [0.4] * 10), terms_of(constant, []))
    plain = uniform(terms_of(constant, []))
    assert powered is not None and plain is not None
    assert powered.value == pytest.approx(plain.value)
    # uniform-only takes off the draw's rate (the draw takes a conversation at most once);
    # prediction-powered keeps the with-replacement error, where taking it off undercovered
    assert powered.stderr * FPC == pytest.approx(plain.stderr)


def test_no_estimate_from_fewer_than_two_conversations() -> None:
    assert uniform(terms_of([obs("a", 1.0), obs("a", 0.0)], [0.5])) is None
    one = terms_of([obs("a", 1.0)], [0.5])
    assert prediction_powered(one, one) is None
    assert uniform(Terms()) is None


def test_terms_subtract_like_counter_increases() -> None:
    early = terms_of([obs("a", 1.0, 0.5)], [0.5])
    late = early + terms_of([obs("b", 0.0, 0.5)], [0.5, 0.5])
    assert (late - early).traces == 2 and (late - early).clusters == 1


@pytest.mark.parametrize("seed", [1, 2])
def test_the_running_sums_equal_the_sums_of_the_whole_sample(seed: int) -> None:
    """The daemon's incremental per-conversation totals give exactly the terms of the samples
    taken whole (the draw; every judged trace, priorities by their inverse chance), whatever
    order the turns of interleaved conversations arrive in."""
    rng = random.Random(seed)
    registry = CollectorRegistry()
    calibrations = Calibrations(THRESHOLDS, window=100, min_labels=5, epoch_seconds=10.0)
    recorder = recorder_on(registry, calibrations)
    observations: dict[str, list[Observation]] = {"mean": [], "below": []}
    weighted: dict[str, list[Observation]] = {"mean": [], "below": []}
    predictions: dict[str, list[float]] = {"mean": [], "below": []}
    for i in range(300):
        conversation = f"c{rng.randrange(40)}" if i % 10 else None
        trace = make_trace(
            "q",
            ["ctx"],
            "The warranty covers every part of the product for two years.",  # English
            trace_id=f"t{i}",
            conversation_id=conversation,
        )
        support = rng.random()
        tier0 = result("heuristic", support=support)
        predicted = recorder.predict(trace, tier0, read_at=float(i))
        recorder.count_traffic(trace.agent, predicted)
        for q in ("mean", "below"):
            p = predicted["faithfulness"]
            predictions[q].append(p.mean if q == "mean" else p.below)
        probability = rng.choice([0.5, 0.25])
        drawn = rng.random() < probability
        chance = rng.choice([None, 0.2, 1.0]) if i % 3 == 0 else None  # a priority, or not
        if not drawn and (chance is None or rng.random() >= chance):
            continue
        judge = min(1.0, max(0.0, support + rng.uniform(-0.3, 0.3)))
        selection = Selection(
            uniform=drawn,
            inclusion_probability=probability,
            priority="low_support" if chance is not None else None,
            priority_probability=chance,
            predictions=predicted,
        )
        recorder.count_judged(
            trace, tier0, selection, result("llm", faithfulness=judge), now=i + 0.5
        )
        cluster = conversation or trace.trace_id
        p = predicted["faithfulness"]
        weight = 1 / (probability + (1 - probability) * (chance or 0.0))
        for quantity, y, f in (("mean", judge, p.mean), ("below", float(judge < 0.8), p.below)):
            weighted[quantity].append(Observation(cluster, weight, y, f))
            if drawn:
                observations[quantity].append(Observation(cluster, 1 / probability, y, f))
    assert calibrations.get("faithfulness", "en").labels > 5
    assert set(predictions["mean"][100:]) - {UNFITTED.mean}, "later predictions were calibrated"
    for quantity in ("mean", "below"):
        for counter, expected in (
            (
                "ragmon_estimate_terms_total",
                terms_of(observations[quantity], predictions[quantity]),
            ),
            ("ragmon_estimate_weighted_terms_total", terms_of(weighted[quantity], [])),
        ):
            labels = {**_labels(), "quantity": quantity}
            exported = Terms.of(
                {
                    term: registry.get_sample_value(counter, {**labels, "term": term}) or 0.0
                    for term in TERMS
                }
            )
            for term in TERMS:
                assert getattr(exported, term) == pytest.approx(getattr(expected, term)), term
    assert len(weighted["mean"]) > len(observations["mean"]), "priorities were judged too"


def test_judged_traces_outside_the_uniform_draw_or_unmeasured_are_not_in_the_sample() -> None:
    """A priority is in the weighted sample only (by its chance; never when that chance is
    unknown), never the draw's; an unmeasured judge score is in neither."""
    registry = CollectorRegistry()
    recorder = recorder_on(registry)
    trace = make_trace("q", ["ctx"], "answer", trace_id="t1")
    tier0 = result("heuristic", support=0.3)
    predicted = recorder.predict(trace, tier0, read_at=0.0)
    recorder.count_traffic(trace.agent, predicted)
    priority = Selection(
        uniform=False, inclusion_probability=0.05, priority="low_support", predictions=predicted
    )
    recorder.count_judged(trace, tier0, priority, result("llm", faithfulness=0.0))
    weighted = "ragmon_estimate_weighted_terms_total"
    assert registry.get_sample_value(weighted, {**_labels(), "term": "m"}) is None
    known = priority.model_copy(update={"priority_probability": 0.5})
    recorder.count_judged(trace, tier0, known, result("llm", faithfulness=0.0))
    assert registry.get_sample_value(weighted, {**_labels(), "term": "m"}) == pytest.approx(
        1 / (0.05 + 0.95 * 0.5)
    )
    drawn = Selection(uniform=True, inclusion_probability=0.05, predictions=predicted)
    unmeasured = EvaluationResult(
        trace_id="t1",
        timestamp=FIXED_TIME,
        evaluator="llm",
        scores={"faithfulness": Score.unmeasured("judge_timeout")},
    )
    recorder.count_judged(trace, tier0, drawn, unmeasured)
    assert (
        registry.get_sample_value("ragmon_estimate_terms_total", {**_labels(), "term": "m"}) is None
    )
    recorder.count_judged(trace, tier0, drawn, result("llm", faithfulness=0.9))
    assert registry.get_sample_value(
        "ragmon_estimate_terms_total", {**_labels(), "term": "m"}
    ) == pytest.approx(20.0)
    # a sum that stays 0 (no answer below the threshold yet) is a series at 0, not missing:
    # the recording rules need every term to compute anything
    below = {**_labels(), "quantity": "below"}
    for term in TERMS:
        series = {**below, "term": term}
        assert registry.get_sample_value("ragmon_estimate_terms_total", series) is not None, term


def _labels() -> dict[str, str]:
    return {"agent": "default", "metric": "faithfulness", "evaluator": "llm", "quantity": "mean"}


def test_isotonic_pools_adjacent_violators() -> None:
    assert isotonic([0.1, 0.5, 0.3, 0.9], [1, 1, 1, 2]) == pytest.approx([0.1, 0.4, 0.4, 0.9])
    assert isotonic([0.2, 0.6], [3, 1], increasing=False) == pytest.approx([0.3, 0.3])
    assert isotonic([0.9, 0.1, 0.1], [1, 1, 2]) == pytest.approx([0.3] * 3)


def test_calibration_predicts_by_tier_zero_once_it_has_enough_labels() -> None:
    calibration = Calibration(threshold=0.8, window=1000, min_labels=20, folds=1)
    assert calibration.predict(0.9, fold=0, epoch=0) == UNFITTED
    for i in range(19):
        bad = i % 10 < 5
        calibration.add(0.05 + (i % 10) / 10, 0.0 if bad else 1.0, fold=0, epoch=0, now=float(i))
    # too few labels: the same constant everywhere (the prediction-powered estimate is then
    # the uniform-only one), never the labels' mean
    assert calibration.predict(0.05, fold=0, epoch=1) == UNFITTED
    assert calibration.predict(0.95, fold=0, epoch=1) == UNFITTED
    calibration.add(0.95, 1.0, fold=0, epoch=1, now=19.0)
    assert calibration.predict(0.05, fold=0, epoch=1) == UNFITTED, "arrived in epoch 1: not in it"
    assert calibration.predict(0.05, fold=0, epoch=2) == Prediction(mean=0.0, below=1.0)
    assert calibration.predict(0.95, fold=0, epoch=2) == Prediction(mean=1.0, below=0.0)
    assert calibration.labels == 20
    assert calibration.updated_at == 19.0


def test_a_trace_is_predicted_by_the_fit_of_the_epoch_it_was_read_in_whenever_it_is_scored() -> (
    None
):
    """Labels that arrive after a trace was read -- in its epoch or in later ones, as while a
    drawn conversation's turn waits for the judge -- never change its prediction."""
    calibration = Calibration(threshold=0.5, window=1000, min_labels=1, folds=1)
    calibration.add(0.7, 0.9, fold=0, epoch=0)
    scored_at_once = calibration.predict(0.7, fold=0, epoch=1)
    assert scored_at_once == Prediction(mean=0.9, below=0.0)
    calibration.add(0.7, 0.1, fold=0, epoch=1)
    assert calibration.predict(0.7, fold=0, epoch=1) == scored_at_once, "later in its epoch"
    calibration.add(0.7, 0.2, fold=0, epoch=2)
    calibration.add(0.7, 0.3, fold=0, epoch=3)
    read_later = calibration.predict(0.7, fold=0, epoch=4)
    assert (read_later.mean, read_later.below) == pytest.approx((0.375, 0.75))
    assert calibration.predict(0.7, fold=0, epoch=1) == scored_at_once, "epochs later"
    assert calibration.predict(0.7, fold=0, epoch=2) == Prediction(mean=0.5, below=0.5)
    assert calibration.predict(0.7, fold=0, epoch=0) == UNFITTED, "read before any label"


def test_a_quiet_epoch_does_not_make_a_late_scored_trace_miss_the_labels_before_it() -> None:
    """Nothing asked the calibration anything in epoch 2: a trace read then and scored in epoch 3
    (its conversation held by the judge) is predicted as if it had been scored at once."""
    asked_at_once = Calibration(threshold=0.5, window=1000, min_labels=1, folds=1)
    quiet = Calibration(threshold=0.5, window=1000, min_labels=1, folds=1)
    for calibration in (asked_at_once, quiet):
        calibration.add(0.7, 0.9, fold=0, epoch=0)
        calibration.add(0.7, 0.1, fold=0, epoch=1)
    at_once = asked_at_once.predict(0.7, fold=0, epoch=2)
    assert (at_once.mean, at_once.below) == pytest.approx((0.5, 0.5))
    for calibration in (asked_at_once, quiet):
        calibration.add(0.7, 0.0, fold=0, epoch=3)  # a label that arrived while it waited
    assert quiet.predict(0.7, fold=0, epoch=2) == at_once
    assert asked_at_once.predict(0.7, fold=0, epoch=2) == at_once


def test_a_conversation_is_predicted_by_the_labels_of_the_other_folds_only() -> None:
    """A drawn conversation's earlier turns are labels; its later turns are predicted without
    them (cross-fitting by conversation), so its prediction does not depend on its own draw."""
    calibration = Calibration(threshold=0.5, window=1000, min_labels=1)
    calibration.add(0.7, 0.0, fold=2, epoch=0)  # an earlier turn of a conversation of fold 2
    assert calibration.predict(0.7, fold=2, epoch=1) == UNFITTED, "its later turn"
    assert calibration.predict(0.7, fold=3, epoch=1) == Prediction(mean=0.0, below=1.0)
    calibration.add(0.7, 0.9, fold=3, epoch=1)
    assert calibration.predict(0.7, fold=2, epoch=2) == Prediction(mean=0.9, below=0.0)
    assert calibration.predict(0.7, fold=3, epoch=2) == Prediction(mean=0.0, below=1.0)
    assert calibration.predict(0.7, fold=0, epoch=2) == Prediction(mean=0.45, below=0.5)


def test_folds_are_even_and_do_not_depend_on_the_draw() -> None:
    keys = [f"conversation-{i}" for i in range(20_000)]
    assert [fold_of(k) for k in keys[:50]] == [fold_of(k) for k in keys[:50]]
    for members in (keys, [k for k in keys if unit_hash(k) < 0.2]):
        shares = [sum(fold_of(k) == f for k in members) / len(members) for f in range(FOLDS)]
        assert all(abs(share - 1 / FOLDS) < 0.02 for share in shares), shares


def test_a_trace_read_before_every_kept_fit_takes_the_oldest_kept() -> None:
    calibration = Calibration(threshold=0.5, window=1000, min_labels=1, folds=1)
    for epoch in range(RETAINED_FITS + 2):
        calibration.add(0.7, 0.9 if epoch < 2 else 0.1, fold=0, epoch=epoch)
    calibration.predict(0.7, fold=0, epoch=RETAINED_FITS + 2)
    # the fits of epochs 1 and 2 (one label of 0.9, two) were dropped; epoch 3's was kept
    oldest = calibration.predict(0.7, fold=0, epoch=3)
    assert oldest.mean == pytest.approx((0.9 + 0.9 + 0.1) / 3)
    assert calibration.predict(0.7, fold=0, epoch=1) == oldest


def test_the_calibration_forgets_beyond_its_window_and_fills_empty_bins() -> None:
    calibration = Calibration(threshold=0.5, window=4, min_labels=1, folds=1)
    for _ in range(4):
        calibration.add(0.95, 0.0, fold=0, epoch=0)
    for _ in range(4):
        calibration.add(0.35, 0.9, fold=0, epoch=1)
    assert [calibration.predict(b / BINS, fold=0, epoch=2).mean for b in range(BINS)] == [
        0.9
    ] * BINS
    assert calibration.labels == 4


@pytest.mark.parametrize("graded", [False, True], ids=["verdicts", "graded scores"])
def test_prediction_powered_estimate_is_unbiased_whatever_the_prediction(graded: bool) -> None:
    """A cluster sample of a skewed population with a prediction that is badly off (shifted and
    noisy): over repetitions, the estimates average to the truth and the 95% intervals cover it
    about 95% of the time (bench/estimates.py measures this on real data, with 0/1 verdicts).
    Graded scores (a judge's relevancy, a share of supported statements: here a Beta around the
    conversation's level) hold the same."""
    rng = random.Random(7)
    covered = 0
    errors = []
    reps = 300
    for _ in range(reps):
        population = []
        for c in range(400):
            level = rng.random() ** 2
            for _ in range(rng.randint(1, 4)):
                if graded:
                    y = rng.betavariate(1 + 8 * level, 1 + 8 * (1 - level))
                else:
                    y = float(rng.random() < level)
                population.append((f"c{c}", y, min(1.0, 0.3 + 0.5 * level + rng.gauss(0, 0.2))))
        truth = sum(y for _, y, _ in population) / len(population)
        drawn = {c for c in {c for c, _, _ in population} if rng.random() < 0.15}
        sample = [obs(c, y, f, 1 / 0.15) for c, y, f in population if c in drawn]
        sums = terms_of(sample, [f for _, _, f in population])
        est = prediction_powered(sums, sums)
        assert est is not None
        errors.append(est.value - truth)
        low, high = est.interval()
        covered += low <= truth <= high
    bias = sum(errors) / reps
    spread = math.sqrt(sum(e * e for e in errors) / reps)
    assert abs(bias) < 3 * spread / math.sqrt(reps)
    assert 0.91 <= covered / reps <= 0.99


@pytest.mark.slow
def test_with_priorities_weighted_by_their_chance_the_estimate_stays_unbiased_and_covers() -> None:
    """The real sampler: a tenth of conversations drawn, priorities (low predictions, where the
    invented answers are) judged beyond it up to a tenth of the traffic by chance. Over
    repeated populations, the prediction-powered estimate over every judged trace, weighted by
    its inverse chance, averages to the truth, its 95% interval covers it about 95% of the
    time, and it is narrower than the draw's alone."""
    rng = random.Random(11)
    config = SamplingConfig(rate=0.1, priority_max_share=0.1, priority_faithfulness_below=0.4)
    covered, errors, widths, uniform_widths = 0, [], [], []
    reps = 300
    for rep in range(reps):
        sampler = Sampler(config)
        traffic: list[float] = []
        drawn: list[Observation] = []
        weighted: list[Observation] = []
        truth_sum = 0.0
        for c in range(300):
            conversation = f"r{rep}-c{c}"
            draw = unit_hash(conversation)
            risky = rng.random() < 0.25
            for _turn in range(rng.randint(1, 4)):
                f = min(1.0, max(0.0, (0.55 if risky else 0.08) + rng.gauss(0, 0.1)))
                y = float(rng.random() < f)  # y = 1: below the threshold
                truth_sum += y
                traffic.append(f)
                priority = "low_support" if f > 0.4 else None  # (1 - f) is the support
                choice = sampler.choose("a", draw, priority, rng.random())
                s = choice.selection
                if s.uniform:
                    drawn.append(Observation(conversation, 1 / s.inclusion_probability, y, f))
                if s.judged:
                    chance = s.judged_probability
                    assert chance is not None
                    weighted.append(Observation(conversation, 1 / chance, y, f))
        truth = truth_sum / len(traffic)
        est = prediction_powered(terms_of(drawn, traffic), terms_of(weighted, []))
        plain = uniform(terms_of(drawn, []))
        assert est is not None and plain is not None
        errors.append(est.value - truth)
        low, high = est.interval()
        covered += low <= truth <= high
        widths.append(high - low)
        uniform_widths.append(plain.interval()[1] - plain.interval()[0])
    bias = sum(errors) / reps
    spread = math.sqrt(sum(e * e for e in errors) / reps)
    assert abs(bias) < 3 * spread / math.sqrt(reps)
    assert 0.92 <= covered / reps <= 0.98, covered / reps
    assert sum(widths) < 0.85 * sum(uniform_widths), sum(widths) / sum(uniform_widths)


@pytest.mark.slow
def test_under_a_floor_of_drawn_traces_the_estimate_stays_unbiased_and_covers() -> None:
    """The real sampler with `sampling.min_drawn_per_hour`: a quiet hour of risky traffic
    (about 250 traces, drawn at about 120 / 250) then a busy hour of safer traffic (about 1,500,
    drawn at the floor's 8% instead of the 2% rate), so the rate changes within the stream and
    a conversation's turns may be drawn at different rates. Over repeated streams the
    prediction-powered and the uniform-only estimates average to the truth and their 95%
    intervals cover it: 92-94% over three seeds of 300 streams (one standard error is 1.3
    points; streams like them drawn at a constant 14% cover 93.5-94%)."""
    rng = random.Random(13)
    config = SamplingConfig(rate=0.02, min_drawn_per_hour=120)
    covered = {"ppi": 0, "uniform": 0}
    errors: dict[str, list[float]] = {"ppi": [], "uniform": []}
    reps = 300
    for rep in range(reps):
        clock = Clock()
        sampler = Sampler(config, clock=clock)
        traffic: list[float] = []
        drawn: list[Observation] = []
        weighted: list[Observation] = []
        truth_sum = 0.0
        for hour, (conversations, risky_share) in enumerate(((100, 0.6), (600, 0.15))):
            turns = [rng.randint(1, 4) for _ in range(conversations)]
            spacing = 3600 / sum(turns)
            for c, count in enumerate(turns):
                conversation = f"r{rep}-h{hour}-c{c}"
                draw = unit_hash(conversation)
                risky = rng.random() < risky_share
                for _turn in range(count):
                    clock.now += spacing
                    f = min(1.0, max(0.0, (0.55 if risky else 0.08) + rng.gauss(0, 0.1)))
                    y = float(rng.random() < f)
                    truth_sum += y
                    traffic.append(f)
                    sampler.count_traffic("a")
                    s = sampler.choose("a", draw, None, rng.random()).selection
                    if s.uniform:
                        drawn.append(Observation(conversation, 1 / s.inclusion_probability, y, f))
                        weighted.append(drawn[-1])
        truth = truth_sum / len(traffic)
        estimates = {
            "ppi": prediction_powered(terms_of(drawn, traffic), terms_of(weighted, [])),
            "uniform": uniform(terms_of(drawn, [])),
        }
        for name, est in estimates.items():
            assert est is not None
            errors[name].append(est.value - truth)
            low, high = est.interval()
            covered[name] += low <= truth <= high
    for name in ("ppi", "uniform"):
        bias = sum(errors[name]) / reps
        spread = math.sqrt(sum(e * e for e in errors[name]) / reps)
        assert abs(bias) < 3 * spread / math.sqrt(reps), (name, bias)
        assert 0.9 <= covered[name] / reps <= 0.98, (name, covered[name] / reps)
