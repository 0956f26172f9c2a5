"""Reading conversations from the store: one at a time, as a turn did, or a batch's together.

    python bench/conversation_reads.py                        # SQLite file, 2,000 conversations
    python bench/conversation_reads.py --url postgresql+asyncpg://USER:PW@HOST/DB

Stores N conversations of three turns (turn rows, results, carried constraints) through the
conversation repository, then reads every one of them back both ways, taking turns:
`ConversationStore.load` per conversation (the three queries a turn of a conversation not in
memory cost before issue 26) and `load_many` per batch of `--batch` conversations (what the
score stage does for a batch now). Then writes each conversation's turns again, a step per
turn and as one step, to show what writing once per conversation would save. Prints wall and
process CPU (every
thread: aiosqlite runs SQLite in its own) per conversation and the ratio; the figures swing
with the machine's load, so compare the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.models import Constraint, EvaluationResult, Score
from monitor.sinks.conversations import ConversationStep, ConversationStore, TurnRow
from monitor.sinks.store import Store, StoredResult

NOW = datetime(2026, 11, 26, tzinfo=UTC)
TURNS = 3


def _step(conversation: int, turns: range = range(1, TURNS + 1)) -> ConversationStep:
    conversation_id = f"conv-{conversation:06d}"
    rows, results = [], []
    for turn in turns:
        trace_id = f"{conversation_id}-t{turn}"
        rows.append(
            TurnRow(conversation_id, trace_id, turn, "bot", NOW, "heuristic", 0.0, None, 120, {})
        )
        result = EvaluationResult(
            trace_id=trace_id,
            conversation_id=conversation_id,
            turn=turn,
            agent="bot",
            timestamp=NOW,
            evaluator="heuristic",
            scores={"faithfulness": Score.of(1.0)},
        )
        results.append(StoredResult(result, "q", "a", NOW))
    carried = [Constraint(id="c1", text="answer in French")]
    return ConversationStep(conversation_id, "bot", rows, results, carried)


async def _seed(conversations: ConversationStore, count: int) -> list[str]:
    await asyncio.gather(*(conversations.write(_step(n)) for n in range(count)))
    return [f"conv-{n:06d}" for n in range(count)]


async def _one_by_one(conversations: ConversationStore, ids: list[str]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for conversation_id in ids:
        stored = await conversations.load(conversation_id)
        assert len(stored.turns) == TURNS
    return time.perf_counter() - wall, time.process_time() - cpu


async def _batched(
    conversations: ConversationStore, ids: list[str], batch: int
) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(ids), batch):
        found = await conversations.load_many(ids[start : start + batch])
        assert all(len(s.turns) == TURNS for s in found.values())
    return time.perf_counter() - wall, time.process_time() - cpu


async def _written(conversations: ConversationStore, count: int, combined: bool) -> float:
    """CPU per conversation to write its three turns: a step per turn, each awaited before the
    next (as a conversation's turns are written now), or one step of all three; conversations
    concurrently, as the score stage's workers write them."""

    async def one(n: int) -> None:
        if combined:
            await conversations.write(_step(n))
        else:
            for turn in range(1, TURNS + 1):
                await conversations.write(_step(n, range(turn, turn + 1)))

    cpu = time.process_time()
    for start in range(0, count, 32):  # the score stage's workers per batch
        await asyncio.gather(*(one(n) for n in range(start, min(count, start + 32))))
    return time.process_time() - cpu


async def main_async(url: str | None, count: int, batch: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        store = await Store.open(url or f"sqlite+aiosqlite:///{Path(workdir) / 'r.db'}")
        try:
            conversations = ConversationStore(store)
            ids = await _seed(conversations, count)
            alone: list[tuple[float, float]] = []
            together: list[tuple[float, float]] = []
            for _ in range(rounds):
                alone.append(await _one_by_one(conversations, ids))
                together.append(await _batched(conversations, ids, batch))
            per_turn, combined = [], []
            for _ in range(rounds):
                per_turn.append(await _written(conversations, count, combined=False))
                combined.append(await _written(conversations, count, combined=True))
        finally:
            await store.close()
    print(
        f"{count} conversations of {TURNS} turns, {(url or 'sqlite').split('+')[0]}, "
        f"{rounds} rounds each way "
        f"(medians, per conversation):"
    )
    for name, runs in (("one at a time", alone), (f"{batch} per batch", together)):
        wall = statistics.median(w for w, _ in runs) / count * 1000
        cpu = statistics.median(c for _, c in runs) / count * 1000
        print(f"  {name:>14}: {wall:.3f} ms wall, {cpu:.3f} ms CPU")
    ratio = statistics.median(c for _, c in alone) / statistics.median(c for _, c in together)
    print(f"  CPU one at a time / batched: {ratio:.1f}x")
    apart, together_ms = (statistics.median(r) / count * 1000 for r in (per_turn, combined))
    print(
        f"writing a conversation's {TURNS} turns: a step per turn {apart:.3f} ms CPU, "
        f"one step {together_ms:.3f} ms CPU ({apart / together_ms:.1f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a store URL; default: a SQLite file of its own")
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main_async(args.url, args.conversations, args.batch, args.rounds))


if __name__ == "__main__":
    main()
