"""The sampler: deterministic per conversation, priority traces always, and what load sheds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aiokafka.structs import TopicPartition

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.sampler import Sampler
from monitor.models import Context, EvaluationResult, Feedback, Score, Trace
from monitor.sources.kafka import partition_share
from tests.support.clock import Clock
from tests.support.traces import FIXED_TIME, make_trace


def trace(conversation: str) -> Trace:
    return make_trace(
        "q", ["text"], "a", trace_id=f"t-{conversation}", conversation_id=conversation
    )


def tier0(support: float = 0.9) -> EvaluationResult:
    return EvaluationResult(
        trace_id="t",
        timestamp=FIXED_TIME,
        evaluator="heuristic",
        scores={"support": Score.of(support)},
    )


def test_a_conversation_is_judged_whole_or_not_at_all() -> None:
    sampler = Sampler(SamplingConfig(rate=0.5))
    decisions = {sampler.decide(trace(f"conv-{i}"), tier0()) for i in range(3)}
    assert decisions <= {"sampled", "skipped"}
    for i in range(50):
        first = sampler.decide(trace(f"conv-{i}"), tier0())
        assert all(sampler.decide(trace(f"conv-{i}"), tier0()) == first for _ in range(3))
    share = sum(sampler.decide(trace(f"c{i}"), tier0()) == "sampled" for i in range(4000)) / 4000
    assert 0.45 < share < 0.55


def test_traces_the_lowered_rate_drops_are_told_apart_from_ordinary_skips() -> None:
    """Under load the effective rate falls below the configured one. A trace the configured
    rate would have judged is `rate_lowered` (shed, counted), not `skipped`."""
    sampler = Sampler(SamplingConfig(rate=0.5, queue_size=100))
    before = {f"c{i}": sampler.decide(trace(f"c{i}"), tier0()) for i in range(2000)}
    sampler.observe_queue(90, now=10.0)  # over 3/4 full: halve the rate
    assert sampler.effective_rate("default") == 0.25
    after = {c: sampler.decide(trace(c), tier0()) for c in before}
    lowered = [c for c in before if after[c] == "rate_lowered"]
    assert lowered and all(before[c] == "sampled" for c in lowered)
    assert all(after[c] == "skipped" for c in before if before[c] == "skipped")
    assert 0.2 < sum(v == "sampled" for v in after.values()) / 2000 < 0.3
    # priority traces are judged whatever the load
    assert sampler.decide(trace(lowered[0]), tier0(support=0.1)) == "priority"
    sampler.observe_queue(10, now=20.0)  # under 1/4: recover step by step
    assert sampler.effective_rate("default") == 0.25 * 1.25


def test_documents_without_text_are_no_priority_for_the_judge() -> None:
    """A trace without contexts is judged first (retrieval may have failed); one whose
    documents merely carry no text is not: the judge could not check them either."""
    sampler = Sampler(SamplingConfig(rate=0.0))
    bare = trace("c-1").model_copy(update={"contexts": []})
    assert sampler.decide(bare, tier0()) == "priority"
    textless = bare.model_copy(update={"contexts_without_text": 3})
    assert sampler.decide(textless, tier0()) == "skipped"


def test_answers_tier_zero_cannot_compare_across_languages_always_go_to_the_judge() -> None:
    """Tier 0 leaves an English answer over Japanese contexts (or one in another language
    than its question) unmeasured: only the judge can score it, so it is always judged."""
    from monitor.evaluators.heuristic import HeuristicEvaluator

    sampler = Sampler(SamplingConfig(rate=0.0))
    tier0_evaluator = HeuristicEvaluator()
    across = trace("c-1").model_copy(
        update={
            "query": "保証期間はどのくらいですか？",
            "contexts": [Context(id="kb-1", text="保証期間は2年です")],
            "answer": "The warranty period is two years.",
        }
    )
    result = tier0_evaluator.evaluate(across)
    assert "cross_language" in result.flags
    assert sampler.decide(across, result) == "priority"
    # an answer in the question's language but not the contexts' (relevancy measured) too
    mixed = across.model_copy(update={"query": "How long is the warranty?"})
    result = tier0_evaluator.evaluate(mixed)
    assert result.scores["faithfulness"].reason == "cross_language"
    assert sampler.decide(mixed, result) == "priority"
    # the same in one language is left to the rate
    same = across.model_copy(update={"answer": "保証期間は2年です。"})
    result = tier0_evaluator.evaluate(same)
    assert "cross_language" not in result.flags
    assert sampler.decide(same, result) == "skipped"
    # and only the answer's language against the question's: relevancy unmeasured
    asked_in_english = same.model_copy(update={"query": "How long is the warranty?"})
    result = tier0_evaluator.evaluate(asked_in_english)
    assert result.scores["answer_relevancy"].reason == "cross_language"
    assert sampler.decide(asked_in_english, result) == "priority"


def test_the_uniform_draw_does_not_depend_on_any_priority() -> None:
    """The same conversations are drawn whether their traces are priorities or not and whether
    the priority rules are on or off: the uniform draw stays a sample of all traffic."""
    on = Sampler(SamplingConfig(rate=0.2, priority_max_share=1.0))
    off = Sampler(
        SamplingConfig(
            rate=0.2,
            priority_faithfulness_below=0.0,
            priority_feedback_at_or_below=None,
            priority_no_contexts=False,
        )
    )
    drawn_on, drawn_off, priorities = set(), set(), 0
    for i in range(3000):
        t = trace(f"conv-{i}")
        low = tier0(support=0.1 if i % 3 == 0 else 0.9)  # every third trace is a priority
        chosen = on.select(t, low).selection
        priorities += chosen.priority is not None
        if chosen.uniform:
            drawn_on.add(t.conversation_id)
            assert chosen.inclusion_probability == 0.2
        if off.select(t, low).selection.uniform:
            drawn_off.add(t.conversation_id)
        assert off.select(t, tier0(support=0.9)).selection.uniform == chosen.uniform
    assert priorities == 1000
    assert drawn_on == drawn_off
    # the draw is uniform over priorities and the rest alike
    among_priorities = sum(f"conv-{i}" in drawn_on for i in range(0, 3000, 3)) / 1000
    among_others = sum(f"conv-{i}" in drawn_on for i in range(3000) if i % 3) / 2000
    assert 0.16 < among_priorities < 0.24 and 0.17 < among_others < 0.23
    # a drawn priority is judged as part of the draw, its rule still recorded
    both = next(i for i in range(0, 3000, 3) if f"conv-{i}" in drawn_on)
    choice = on.select(trace(f"conv-{both}"), tier0(support=0.1))
    assert choice.decision == "sampled"
    assert choice.selection.uniform and choice.selection.priority == "low_support"


def test_the_inclusion_probability_is_the_rate_in_force_when_deciding() -> None:
    sampler = Sampler(SamplingConfig(rate=0.4, queue_size=100))
    assert sampler.select(trace("c"), tier0()).selection.inclusion_probability == 0.4
    sampler.observe_queue(90, now=10.0)  # load halves the rate
    chosen = [sampler.select(trace(f"c{i}"), tier0()).selection for i in range(200)]
    assert {s.inclusion_probability for s in chosen} == {0.2}
    assert all(s.uniform == (Sampler.draw(trace(f"c{i}")) < 0.2) for i, s in enumerate(chosen))


def test_priorities_judge_at_most_their_share_beyond_the_rate_and_the_rest_is_counted() -> None:
    """The cap is a chance: a priority is judged with probability min(1, credit), recorded, and
    that probability is spent whether or not it was judged, so the share holds on average."""
    sampler = Sampler(SamplingConfig(rate=0.0, priority_max_share=0.1, priority_burst=5))
    choices = [sampler.select(trace(f"c{i}"), tier0(support=0.1)) for i in range(1000)]
    decisions = [c.decision for c in choices]
    judged = decisions.count("priority")
    assert decisions.count("priority_capped") == 1000 - judged
    chances = [c.selection.priority_probability for c in choices]
    assert chances[:5] == [1.0] * 5 and decisions[:5] == ["priority"] * 5  # the burst
    assert all(chance == pytest.approx(0.1) for chance in chances[10:])  # the share, refilled
    assert sum(c for c in chances if c is not None) == pytest.approx(105, abs=0.5)
    assert 75 <= judged <= 135  # 105 expected, sd about 9.5
    # the chance is the weight's inverse: the judged probability, by the draw or the priority
    assert all(c.selection.judged_probability == pytest.approx(0.1) for c in choices[10:])
    # the bucket refills with traffic that is no priority
    for i in range(20):
        assert sampler.decide(trace(f"calm{i}"), tier0()) == "skipped"
    assert sampler.select(trace("again"), tier0(support=0.1)).selection.priority_probability == 1
    # each agent has its own share
    other = trace("x").model_copy(update={"agent": "other-agent"})
    assert sampler.decide(other, tier0(support=0.1)) == "priority"


def test_the_priority_chance_is_drawn_apart_from_the_uniform_draw() -> None:
    """Whether the cap lets a priority through is a hash of its trace id, not of its
    conversation: the same every time it is decided, and not tied to the draw."""
    config = SamplingConfig(rate=0.5, priority_max_share=0.2, priority_burst=1)
    runs = []
    for _ in range(2):
        sampler = Sampler(config)
        runs.append([sampler.select(trace(f"c{i}"), tier0(support=0.1)) for i in range(400)])
    assert [c.decision for c in runs[0]] == [c.decision for c in runs[1]]
    not_drawn = [c for c in runs[0] if not c.selection.uniform]
    judged = sum(c.decision == "priority" for c in not_drawn)
    expected = sum(c.selection.priority_probability or 0.0 for c in not_drawn)
    assert 0.2 < expected / len(not_drawn) < 0.9, "the chance was neither 0 nor 1 throughout"
    assert abs(judged - expected) < 3 * math.sqrt(expected)


def test_every_priority_rule_is_named() -> None:
    sampler = Sampler(SamplingConfig(rate=0.0))
    assert sampler.select(trace("a"), tier0(0.2)).selection.priority == "low_support"
    bare = trace("b").model_copy(update={"contexts": []})
    assert sampler.select(bare, tier0()).selection.priority == "no_contexts"
    unhappy = trace("c").model_copy(update={"feedback": Feedback(score=-1)})
    assert sampler.select(unhappy, tier0()).selection.priority == "negative_feedback"
    assert sampler.select(trace("d"), tier0()).selection.priority is None


def test_a_quiet_agents_rate_rises_to_its_floor_of_drawn_traces_an_hour() -> None:
    """At 300 traces an hour a 5% draw takes 15, too few for an hourly alert; with a floor of
    60 the quiet agent is drawn at about 60 / 300 = 0.2 from its first whole minute on, and at
    exactly that once an hour of its traffic is known. A busy agent (12,000 an hour) keeps its
    5%. Each trace records the rate it was drawn at."""
    clock = Clock()
    sampler = Sampler(SamplingConfig(rate=0.05, min_drawn_per_hour=60), clock=clock)
    rates: dict[str, list[float]] = {"quiet": [], "busy": []}
    drawn = 0
    for minute in range(90):
        for agent, per_minute in (("quiet", 5), ("busy", 200)):
            for k in range(per_minute):
                clock.now = minute * 60 + (k + 0.5) * 60 / per_minute
                name = f"{agent}-{minute}-{k}"
                choice = sampler.select(
                    make_trace("q", ["c"], "a", trace_id=name, conversation_id=name, agent=agent),
                    tier0(),
                )
                rates[agent].append(choice.selection.inclusion_probability)
                drawn += agent == "quiet" and choice.selection.uniform
    # before a whole minute is known, the floor over the traffic counted so far (1, 1/2, ...):
    # more than the floor asks for, never less
    assert rates["quiet"][:5] == pytest.approx([1.0, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    assert rates["busy"][:20] == pytest.approx([1 / k for k in range(1, 21)])
    assert set(rates["busy"][200:]) == {0.05}
    # from the first whole minute on, the traffic counted since the agent's first trace
    assert all(0.18 <= rate <= 0.2 for rate in rates["quiet"][5:])
    assert rates["quiet"][61 * 5 :] == pytest.approx([0.2] * (29 * 5))
    assert sampler.effective_rate("quiet") == pytest.approx(0.2)
    assert 0.15 < drawn / (90 * 5) < 0.27


def test_a_floor_raised_changing_rate_keeps_the_draw_a_known_chance_sample() -> None:
    """Proved by simulation against a known truth: a quiet hour of bad answers (120 traces,
    drawn at 60 / 120 = 0.5 under a floor of 60) and a busy hour of good ones (1,200, drawn at
    0.05). The drawn traces' plain mean reads about half the traffic good; weighted by the
    inverse of the rate each recorded (what the estimates do), it is the truth, 1,200 / 1,320."""
    truth = 1200 / 1320
    rng = np.random.default_rng(7)
    plain, weighted = [], []
    for _ in range(300):
        clock = Clock()
        sampler = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
        ys, ws = [], []
        for hour, (count, y) in enumerate(((120, 0.0), (1200, 1.0))):
            for k in range(count):
                clock.now = hour * 3600 + (k + 0.5) * 3600 / count
                sampler.count_traffic("default")
                choice = sampler.choose("default", float(rng.random()), None, 0.5)
                if choice.selection.uniform:
                    ys.append(y)
                    ws.append(1.0 / choice.selection.inclusion_probability)
        plain.append(float(np.mean(ys)))
        weighted.append(float(np.average(ys, weights=ws)))
    error = float(np.std(weighted) / math.sqrt(len(weighted)))
    assert abs(float(np.mean(weighted)) - truth) < 3 * error + 0.005
    assert float(np.mean(plain)) < 0.7  # the unweighted draw over-represents the quiet hour


def quiet_hour(sampler: Sampler, clock: Clock) -> None:
    """A quiet agent's traffic, 5 traces a minute, counted by `sampler` until its last hour is
    known whole (62 minutes); the clock is left in the next minute, where one more trace reads
    300 traces an hour exactly."""
    for minute in range(62):
        for k in range(5):
            clock.now = minute * 60 + (k + 0.5) * 12
            sampler.count_traffic("quiet")
    clock.now = 62 * 60 + 1


def quiet_trace(conversation: str) -> Trace:
    return trace(conversation).model_copy(update={"agent": "quiet"})


def test_a_replica_with_half_the_input_asks_for_half_the_floor() -> None:
    """With two replicas each holding half the partitions, each sees about half the quiet
    agent's traffic: 300 traces an hour here, of 600 in all. A floor of 60 for the deployment
    is 30 for this replica: a rate of 30 / 300 = 0.1, not the 60 / 300 = 0.2 a replica alone
    with this traffic takes."""
    clock = Clock()
    sampler = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
    sampler.set_input_share(0.5)
    quiet_hour(sampler, clock)
    choice = sampler.select(quiet_trace("next"), tier0())
    assert choice.selection.inclusion_probability == pytest.approx(0.1)
    assert sampler.effective_rate("quiet") == pytest.approx(0.1)

    alone = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
    quiet_hour(alone, clock)
    assert alone.select(quiet_trace("next"), tier0()).selection.inclusion_probability == (
        pytest.approx(0.2)
    )


def test_a_replica_with_no_partition_has_no_floor() -> None:
    clock = Clock()
    sampler = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
    sampler.set_input_share(0.0)
    quiet_hour(sampler, clock)
    assert sampler.select(quiet_trace("next"), tier0()).selection.inclusion_probability == 0.02
    assert sampler.effective_rate("unseen") == 0.02


def test_a_change_of_share_takes_effect_on_the_next_trace() -> None:
    """A rebalance moves the share; the very next trace of the agent (a revision too, which is
    not counted again) is drawn at the rate of the new share and records it. The hour counted at
    the old share is read at the new one (a quarter of the partitions: a quarter of the
    traffic), so a quarter of the floor over a quarter of the traffic is the same rate."""
    clock = Clock()
    sampler = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
    quiet_hour(sampler, clock)
    assert sampler.select(quiet_trace("a"), tier0()).selection.inclusion_probability == (
        pytest.approx(0.2)
    )
    sampler.set_input_share(0.25)
    revision = sampler.select(quiet_trace("a"), tier0(), count=False)
    assert revision.selection.inclusion_probability == pytest.approx((60 * 0.25) / (300 * 0.25))
    sampler.set_input_share(0.0)  # revoked: a trace still in hand, not counted, has no floor
    revision = sampler.select(quiet_trace("a"), tier0(), count=False)
    assert revision.selection.inclusion_probability == 0.02
    sampler.set_input_share(1.0)
    # the second trace counted in minute 62: the hour's 300 more than 2 scaled to an hour (120)
    assert sampler.select(quiet_trace("c"), tier0()).selection.inclusion_probability == (
        pytest.approx(0.2)
    )


def test_after_a_replica_joins_the_first_keeps_drawing_its_share_of_the_floor() -> None:
    """One replica held every partition for an hour of 600 traces (a floor of 60: a rate of
    0.1); a second joins and each holds half. The first replica's next hour is 300 traces, of
    which it must draw 30. Read at the new share, its counted hour asks 30 / 300 = 0.1 at once;
    read as counted, it asked 30 / 600 = 0.05 and drew about 21 of the 30 in the hour after the
    join, its rate rising only as the old minutes aged out."""
    clock = Clock()
    first = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
    for minute in range(62):
        for k in range(10):
            clock.now = minute * 60 + (k + 0.5) * 6
            first.count_traffic("quiet")
    first.set_input_share(0.5)
    drawn = 0.0  # the expected draw: the sum of each trace's inclusion probability
    for minute in range(62, 122):
        for k in range(5):
            clock.now = minute * 60 + (k + 0.5) * 12
            choice = first.select(quiet_trace(f"{minute}-{k}"), tier0())
            drawn += choice.selection.inclusion_probability
    assert drawn == pytest.approx(30.0, rel=0.02)


def test_replicas_draw_the_floor_together_however_the_traffic_splits_over_their_topics() -> None:
    """The scoring group reads a native topic of 3 partitions, which carries all the traffic
    (900 traces an hour), and an assembled-traces topic of 12, idle. One replica holds two
    native partitions and 6 assembled ones (a share of 8/15) and sees 600 traces an hour; the
    other holds one and 6 (7/15) and sees 300. Their shares are not their parts of the traffic,
    but each draws floor x share an hour from whatever it sees (32 and 28), so together they
    draw the floor, 60, as the shares sum to one."""
    partitions = {"in": range(3), "assembled": range(12)}
    halves = {TopicPartition("assembled", p) for p in range(0, 12, 2)}
    held = [
        {TopicPartition("in", 0), TopicPartition("in", 2)} | halves,
        {TopicPartition("in", 1)} | {TopicPartition("assembled", p) for p in range(1, 12, 2)},
    ]
    per_minute = [10, 5]  # 900 an hour, split as the native partitions held
    drawn = []
    for owned, traces in zip(held, per_minute, strict=True):
        clock = Clock()
        sampler = Sampler(SamplingConfig(rate=0.02, min_drawn_per_hour=60), clock=clock)
        sampler.set_input_share(partition_share(owned, partitions))
        expected = 0.0
        for minute in range(122):
            for k in range(traces):
                clock.now = minute * 60 + (k + 0.5) * 60 / traces
                choice = sampler.select(quiet_trace(f"{minute}-{k}"), tier0())
                if minute >= 62:  # the second hour, the first known whole
                    expected += choice.selection.inclusion_probability
        drawn.append(expected)
    assert drawn == pytest.approx([60 * 8 / 15, 60 * 7 / 15], rel=0.02)
    assert sum(drawn) == pytest.approx(60.0, rel=0.02)
