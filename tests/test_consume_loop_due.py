"""The consume loop bounds a fetch's wait by the time a stage's tick has work due (a trace
settling in the assembler), so that work is done on time and not up to a whole empty fetch
later. Real loop, router and assemble stage; the source records the waits it is given."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.sources.offsets import OffsetTracker
from monitor.stages.assemble import AssembleStage, OtlpMetrics
from monitor.stages.loop import ConsumeLoop
from monitor.stages.reject import Rejecter
from monitor.stages.rekey import InProcess, RekeyStage
from monitor.stages.router import Router
from tests.support.otlp_spans import App, encode, openinference_rag
from tests.support.recorder import LetterRecorder
from tests.support.traces import daemon_settings


class Released:
    def __init__(self) -> None:
        self.count = 0

    async def take_assembled(self, items: Sequence[object]) -> None:
        self.count += len(items)


class RecordingSource:
    """One OTLP export, then empty fetches (each after the wait it was given, as a consumer
    with nothing to read); remembers the waits."""

    name = "recording"

    def __init__(self, export: bytes, stop: asyncio.Event) -> None:
        self.waits: list[float | None] = []
        self._export: bytes | None = export
        self._stop = stop

    async def fetch(self, wait_at_most: float | None = None) -> Sequence[RawMessage] | None:
        self.waits.append(wait_at_most)
        if self._export is not None:
            value, self._export = self._export, None
            return [RawMessage("otlp", 0, 0, None, value)]
        await asyncio.sleep(0.05 if wait_at_most is None else wait_at_most)  # nothing came
        if len(self.waits) >= 6:
            self._stop.set()
        return []

    async def commit_if_due(self) -> None:
        return None


def test_the_fetch_waits_no_longer_than_the_next_trace_to_settle() -> None:
    app = App()
    openinference_rag(app)
    settings = daemon_settings(
        "localhost:1", [], "g", "dlq", otlp_topics=["otlp"], otlp_assembly_settle_seconds=0.2
    )
    metrics = Metrics(CollectorRegistry())
    tracker = OffsetTracker()
    rejecter = Rejecter(LetterRecorder(), metrics, tracker, max_bytes=1 << 20)
    released = Released()
    assemble = AssembleStage(
        kafka=settings.kafka,
        metrics=metrics,
        otlp_metrics=OtlpMetrics(metrics.registry),
        rejecter=rejecter,
        tracker=tracker,
        output=released,
    )
    rekey = RekeyStage(InProcess(assemble.take_parts), rejecter, tracker, metrics)
    stop = asyncio.Event()
    source = RecordingSource(encode(app.spans(), "otlp_proto"), stop)
    loop = ConsumeLoop(
        name="scoring",
        tracker=tracker,
        router=Router(input_format="otlp_proto", max_bytes=1 << 20),
        stages=[rekey, assemble],
        rejecter=rejecter,
        metrics=metrics,
        stopping=stop.is_set,
        on_fatal=lambda exc: None,
        drain_deadline=lambda: math.inf,
    )
    asyncio.run(loop.run(source))
    first, after_export, *rest = source.waits
    assert first is None, "nothing held: the source's own wait"
    assert after_export is not None and 0.1 < after_export <= 0.2, "the trace settles by then"
    assert released.count == 1
    assert rest and rest[-1] is None, "released: nothing due"
