"""The OTLP stage's assembly under bad input: a trace of too many spans, a parent cycle, a
fragment of a trace already scored whole, shedding at the memory bound. Each costs only itself,
with a dead letter, a count or a log line saying so.

The assemble stage (assembler, mapping, dead letters) is real; its neighbours -- the
dead-letter producer, the traces topic and the offset tracker -- are recorders. Through the
real broker: `tests/test_faults_otlp_input.py`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import structlog
from aiokafka.structs import TopicPartition
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry

from monitor.config import KafkaConfig
from monitor.formats.assembly import ENTRY_BYTES, SPAN_BYTES, Release
from monitor.formats.otlp import decode_otlp
from monitor.formats.otlp_split import split_by_trace
from monitor.messages import RawMessage, Routed
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.sources.offsets import OffsetTracker
from monitor.stages.assemble import AssembleStage, OtlpMetrics
from monitor.stages.parts import PartToken, header_shapes, part_headers, shapes_header
from monitor.stages.reject import Rejecter
from tests.support.otlp_big import wide_trace
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import langchain_turn
from tests.support.recorder import LetterRecorder


class FinishRecorder(OffsetTracker):
    """The offset tracker, remembering the offset of every message finished."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[int] = []

    def finish(self, tp: TopicPartition, offset: int, units: int = 1) -> None:
        self.finished.append(offset)
        super().finish(tp, offset, units)


