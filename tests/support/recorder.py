"""A processing stage for tests that drive the daemon with a stage of their own."""

from __future__ import annotations

import asyncio
import random

from monitor.models import Trace


class SlowRecorder:
    """A processing stage that takes a little time and remembers every trace id it finished."""

    def __init__(self, delay: tuple[float, float] = (0.0, 0.0)) -> None:
        self.finished: list[str] = []
        self._delay = delay

    async def process(self, trace: Trace) -> None:
        await asyncio.sleep(random.uniform(*self._delay))
        self.finished.append(trace.trace_id)
