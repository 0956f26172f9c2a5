"""A processing stage and a dead-letter sink for tests that drive the daemon's parts with
their own neighbours."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from monitor.messages import RawMessage
from monitor.models import Trace


class SlowRecorder:
    """A processing stage that takes a little time and remembers every trace id it finished."""

    def __init__(self, delay: tuple[float, float] = (0.0, 0.0)) -> None:
        self.finished: list[str] = []
        self._delay = delay

    async def process(self, trace: Trace) -> None:
        await asyncio.sleep(random.uniform(*self._delay))
        self.finished.append(trace.trace_id)


class LetterRecorder:
    """A dead-letter sink that keeps what it is sent (offset, reason, detail, value)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        self.sent.append({"offset": msg.offset, "reason": reason, "detail": detail, "value": value})
