"""Where should tier 0 run: on the event loop, in a worker thread, or in worker processes?

    python bench/tier0_offload.py [--traces 2080] [--concurrency 8]

Scores the labelled dev traces (English and Japanese, repeated up to ``--traces``) from an
asyncio loop with ``--concurrency`` tasks that yield after each trace, as the scoring stage's
workers do, in each of these ways (each in a fresh process, caches cold at the start):

- ``inline``: ``evaluate(trace)`` on the loop (the daemon's way for traces under 50,000 chars);
- ``thread``: ``asyncio.to_thread`` per trace (its way for bigger ones);
- ``process xN``: a ``ProcessPoolExecutor`` of N workers, each with its own evaluator; the trace
  goes there and the result comes back pickled.

and prints, per way: traces/s (wall clock), the CPU time spent per trace by this process and
by the workers, and the event loop's lag (how late a 5 ms heartbeat wakes: what every other
trace, the Kafka fetcher and the probes wait), p99 and max. Then what pickling a trace and its
result costs per trace, against tier 0's own CPU. Compare ways within one run: the machine's
load moves every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monitor.evaluators.heuristic import HeuristicEvaluator  # noqa: E402
from monitor.models import Context, EvaluationResult, Trace  # noqa: E402

DATA = REPO / "data" / "hallucination"
WAYS = {"inline": 0, "thread": 0, "process x1": 1, "process x2": 2}  # way -> worker processes
HEARTBEAT = 0.005


def load_traces(count: int) -> list[Trace]:
    rows = []
    for name in ("dev_en.jsonl", "dev_ja.jsonl"):
        with (DATA / name).open(encoding="utf-8") as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    traces = []
    for i in range(count):
        row = rows[i % len(rows)]
        contexts = [
            Context(id=f"{row['id']}#{j}", text=text, rank=j)
            for j, text in enumerate(row.get("contexts") or [])
        ]
        traces.append(Trace(trace_id=f"{row['id']}/{i}", timestamp=datetime.now(UTC),
                            query=row.get("question") or "", contexts=contexts,
                            answer=row.get("answer") or "", language=row.get("lang")))  # fmt: skip
    return traces


_worker_evaluator: HeuristicEvaluator | None = None


def _start_worker() -> None:
    global _worker_evaluator
    _worker_evaluator = HeuristicEvaluator()


def _evaluate_in_worker(trace: Trace) -> EvaluationResult:
    assert _worker_evaluator is not None
    return _worker_evaluator.evaluate(trace)


async def run(
    traces: list[Trace], concurrency: int, score: Callable[[Trace], Awaitable[EvaluationResult]]
) -> tuple[float, list[float]]:
    """Wall seconds to score every trace through `concurrency` tasks, and the loop's lags."""
    lags: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(HEARTBEAT)
            lags.append(time.perf_counter() - started - HEARTBEAT)

    queue = iter(traces)

    async def worker() -> None:
        for trace in queue:
            await score(trace)
            await asyncio.sleep(0)  # the stage's store and results writes yield here

    beat = asyncio.create_task(heartbeat())
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    done.set()
    await beat
    return wall, lags


def measure(name: str, traces: list[Trace], concurrency: int, workers: int) -> None:
    evaluator = HeuristicEvaluator()
    pool = (
        concurrent.futures.ProcessPoolExecutor(workers, initializer=_start_worker)
        if workers
        else None
    )

    async def score(trace: Trace) -> EvaluationResult:
        if not workers and name == "inline":
            return evaluator.evaluate(trace)
        if not workers:
            return await asyncio.to_thread(evaluator.evaluate, trace)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, _evaluate_in_worker, trace)

    if pool is not None:  # start the workers (and load their models) before the clock starts
        list(pool.map(_evaluate_in_worker, traces[: workers * 2]))
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall, lags = asyncio.run(run(traces, concurrency, score))
    after = resource.getrusage(resource.RUSAGE_SELF)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if pool is not None:
        pool.shutdown()  # the workers' CPU is counted once they have exited
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / len(traces)
    theirs = (
        children.ru_utime + children.ru_stime - children_before.ru_utime - children_before.ru_stime
    ) / len(traces)
    lags.sort()
    p99 = lags[int(0.99 * (len(lags) - 1))] if lags else 0.0
    print(f"{name:<12} {len(traces) / wall:9.0f} {own * 1000:10.3f} {theirs * 1000:12.3f} "
          f"{p99 * 1000:9.1f} {max(lags, default=0.0) * 1000:9.1f}")  # fmt: skip


def pickling_cost(traces: list[Trace]) -> None:
    evaluator = HeuristicEvaluator()
    results = [evaluator.evaluate(trace) for trace in traces]
    tier0 = []
    for trace in traces:
        started = time.thread_time()
        evaluator.evaluate(trace)
        tier0.append(time.thread_time() - started)
    started = time.thread_time()
    sizes = 0
    for trace, result in zip(traces, results, strict=True):
        for value in (trace, result):
            data = pickle.dumps(value)
            sizes += len(data)
            pickle.loads(data)
    per_trace = (time.thread_time() - started) / len(traces)
    print(f"pickling a trace and its result (both ways): {per_trace * 1000:.3f} ms CPU per trace, "
          f"{sizes / len(traces) / 1024:.1f} KiB; tier 0 itself: "
          f"{statistics.mean(tier0) * 1000:.3f} ms per trace (mean, caches warm)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2080)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    traces = load_traces(args.traces)
    if args.way:
        measure(args.way, traces, args.concurrency, WAYS[args.way])
        return 0
    print(f"{args.traces} dev traces, {args.concurrency} tasks, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'way':<12} {'traces/s':>9} {'CPU ms/tr':>10} {'workers ms/tr':>12} "
          f"{'lag p99':>9} {'lag max':>9}  (ms)")  # fmt: skip
    for way in WAYS:  # each in a fresh process: every way starts with cold caches
        command = [sys.executable, __file__, "--way", way, "--traces", str(args.traces),
                   "--concurrency", str(args.concurrency)]  # fmt: skip
        subprocess.run(command, check=True)
    pickling_cost(traces[:520])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
