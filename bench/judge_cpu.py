"""The judge's own CPU per judged trace: what the daemon's event loop spends on its chat calls.

    python bench/judge_cpu.py [--rounds 5] [--passes 10] [--tree DIR]...

A judged trace in the daemon costs its event loop the judge's calls: the faithfulness and
relevance calls of :meth:`LLMJudge.evaluate` and, in a conversation, the turn call of
:meth:`LLMJudge.judge_turn` -- building each prompt, the ``openai`` client sending it over httpx
and parsing the reply, then the verdict. This judges `bench/judge_cost.py`'s 20 traces (10
English, 10 Japanese; the cache off, so every trace is a miss) `--passes` times against the
scripted OpenAI-compatible server of the tests on loopback, which runs in a thread of its own,
and prints the CPU of the judging thread only (``time.thread_time``) per judged trace, three
calls each: the server's work is not counted, the network stack's and the client's are.

Each ``--tree DIR`` (another checkout's root, e.g. ``git archive main | tar -x -C DIR``) is timed
in its own process, importing from DIR, the trees (the working tree first, as ``.``) taking
turns for `--rounds` rounds; the table gives each tree's median and range, and its ratio to the
first tree's median. The first pass of every process warms up and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_tree = os.environ.get("RAGMON_BENCH_TREE")  # the judge's code from there, as bench/ingest.py
sys.path[:0] = [str(Path(_tree).resolve())] if _tree else []
sys.path.insert(1 if _tree else 0, str(REPO))
# bound now: bench.judge_cost puts this checkout first on sys.path when imported, and the
# tree's `monitor` must stay the one every later import resolves to
import monitor  # noqa: E402, F401


async def _judge_all(passes: int) -> float:
    """Judge every trace `passes` times (after one pass of warm-up); CPU ms per judged trace."""
    from prometheus_client import CollectorRegistry

    from bench.judge_cost import build_traces
    from monitor.config.judge import JudgeConfig
    from monitor.evaluators.judge_metrics import JudgeMetrics
    from monitor.evaluators.llm import LLMJudge
    from monitor.logs import configure_logging
    from tests.support.openai_server import OpenAIServer

    configure_logging("json", "info")  # as the daemon runs: its debug lines filtered out
    traces = build_traces()
    with OpenAIServer() as server:
        config = JudgeConfig(
            base_url=server.url, model="judge-test", timeout_seconds=30.0, cache_ttl_seconds=0
        )
        judge = LLMJudge(config, JudgeMetrics(CollectorRegistry()))
        try:
            started = 0.0
            for n in range(passes + 1):
                if n == 1:
                    started = time.thread_time()
                for t in traces:
                    result, turn = await asyncio.gather(
                        judge.evaluate(t), judge.judge_turn(t, [], [])
                    )
                    failed = result.errors or turn.unmeasured_reason
                    if failed:
                        raise SystemExit(f"judge failed on {t.trace_id}: {failed}")
            return (time.thread_time() - started) * 1000.0 / (passes * len(traces))
        finally:
            await judge.aclose()


def _time_tree(tree: str, passes: int) -> float:
    env = dict(os.environ)
    if tree != ".":
        env["RAGMON_BENCH_TREE"] = str(Path(tree).resolve())
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(passes)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=10, help="passes over the 20 traces")
    parser.add_argument("--tree", action="append", default=[], help="another tree to time")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(f"{asyncio.run(_judge_all(args.worker)):.4f}")
        return
    trees = [".", *args.tree]
    timed: dict[str, list[float]] = {tree: [] for tree in trees}
    for n in range(args.rounds):
        for tree in trees:
            timed[tree].append(_time_tree(tree, args.passes))
        print(f"round {n + 1}: " + ", ".join(f"{t} {timed[t][-1]:.3f}" for t in trees))
    first = statistics.median(timed["."])
    print("\n| tree | CPU ms per judged trace (3 calls), median [range] | against . |")
    print("|---|---|---|")
    for tree, values in timed.items():
        median = statistics.median(values)
        print(
            f"| {tree} | {median:.3f} [{min(values):.3f}-{max(values):.3f}] "
            f"| {median / first:.2f} |"
        )


if __name__ == "__main__":
    main()
