"""How long does one huge input hold the event loop?

    python bench/loop_lag.py [--sizes 10000,100000,1000000] [--offload-chars N]
                             [--spans 10000,100000] [--attribute-chars 5000000]
                             [--native-contexts 100000]

A ticker task on the loop wakes every millisecond; its longest gap is how long the loop was
unavailable to everything else (the HTTP probes, the Kafka fetcher, other traces). Measured,
each run on the loop ("loop": no offloading) and as the daemon runs it ("thread": the work of
large inputs in a worker thread):

- tier 0 scoring a trace whose answer and contexts total about `--sizes` characters (English
  sentences, a few of them unsupported), by a real :class:`ScoringProcessor`;
- the OTLP stage's assembly taking a trace of `--spans` spans (split, assembled, mapped, or
  dead-lettered beyond `kafka.otlp_max_spans_per_trace`): in exports of 512 spans (the
  Collector's batch size) with the default bound and with the bound lifted, and in one export
  (over the default `kafka.max_message_bytes`: a deployment that raised it); and one export
  whose LLM span carries a prompt attribute of `--attribute-chars` characters;
- decoding native traces of `--native-contexts` contexts (about 100 bytes each).

The heap left by start-up is frozen first, as the daemon freezes it (a full garbage
collection would otherwise traverse it and pause the loop whatever the input). Compare the gaps
of one run; absolute times vary between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import monitor.offload
from monitor.config import KafkaConfig
from monitor.config.scoring import SamplingConfig
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.sampler import Sampler
from monitor.formats.assembly import Release
from monitor.formats.native import decode_native
from monitor.messages import RawMessage
from monitor.metrics import AgentLabels, Metrics
from monitor.models import Context, Trace
from monitor.offload import offload
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.sources.offsets import OffsetTracker
from monitor.stages import offloaded
from monitor.stages.assemble import AssembleStage, OtlpMetrics
from monitor.stages.parts import PartToken
from monitor.stages.reject import Rejecter
from monitor.stages.scoring import DEFAULT_OFFLOAD_CHARS, ScoringProcessor
from tests.support.otlp_big import wide_trace
from tests.support.recorder import LetterRecorder
from tests.support.traces import native_trace

SENTENCE = "The warranty covers parts and labour for {n} months after the date of purchase. "
UNSUPPORTED = "The warranty also covers accidental damage caused by water on day {n}. "


def big_trace(chars: int) -> Trace:
    answer_parts: list[str] = []
    context_parts: list[str] = []
    n = 0
    while sum(map(len, answer_parts)) + sum(map(len, context_parts)) < chars:
        n += 1
        answer_parts.append((UNSUPPORTED if n % 10 == 0 else SENTENCE).format(n=n))
        context_parts.append(SENTENCE.format(n=n))
    half = len(context_parts) // 2
    return Trace(
        trace_id=f"big-{chars}",
        timestamp=datetime(2026, 11, 26, tzinfo=UTC),
        query="What does the warranty cover?",
        contexts=[
            Context(id="c1", text="".join(context_parts[:half])),
            Context(id="c2", text="".join(context_parts[half:])),
        ],
        answer="".join(answer_parts),
    )


async def longest_gap(work: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(seconds `work` took, the ticker's longest gap meanwhile)."""
    longest = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - started
    done.set()
    await task
    return elapsed, longest


async def measure(trace: Trace, offload_chars: int) -> tuple[float, float]:
    processor = ScoringProcessor(
        tier0=HeuristicEvaluator(),
        metrics=ScoringMetrics(CollectorRegistry(), AgentLabels(10), 300.0),
        sampler=Sampler(SamplingConfig(rate=0.0)),
        offload_chars=offload_chars,
    )
    return await longest_gap(lambda: processor.process(trace))


async def assemble(messages: list[bytes], max_spans: int) -> str:
    """Exports through the OTLP stage's split, assembly and mapping; what became of them."""
    registry = CollectorRegistry()
    letters = LetterRecorder()
    mapped: list[Trace] = []

    class Mapped:
        async def take_assembled(self, items: Sequence[tuple[Trace, Release[PartToken]]]) -> None:
            mapped.extend(trace for trace, _ in items)

    config = KafkaConfig(
        otlp_max_spans_per_trace=max_spans,
        max_message_bytes=64 * 2**20,
        otlp_max_pending_bytes=2**30,
    )
    metrics, tracker = Metrics(registry), OffsetTracker()
    assembly = AssembleStage(
        kafka=config,
        metrics=metrics,
        otlp_metrics=OtlpMetrics(registry),
        rejecter=Rejecter(letters, metrics, tracker, max_bytes=config.max_message_bytes),
        tracker=tracker,
        output=Mapped(),
    )
    for offset, data in enumerate(messages):
        msg = RawMessage("otlp", 0, offset, None, data)
        split = await offloaded.split(msg, "otlp_proto")
        assert not isinstance(split, Exception), split
        token = PartToken(msg, msg, "otlp_proto")
        for part in split.parts:
            await assembly.add(part, token, 0.0)
        await asyncio.sleep(0)  # the stage reads the next batch
    await assembly.tick(10**6)
    if mapped:
        return "mapped"
    reasons = [letter["reason"] for letter in letters.sent]
    return f"{len(reasons)} {reasons[0]}" if reasons else "nothing"


