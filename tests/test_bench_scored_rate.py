"""bench/scored_rate.py times a scored run two ways: burst (first message read to the last
trace) and sustained (between 10% and 90% of the traces processed), from the polls that saw the
processed count rise."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench import load_bench


def _run(points: list[tuple[float, float, float]], expected: int = 1000) -> Any:
    rate = load_bench("scored_rate")
    marks = [rate.Mark(seconds, cpu, count) for seconds, cpu, count in points]
    return rate.ScoredRun(expected, rate.Mark(0.0, 0.0, 0), marks)


def test_a_slow_start_and_a_late_last_trace_stay_out_of_the_sustained_window() -> None:
    """2 s before the first trace (a fetch assembled) and 1 s before the last (a settle wait):
    the burst pays both, the steady 500 traces/s between 10% and 90% does not."""
    run = _run(
        [
            (2.0, 1.0, 50),
            (2.1, 1.1, 100),  # 10%
            (2.5, 1.3, 300),
            (3.7, 1.9, 900),  # 90%
            (3.8, 2.0, 950),
            (4.8, 2.1, 1000),
        ]
    )
    assert run.sustained == pytest.approx(800 / 1.6)
    assert run.burst == pytest.approx(1000 / 4.8)
    assert run.cpu_ms == pytest.approx(2.1)
    assert run.sustained_cpu_ms == pytest.approx(0.8 * 1000 / 800)
    assert run.seconds_to(0.5) == pytest.approx(3.7)


def test_a_batch_that_lands_past_a_mark_counts_its_own_traces_not_the_marks() -> None:
    """One poll sees the count jump from 40 to 250, past the 10% mark (100): the window starts
    there and counts the traces since that poll, not 800 over a stretched interval."""
    run = _run([(1.0, 0.5, 40), (2.0, 1.0, 250), (3.0, 1.5, 650), (4.0, 2.0, 950), (5, 2.5, 1000)])
    assert run.sustained == pytest.approx((950 - 250) / 2.0)


def test_a_window_one_poll_wide_is_refused() -> None:
    """Every trace landing between two polls leaves no window to time: an error, not infinity."""
    run = _run([(1.0, 0.5, 20), (2.0, 1.0, 1000)])
    with pytest.raises(ValueError, match="too few traces"):
        run.sustained  # noqa: B018
    assert run.burst == pytest.approx(500)


def test_a_run_that_never_reached_its_count_is_an_error() -> None:
    run = _run([(1.0, 0.5, 20), (2.0, 1.0, 600)])
    with pytest.raises(ValueError, match="never reached 900"):
        run.sustained  # noqa: B018


def test_a_window_of_traces_assembled_before_it_is_flagged_not_steady() -> None:
    """An OTLP daemon that read and assembled its whole input before 10% was scored: the
    window's CPU per trace (scoring alone) is below the run's, and its rate is no steady
    state's; a window costing what the run costs per trace is."""
    ahead = _run([(1.0, 1.0, 10), (2.0, 1.6, 100), (3.0, 2.2, 900), (3.5, 2.5, 1000)])
    assert ahead.window_share == pytest.approx(0.6 / 800 / (2.5 / 1000))
    assert not ahead.steady
    steady = _run([(1.0, 0.2, 10), (2.0, 0.5, 100), (3.0, 2.5, 900), (3.5, 2.7, 1000)])
    assert steady.window_share == pytest.approx(2.0 / 800 / (2.7 / 1000))
    assert steady.steady
