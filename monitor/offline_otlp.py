"""OTLP/JSON lines of a file scored offline (`rag-monitor score`): split per trace and
assembled in process by the same stages the file replay (`run --source file:`) runs (the re-key
stage handing its parts straight to the assemble stage), so both accept the same lines and map
them the same way.

A trace that cannot be assembled or mapped is reported on the error stream as one JSON line,
``{"line": N, "reason": ..., "error": ...}``, as `score` reports a bad native line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import IO, Literal

from monitor.config import Settings
from monitor.messages import RawMessage, Routed
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sources.offsets import OffsetTracker
from monitor.stages.assemble import AssembleStage, OtlpMetrics
from monitor.stages.ports import Assembled
from monitor.stages.reject import Rejecter
from monitor.stages.rekey import InProcess, RekeyStage

LineKind = Literal["native", "otlp_spans", "otlp_logs"]


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


class _Collected:
    """Where the assembled traces end up: a list."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []

    async def take_assembled(self, items: Sequence[Assembled]) -> None:
        self.traces.extend(trace for trace, _ in items)


async def assemble_lines(
    lines: Sequence[tuple[RawMessage, LineKind]],
    settings: Settings,
    metrics: Metrics,
    errors: IO[str],
) -> tuple[list[Trace], int]:
    """The traces the OTLP lines hold, and how many lines were rejected (in part or whole)."""
    rejected = LineErrors(errors)
    # The offsets of this one-shot run are never committed: the tracker only serves the stages.
    tracker = OffsetTracker()
    for msg, _ in lines:
        tracker.begin(msg.tp, msg.offset)
    rejecter = Rejecter(
        rejected, metrics, tracker, max_bytes=settings.kafka.max_message_bytes, quiet=True
    )
    collected = _Collected()
    assemble = AssembleStage(
        kafka=settings.kafka,
        metrics=metrics,
        otlp_metrics=OtlpMetrics(metrics.registry),
        rejecter=rejecter,
        tracker=tracker,
        output=collected,
        awaits_events=any(kind == "otlp_logs" for _, kind in lines),
        flush_at_drain=True,
    )
    rekey = RekeyStage(InProcess(assemble.take_parts), rejecter, tracker, metrics)
    for kind in ("otlp_spans", "otlp_logs"):
        await rekey.handle_batch(
            [Routed(msg, "otlp_json", logs=kind == "otlp_logs") for msg, k in lines if k == kind]
        )
    await assemble.drain(math.inf)
    return collected.traces, len(rejected.lines)
