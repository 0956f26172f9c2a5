"""How long does one huge trace hold the event loop while tier 0 scores it?

    python bench/loop_lag.py [--sizes 10000,100000,1000000] [--offload-chars N]

For each size, a trace whose answer and contexts total about that many characters (English
sentences, a few of them unsupported) is scored by a real :class:`ScoringProcessor` with the
real tier-0 evaluator, while a ticker task on the same loop wakes every millisecond. Printed
per size: tier 0's time, and the ticker's longest gap (how long the loop was unavailable to
everything else: the HTTP probes, the Kafka fetcher, other traces), with tier 0 run on the
loop (no offloading) and in a worker thread (the default threshold). Compare
the two gaps of one run; absolute times vary between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.sampler import Sampler
from monitor.models import Context, Trace
from monitor.pipeline.scoring import DEFAULT_OFFLOAD_CHARS, ScoringProcessor
from monitor.sinks.metrics import AgentLabels
from monitor.sinks.scoring_metrics import ScoringMetrics

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


async def measure(trace: Trace, offload_chars: int) -> tuple[float, float]:
    processor = ScoringProcessor(
        tier0=HeuristicEvaluator(),
        metrics=ScoringMetrics(CollectorRegistry(), AgentLabels(10), 300.0),
        sampler=Sampler(SamplingConfig(rate=0.0)),
        offload_chars=offload_chars,
    )
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
    await processor.process(trace)
    elapsed = time.perf_counter() - started
    done.set()
    await task
    return elapsed, longest


async def main_async(sizes: list[int], offload_chars: int) -> None:
    print(f"{'chars':>9} {'where':>7} {'tier 0 s':>9} {'longest loop gap ms':>20}")
    for size in sizes:
        trace = big_trace(size)
        chars = len(trace.answer) + sum(len(c.text) for c in trace.contexts)
        for where, threshold in (("loop", 10**12), ("thread", offload_chars)):
            elapsed, gap = await measure(trace, threshold)
            print(f"{chars:>9} {where:>7} {elapsed:>9.3f} {gap * 1000:>20.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--offload-chars", type=int, default=DEFAULT_OFFLOAD_CHARS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    asyncio.run(main_async(sizes, args.offload_chars))


if __name__ == "__main__":
    main()
