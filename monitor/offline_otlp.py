"""OTLP/JSON lines of a file scored offline (`rag-monitor score`): split per trace and
assembled in process by the same :class:`~monitor.stages.assemble.Assembly` the file replay
(`run --source file:`) uses, so both accept the same lines and map them the same way.

A trace that cannot be assembled or mapped is reported on the error stream as one JSON line,
``{"line": N, "reason": ..., "error": ...}``, as `score` reports a bad native line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Literal

from monitor.config import Settings
from monitor.formats.assembly import Release
from monitor.formats.native import DecodeError
from monitor.formats.otlp import detect_format
from monitor.formats.otlp_logs import detect_logs_format
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sources.offsets import OffsetTracker
from monitor.stages.assemble import Assembly, LocalIntake, OtlpMetrics, PartToken

LineKind = Literal["native", "otlp_spans", "otlp_logs"]


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
    # The file replay's own intake, so both take the same lines the same way; the offsets of
    # this one-shot run are never committed, so its tracker only serves the intake.
    tracker = OffsetTracker()
    for msg, _ in lines:
        tracker.begin(msg.tp, msg.offset)
    intake = LocalIntake(assembly, tracker, metrics, rejected.reject, rejected)
    await intake.take([(msg, "otlp_json") for msg, kind in lines if kind == "otlp_spans"])
    await intake.take_logs([(msg, "otlp_json") for msg, kind in lines if kind == "otlp_logs"])
    await assembly.flush()
    return traces, len(rejected.lines)
