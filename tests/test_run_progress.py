"""Progress of an offline run: what a terminal and a log see."""

from __future__ import annotations

import asyncio
import io

from monitor.progress import Progress, duration
from tests.support.clock import Clock


def test_a_line_says_done_of_total_rate_and_time_left() -> None:
    clock = Clock(100.0)
    progress = Progress(20, io.StringIO(), tty=False, clock=clock, detail=lambda: "judge 2")
    assert progress.line() == "scored 0/20 traces, judge 2"
    clock.now += 120
    for _ in range(4):
        progress.advance()
    assert progress.line() == "scored 4/20 traces, 2.0/min, about 8 min left, judge 2"


def test_a_terminal_gets_one_line_rewritten_in_place() -> None:
    clock = Clock(100.0)
    out = io.StringIO()
    progress = Progress(3, out, tty=True, clock=clock)
    for _ in range(3):
        clock.now += 30
        progress.advance()
    progress.finish()
    text = out.getvalue()
    assert text.count("\r\033[K") == 4 and text.endswith("\n")
    assert text.count("\n") == 1, "one line, redrawn"
    assert text.rstrip().endswith("scored 3/3 traces, 2.0/min, about 0 s left")


async def test_a_log_gets_a_line_every_interval_and_nothing_in_between() -> None:
    out = io.StringIO()
    progress = Progress(10, out, tty=False, interval=0.05)
    progress.advance()
    assert out.getvalue() == "", "a log is not written at every trace"
    reporter = asyncio.create_task(progress.report())
    await asyncio.sleep(0.13)
    reporter.cancel()
    progress.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith("scored 1/10 traces") for line in lines)


def test_durations_read_as_a_wait() -> None:
    assert [duration(s) for s in (4.2, 59, 61, 3599, 3600, 7500)] == [
        "4 s",
        "59 s",
        "1 min",
        "1 h 00 min",
        "1 h 00 min",
        "2 h 05 min",
    ]
