"""Fixed-value checks of the multi-turn formulas (docs/metrics.md#conversations) and constraint
checks."""

from __future__ import annotations

import pytest

from monitor.evaluators.constraints import check_constraint
from monitor.evaluators.multiturn import (
    TurnRecord,
    drift_rate,
    hallucination_rate,
    summarize_agent,
    summarize_agents,
    turn_bucket,
)
from monitor.models import Constraint


def test_turn_hallucination_is_unsupported_over_all_statements() -> None:
    assert hallucination_rate(supported=3, unsupported=1) == pytest.approx(0.25)
    assert hallucination_rate(supported=0, unsupported=2) == 1.0
    assert hallucination_rate(supported=0, unsupported=0) == 0.0, "max(1, S+U) guard"


def test_turn_drift_is_violated_plus_omitted_over_active() -> None:
    assert drift_rate(violated=1, omitted=1, active=4) == pytest.approx(0.5)
    assert drift_rate(violated=0, omitted=0, active=3) == 0.0
    assert drift_rate(violated=0, omitted=0, active=0) == 0.0, "max(1, |K|) guard"


def _turn(
    turn: int,
    h: float | None,
    d: float | None,
    memory: int | None,
    conv: str = "c1",
    agent: str = "acc",
) -> TurnRecord:
    return TurnRecord(
        conversation_id=conv, turn=turn, agent=agent, hallucination=h, drift=d, memory_tokens=memory
    )


def test_agent_summary_means_drift_from_turn_two_and_memory_final() -> None:
    # H_t = 0.0, 0.5, 0.25 -> H_u = 0.25; D_t at turn 1 is ignored (no audit): D_r = (0.5+0)/2
    records = [
        _turn(1, 0.0, 0.9, 100),  # a drift value at turn 1 must not count
        _turn(2, 0.5, 0.5, 300),
        _turn(3, 0.25, 0.0, 200),
    ]
    summary = summarize_agent("acc", records)
    assert summary.hallucination_mean == pytest.approx(0.25)
    assert summary.drift_mean == pytest.approx(0.25)
    assert summary.memory_mean == pytest.approx(200.0)  # (100+300+200)/3
    assert summary.memory_final_mean == 200.0, "M_T is the last turn's memory, not the largest"
    assert summary.hallucination_std == pytest.approx(0.25)  # sample sd of 0, .5, .25
    assert summary.turns == 3 and summary.conversations == 1


def test_unmeasured_turns_are_left_out_not_counted_as_zero() -> None:
    summary = summarize_agent("acc", [_turn(1, None, None, None), _turn(2, 1.0, None, None)])
    assert summary.hallucination_mean == 1.0
    assert summary.drift_mean is None
    assert summary.memory_mean is None


def test_several_agents_are_summarised_independently() -> None:
    records = [
        _turn(1, 0.0, None, 10, conv="a1", agent="baseline"),
        _turn(2, 1.0, 1.0, 30, conv="a1", agent="baseline"),
        _turn(1, 0.0, None, 50, conv="b1", agent="acc"),
        _turn(2, 0.0, 0.0, 70, conv="b1", agent="acc"),
        _turn(1, 0.5, None, 90, conv="b2", agent="acc"),
    ]
    summaries = summarize_agents(records)
    assert set(summaries) == {"baseline", "acc"}
    assert summaries["baseline"].hallucination_mean == pytest.approx(0.5)
    assert summaries["baseline"].drift_mean == pytest.approx(1.0)
    assert summaries["acc"].hallucination_mean == pytest.approx(1 / 6)
    assert summaries["acc"].drift_mean == 0.0
    assert summaries["acc"].memory_final_mean == pytest.approx((70 + 90) / 2)


@pytest.mark.parametrize(
    ("turn", "bucket"),
    [
        (1, "1"),
        (3, "3"),
        (4, "4-5"),
        (5, "4-5"),
        (6, "6-10"),
        (10, "6-10"),
        (11, "11+"),
        (40, "11+"),
    ],
)
def test_turn_buckets(turn: int, bucket: str) -> None:
    assert turn_bucket(turn) == bucket


@pytest.mark.parametrize(
    ("kind", "value", "answer", "status"),
    [
        ("language", "ja", "営業時間は10時からです。", "satisfied"),
        ("language", "ja", "We open at ten in the morning.", "violated"),
        ("max_chars", 10, "This answer is far too long.", "violated"),
        ("max_sentences", 2, "One. Two. Three.", "violated"),
        ("max_sentences", 3, "One. Two. Three.", "satisfied"),
        ("forbidden_terms", ["CompetitorX"], "Unlike competitorx, we ship free.", "violated"),
        ("required_terms", ["refund"], "Shipping takes two days.", "omitted"),
        ("required_terms", ["refund"], "A refund takes two days.", "satisfied"),
        ("format", "bullets", "- one\n- two", "satisfied"),
        ("format", "bullets", "one and two", "violated"),
        ("format", "json", '{"a": 1}', "satisfied"),
        ("format", "json", "a: 1", "violated"),
        ("max_chars", "ten", "short", "unmeasured"),
        (None, None, "anything", "unmeasured"),
    ],
)
def test_machine_checkable_constraints(
    kind: str | None, value: object, answer: str, status: str
) -> None:
    verdict = check_constraint(Constraint(id="k", text="rule", kind=kind, value=value), answer)  # type: ignore[arg-type]
    assert verdict.status == status, verdict.reason
