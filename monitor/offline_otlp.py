"""OTLP/JSON lines of a file scored offline (`rag-monitor score`): split per trace and
assembled in process by the same :class:`~monitor.sources.otlp_stage.Assembly` the file replay
(`run --source file:`) uses, so both accept the same lines and map them the same way.

A trace that cannot be assembled or mapped is reported on the error stream as one JSON line,
``{"line": N, "reason": ..., "error": ...}``, as `score` reports a bad native line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import IO, Literal, TypeVar

from monitor.config import Settings
from monitor.messages import RawMessage
from monitor.models import Trace
from monitor.sinks.metrics import Metrics
from monitor.sources.assembly import Release
from monitor.sources.native import DecodeError
from monitor.sources.otlp import detect_format
from monitor.sources.otlp_logs import detect_logs_format
from monitor.sources.otlp_stage import (
    Assembly,
    OtlpMetrics,
    PartToken,
    split_logs_or_reject,
    split_or_reject,
)

LineKind = Literal["native", "otlp_spans", "otlp_logs"]
P = TypeVar("P")  # a part of an export: spans or log records of one trace


def line_kind(value: bytes) -> LineKind:
    """What a line of text holds, told as the file replay tells it in the `auto` format."""
    if detect_format(value) == "otlp_json":
        return "otlp_spans"
    if detect_logs_format(value) == "otlp_json":
        return "otlp_logs"
    return "native"


class LineErrors:
    """Dead letters of the offline run: one JSON line each; remembers which lines had one."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.lines: set[int] = set()

    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        self.lines.add(msg.offset)
        self._stream.write(json.dumps({"line": msg.offset, "reason": reason, "error": detail}))
        self._stream.write("\n")

    async def reject(self, msg: RawMessage, error: DecodeError) -> None:
        await self.send(msg, error.reason, type(error).__name__, error.detail)


async def assemble_lines(
    lines: Sequence[tuple[RawMessage, LineKind]],
    settings: Settings,
    metrics: Metrics,
    errors: IO[str],
) -> tuple[list[Trace], int]:
    """The traces the OTLP lines hold, and how many lines were rejected (in part or whole)."""
    traces: list[Trace] = []
    rejected = LineErrors(errors)

    async def collect(items: list[tuple[Trace, Release[PartToken]]]) -> None:
        traces.extend(trace for trace, _ in items)

    assembly = Assembly(
        kafka=settings.kafka,
        metrics=metrics,
        otlp_metrics=OtlpMetrics(metrics.registry),
        dead_letters=rejected,
        output=collect,
        finish=lambda _messages: None,
        awaits_events=any(kind == "otlp_logs" for _, kind in lines),
    )
    now = time.monotonic()  # every line at once: nothing is released before the flush

    async def take(
        msg: RawMessage, parts: list[P] | DecodeError, add: Callable[[P, PartToken, float], None]
    ) -> None:
        if isinstance(parts, DecodeError):
            await rejected.reject(msg, parts)
            return
        token = PartToken(msg, msg, "otlp_json")
        for part in parts:
            add(part, token, now)

    for msg, kind in lines:
        if kind == "otlp_logs":
            await take(msg, split_logs_or_reject(msg, "otlp_json"), assembly.add_events)
        else:
            await take(msg, split_or_reject(msg, "otlp_json"), assembly.add)
    await assembly.flush()
    return traces, len(rejected.lines)
