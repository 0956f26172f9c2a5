"""Conversation tracking: memory per tracked conversation and throughput at 100k active ones.

    python bench/conversations.py                       # 100k conversations, then a 60 s soak
    python bench/conversations.py --soak-seconds 600    # the report's 10-minute run

Phase 1 fills the tracker with N active conversations (3 turns each) and prints the bytes each
one holds (tracemalloc, so only Python allocations of the tracker count) and turns per second.
Phase 2 runs a steady rate of new conversations with a short idle expiry and prints resident
memory every few seconds: it should stay flat. Targets: < 2 KB per conversation, flat RSS.
The store is left out (it is measured by its own tests); the metrics are real.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.config.conversation import ConversationConfig
from monitor.metrics import AgentLabels
from monitor.models import EvaluationResult, Score, StatementVerdict, Trace
from monitor.stages.conversation import ConversationMetrics, ConversationTracker

NOW = datetime(2026, 11, 26, tzinfo=UTC)


def _pair(conversation: int, turn: int) -> tuple[Trace, EvaluationResult]:
    trace = Trace(
        trace_id=f"t-{conversation}-{turn}",
        timestamp=NOW,
        agent=f"agent-{conversation % 3}",
        conversation_id=f"conv-{conversation:07d}",
        turn=turn,
        query="q",
        contexts=[],
        answer="The kettle holds 1.7 litres.",
        memory_tokens=120 * turn,
    )
    result = EvaluationResult(
        trace_id=trace.trace_id,
        conversation_id=trace.conversation_id,
        turn=turn,
        agent=trace.agent,
        timestamp=NOW,
        evaluator="heuristic",
        scores={"faithfulness": Score.of(1.0)},
        statements=[StatementVerdict(statement="The kettle holds 1.7 litres.", supported=True)],
    )
    return trace, result


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


async def fill(count: int, turns: int) -> None:
    tracker = ConversationTracker(
        ConversationConfig(max_conversations=count * 2),
        ConversationMetrics(CollectorRegistry(), AgentLabels(50)),
    )
    pairs = [_pair(c, t) for t in range(1, turns + 1) for c in range(count)]
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    started = time.perf_counter()
    for trace, result in pairs:
        await tracker.observe(trace, result)
    elapsed = time.perf_counter() - started
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per = (after - before) / count
    print(
        f"{count:,} active conversations x {turns} turns: {per:,.0f} bytes per conversation "
        f"(target < 2048) | {len(pairs) / elapsed:,.0f} turns/s"
    )


async def soak(seconds: float, rate: int) -> None:
    tracker = ConversationTracker(
        ConversationConfig(idle_seconds=5.0, max_conversations=100_000),
        ConversationMetrics(CollectorRegistry(), AgentLabels(50)),
    )
    print(f"soak: {rate} new conversations/s x 3 turns, idle expiry 5 s, for {seconds:.0f} s")
    started = time.monotonic()
    next_report = started
    conversation = 0
    samples: list[float] = []
    while (now := time.monotonic()) - started < seconds:
        for _ in range(rate // 10):
            for turn in (1, 2, 3):
                await tracker.observe(*_pair(conversation, turn))
            conversation += 1
        await tracker.expire()
        if now >= next_report:
            samples.append(_rss_mb())
            print(f"  t={now - started:5.0f}s rss={samples[-1]:7.1f} MiB active={len(tracker):6d}")
            next_report = now + max(5.0, seconds / 12)
        await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - now)))
    half = samples[len(samples) // 2 :]
    print(
        f"soak: rss first half max {max(samples[: len(samples) // 2] or samples):.1f} MiB, "
        f"second half {min(half):.1f}-{max(half):.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--soak-seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=500, help="new conversations per second")
    args = parser.parse_args()
    asyncio.run(fill(args.conversations, args.turns))
    if args.soak_seconds > 0:
        asyncio.run(soak(args.soak_seconds, args.rate))


if __name__ == "__main__":
    main()