def exports(spans: int, per_export: int | None, attribute_chars: int = 0) -> list[bytes]:
    """One trace of `spans` spans as exports of `per_export` spans each (None: one export)."""
    _, request = wide_trace(spans, attribute_chars=attribute_chars)
    if per_export is None:
        return [request.SerializeToString()]
    scope = request.resource_spans[0].scope_spans[0]
    everything = list(scope.spans)
    out = []
    for start in range(0, len(everything), per_export):
        del scope.spans[:]
        scope.spans.extend(everything[start : start + per_export])
        out.append(request.SerializeToString())
    return out


def inline(enabled: bool) -> None:
    """Run large work on the loop (True) or as the daemon does (False)."""
    monitor.offload.OFFLOAD_BYTES = 10**15 if enabled else DEFAULT_OFFLOAD_BYTES


DEFAULT_OFFLOAD_BYTES = monitor.offload.OFFLOAD_BYTES
DEFAULT_MAX_SPANS = KafkaConfig().otlp_max_spans_per_trace
BATCH = 512  # spans per export: the Collector's batch processor's default


async def otlp_rows(span_counts: list[int], attribute_chars: int) -> None:
    header = f"{'OTLP trace':>42} {'bound':>7} {'where':>7} {'outcome':>18} {'s':>6} {'gap ms':>7}"
    print("\n" + header)
    cases: list[tuple[str, list[bytes], int]] = []
    for count in span_counts:
        batched = exports(count, BATCH)
        label = f"{count} spans in {len(batched)} exports"
        cases.append((label, batched, DEFAULT_MAX_SPANS))
        if count > DEFAULT_MAX_SPANS:
            cases.append((label, batched, count))  # the bound lifted: what mapping it costs
        whole = exports(count, None)
        label = f"{count} spans in one export of {len(whole[0]) / 2**20:.1f} MiB"
        cases.append((label, whole, DEFAULT_MAX_SPANS))
    if attribute_chars:
        data = exports(10, None, attribute_chars)
        label = f"an attribute of {attribute_chars / 1e6:g}M chars"
        cases.append((label, data, DEFAULT_MAX_SPANS))
    for label, messages, bound in cases:
        for where in ("loop", "thread"):
            inline(where == "loop")
            outcome: list[str] = []

            async def work(
                messages: list[bytes] = messages, bound: int = bound, out: list[str] = outcome
            ) -> None:
                out.append(await assemble(messages, bound))

            elapsed, gap = await longest_gap(work)
            row = f"{label:>42} {bound:>7} {where:>7} {outcome[0]:>18}"
            print(f"{row} {elapsed:>6.2f} {gap * 1000:>7.1f}")
    inline(False)


async def native_rows(contexts_counts: list[int]) -> None:
    print(f"\n{'native trace':>42} {'where':>7} {'s':>6} {'gap ms':>7}")
    for contexts in contexts_counts:
        texts = [{"id": f"c{i}", "text": "Opening hours. " * 5} for i in range(contexts)]
        data = json.dumps(native_trace(1, contexts=texts)).encode()
        label = f"{contexts} contexts, {len(data) / 2**20:.1f} MiB"
        for where in ("loop", "thread"):
            inline(where == "loop")

            async def decode(data: bytes = data) -> None:
                await offload(len(data), functools.partial(decode_native, data))

            elapsed, gap = await longest_gap(decode)
            print(f"{label:>42} {where:>7} {elapsed:>6.2f} {gap * 1000:>7.1f}")
    inline(False)


async def main_async(
    sizes: list[int],
    offload_chars: int,
    spans: list[int],
    attribute_chars: int,
    native_contexts: list[int],
) -> None:
    # As the daemon does after start-up (monitor/daemon.py _freeze_startup_heap): otherwise a
    # full collection traverses every object the imports left, a pause no input causes.
    gc.collect()
    gc.freeze()
    print(f"{'chars':>9} {'where':>7} {'tier 0 s':>9} {'longest loop gap ms':>20}")
    for size in sizes:
        trace = big_trace(size)
        chars = len(trace.answer) + sum(len(c.text) for c in trace.contexts)
        for where, threshold in (("loop", 10**12), ("thread", offload_chars)):
            elapsed, gap = await measure(trace, threshold)
            print(f"{chars:>9} {where:>7} {elapsed:>9.3f} {gap * 1000:>20.1f}")
    if spans or attribute_chars:
        await otlp_rows(spans, attribute_chars)
    if native_contexts:
        await native_rows(native_contexts)


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--offload-chars", type=int, default=DEFAULT_OFFLOAD_CHARS)
    parser.add_argument("--spans", default="10000,100000")
    parser.add_argument("--attribute-chars", type=int, default=1_000_000)
    parser.add_argument("--native-contexts", default="10000,100000")
    args = parser.parse_args()
    asyncio.run(
        main_async(
            _ints(args.sizes),
            args.offload_chars,
            _ints(args.spans),
            args.attribute_chars,
            _ints(args.native_contexts),
        )
    )


if __name__ == "__main__":
    main()