class Rig:
    def __init__(self, scored_whole: set[str] | None = None, **kafka: Any) -> None:
        self.registry = CollectorRegistry()
        self.letters = LetterRecorder()
        self.out: list[Trace] = []
        whole = scored_whole

        async def scored(trace_id: str) -> bool:
            assert whole is not None
            return trace_id in whole

        self.tracker = FinishRecorder()
        metrics = Metrics(self.registry)
        config = KafkaConfig(**kafka)
        self.assembly = AssembleStage(
            kafka=config,
            metrics=metrics,
            otlp_metrics=OtlpMetrics(self.registry),
            rejecter=Rejecter(
                self.letters, metrics, self.tracker, max_bytes=config.max_message_bytes
            ),
            tracker=self.tracker,
            output=self,
            scored_whole=scored if whole is not None else None,
        )

    async def take_assembled(self, items: Sequence[tuple[Trace, Release[PartToken]]]) -> None:
        for trace, release in items:
            self.out.append(trace)
            for token in release.tokens:
                self.tracker.finish(token.message.tp, token.message.offset)

    @property
    def finished(self) -> list[int]:
        return self.tracker.finished

    async def take(self, offset: int, data: bytes, now: float = 0.0) -> None:
        msg = RawMessage("otlp", 0, offset, None, data)
        self.tracker.begin(msg.tp, msg.offset)
        token = PartToken(msg, msg, "otlp_proto")
        for part in split_by_trace(data, "otlp_proto").parts:
            await self.assembly.add(part, token, now)

    def count(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


async def test_a_trace_over_the_span_bound_is_dead_lettered_and_so_are_its_later_parts() -> None:
    rig = Rig(otlp_max_spans_per_trace=50)
    big_id, big = wide_trace(120, seed=1)
    small_id, small = wide_trace(10, seed=2)
    spans = list(big.resource_spans[0].scope_spans[0].spans)
    for offset, chunk in enumerate((spans[:40], spans[40:80], spans[80:])):
        del big.resource_spans[0].scope_spans[0].spans[:]
        big.resource_spans[0].scope_spans[0].spans.extend(chunk)
        await rig.take(offset, big.SerializeToString())
    await rig.take(3, small.SerializeToString())
    await rig.assembly.tick(time.monotonic() + 120)
    assert [t.trace_id for t in rig.out] == [small_id], "the other trace is scored"
    assert [(d["offset"], d["reason"]) for d in rig.letters.sent] == [
        (0, "too_many_spans"),  # what the trace held: the 40 spans of the first message
        (1, "too_many_spans"),  # the part that took it over the bound
        (2, "too_many_spans"),  # a later part
    ]
    assert big_id in rig.letters.sent[0]["detail"] and "50" in rig.letters.sent[0]["detail"]
    held = decode_otlp(rig.letters.sent[0]["value"], "otlp_proto")
    assert len(held) == 40, "the dead letter carries the spans it held"
    assert sorted(rig.finished) == [0, 1, 2, 3], "every message finished"
    assert rig.count("ragmon_dead_letters_total", reason="too_many_spans") == 3
    # the small trace, kept for its grace period: its bytes and its bookkeeping's estimate
    kept = len(small.SerializeToString()) + ENTRY_BYTES + 10 * SPAN_BYTES
    assert rig.assembly.assembler.bytes == kept, "nothing of the big one is kept"


async def test_one_export_over_the_bound_is_one_dead_letter_and_never_held() -> None:
    rig = Rig(otlp_max_spans_per_trace=1000)
    _, big = wide_trace(5000)
    await rig.take(7, big.SerializeToString())
    assert [(d["offset"], d["reason"]) for d in rig.letters.sent] == [(7, "too_many_spans")]
    assert rig.finished == [7] and rig.assembly.assembler.pending == 0


async def test_a_parent_cycle_dead_letters_only_its_own_trace() -> None:
    rig = Rig()
    cyclic_id, cyclic = wide_trace(5, seed=3)
    spans = cyclic.resource_spans[0].scope_spans[0].spans
    spans[3].parent_span_id = spans[4].span_id  # two tools, each the other's parent
    spans[4].parent_span_id = spans[3].span_id
    good_id, good = wide_trace(5, seed=4)
    await rig.take(0, cyclic.SerializeToString() + good.SerializeToString())
    await rig.assembly.tick(time.monotonic() + 120)
    assert [t.trace_id for t in rig.out] == [good_id]
    (letter,) = rig.letters.sent
    assert letter["reason"] == "otlp_unmappable" and "cycle" in letter["detail"]
    assert cyclic_id in letter["detail"]


async def _fragment(rig: Rig) -> str:
    """The retriever and parallel step of a turn: read again alone after a crash, they cannot
    be mapped (no answer) and are released incomplete after the maximum wait."""
    app = App()
    turn = langchain_turn(app, 1, session="conv", start_ns=time.time_ns())
    await rig.take(0, encode(turn.early(), "otlp_proto"))
    await rig.assembly.tick(time.monotonic() + 120)
    return turn.trace_id


async def test_a_fragment_of_a_trace_already_scored_whole_is_skipped_as_late_spans() -> None:
    app = App()
    turn = langchain_turn(app, 1, session="conv", start_ns=time.time_ns())
    rig = Rig(scored_whole={turn.trace_id})
    await rig.take(0, encode(turn.early(), "otlp_proto"))
    await rig.assembly.tick(time.monotonic() + 120)
    assert rig.letters.sent == [] and rig.out == []
    assert rig.count("ragmon_traces_skipped_total", reason="otlp_late_spans") == 1
    assert rig.finished == [0]


async def test_the_same_fragment_of_a_trace_never_scored_is_dead_lettered() -> None:
    rig = Rig(scored_whole=set())
    trace_id = await _fragment(rig)
    (letter,) = rig.letters.sent
    assert letter["reason"] == "otlp_unmappable" and trace_id in letter["detail"]
    assert rig.count("ragmon_traces_skipped_total", reason="otlp_late_spans") == 0


async def test_shedding_logs_at_most_one_line_a_minute_with_counts() -> None:
    rig = Rig(otlp_max_pending_traces=2)
    apps = [App() for _ in range(30)]
    with structlog.testing.capture_logs() as logs:
        for n, app in enumerate(apps):
            turn = langchain_turn(app, n, session=None, start_ns=time.time_ns())
            data = encode_spans(turn.early()).SerializeToString()  # never whole: stays pending
            await rig.take(n, data)
        await rig.assembly.tick()
    shed = [e for e in logs if e["event"].startswith("OTLP assembler shedding")]
    assert rig.count("ragmon_otlp_assembly_shed_total", reason="pending_limit") == 28
    assert len(shed) == 1, "the first shed is logged at once, the rest wait for the minute"
    assert shed[0]["counts"] == {"pending_limit": 1}
    assert shed[0]["pending"] == 2 and shed[0]["log_level"] == "warning"


async def test_spans_sent_again_do_not_count_twice_against_the_bound() -> None:
    rig = Rig(otlp_max_spans_per_trace=50)
    trace_id, request = wide_trace(45, seed=8)
    spans = list(request.resource_spans[0].scope_spans[0].spans)
    del request.resource_spans[0].scope_spans[0].spans[30:]
    first = request.SerializeToString()
    del request.resource_spans[0].scope_spans[0].spans[:]
    request.resource_spans[0].scope_spans[0].spans.extend(spans[20:])  # 10 of them again
    second = request.SerializeToString()
    await rig.take(0, first)
    await rig.take(1, first)  # the same part again (at-least-once)
    await rig.take(2, second)  # 25 spans, 10 of them held already: 45 in all
    await rig.assembly.tick(time.monotonic() + 120)
    assert rig.letters.sent == []
    assert [t.trace_id for t in rig.out] == [trace_id]


async def _from_spans_topic(rig: Rig, parts: Sequence[Any], with_shapes: bool) -> list[Trace]:
    origin = RawMessage("otlp", 0, 0, None, b"")
    batch = []
    for offset, part in enumerate(parts):
        headers = part_headers(origin, "otlp_proto")
        if with_shapes:
            headers += shapes_header(part.shapes)
        msg = RawMessage("spans", 0, offset, part.trace_id.encode(), part.data, tuple(headers))
        rig.tracker.begin(msg.tp, msg.offset)
        batch.append(Routed(msg, "otlp_proto", internal=True))
    await rig.assembly.handle_batch(batch)
    await rig.assembly.flush()
    return rig.out


async def test_a_part_read_off_the_spans_topic_is_parsed_only_when_its_trace_is_mapped(
    monkeypatch: Any,
) -> None:
    """The re-key stage writes each part's span shapes in a header: the assemble stage knows
    when the trace is whole without parsing the part (issue 26: once per hop), and maps the
    same trace as from a part it parses (one written without the header)."""
    turn = langchain_turn(App(), 1, session="conv", start_ns=time.time_ns())
    early = split_by_trace(encode(list(turn.early()), "otlp_proto"), "otlp_proto").parts
    late = split_by_trace(encode(list(turn.late()), "otlp_proto"), "otlp_proto").parts
    parts = [*early, *late]
    assert header_shapes(
        RawMessage("s", 0, 0, None, b"", tuple(shapes_header(parts[0].shapes)))
    ) == tuple(parts[0].shapes)
    parsed = await _from_spans_topic(Rig(), parts, with_shapes=False)

    def no_parsing(*_: object) -> None:
        raise AssertionError("a part with its shapes in a header was parsed on arrival")

    monkeypatch.setattr("monitor.stages.offloaded.split", no_parsing)
    rig = Rig()
    from_headers = await _from_spans_topic(rig, parts, with_shapes=True)
    assert len(parsed) == 1
    assert from_headers == parsed
    assert sorted(rig.finished) == [0, 1], "both parts' messages finished"
