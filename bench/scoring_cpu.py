"""CPU per scored trace: `bench/ingest.py --scoring`'s stage, timed by process CPU, not the clock.

    python bench/scoring_cpu.py --bootstrap HOST:PORT
    python bench/scoring_cpu.py --bootstrap HOST:PORT --tree /tmp/before --rounds 3

The wall-clock rate of `bench/ingest.py --scoring` follows whatever else the cores run; the CPU
the scoring process spends per trace (every thread: aiosqlite runs SQLite in its own) moves far
less. Each round produces `--traces` of ingest's traces (three-turn conversations, keyed as
ingest keys them) to a fresh topic and runs ingest's `scoring_path` on them in a fresh process,
this tree and `--tree` (another checkout, e.g. `git archive` of main) taking turns, and prints
traces/s, CPU ms per trace and the share of a core used, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def _one_round(bootstrap: str, traces: int) -> dict[str, float]:
    import bench.ingest as ingest
    from monitor.logs import configure_logging
    from tests.support.kafka_io import create_topics, produce

    configure_logging("console", "warning")
    topic = f"cpu-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, [topic], partitions=ingest.PARTITIONS)
    await create_topics(bootstrap, [f"{topic}.dlq"])
    payloads = [ingest._payload(n) for n in range(traces)]
    for start in range(0, traces, 5000):
        chunk = payloads[start : start + 5000]
        await produce(bootstrap, topic, chunk, keys=[str(i).encode() for i in range(len(chunk))])
    cpu, wall = time.process_time(), time.perf_counter()
    rate = await ingest.scoring_path(bootstrap, topic, traces)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"rate": rate, "cpu_ms": 1000 * cpu / traces, "share": cpu / wall}


def _run(tree: Path, bootstrap: str, traces: int) -> dict[str, float]:
    """One round in a fresh process importing `tree`'s `monitor` and `bench`."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), "--bootstrap", bootstrap,
         "--traces", str(traces)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # fmt: skip
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True, help="a running broker")
    parser.add_argument("--traces", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="another checkout to compare, taking turns")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one round of that tree
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(args.child))
        print(json.dumps(asyncio.run(_one_round(args.bootstrap, args.traces))))
        return
    trees = {"this tree": ROOT} | ({"--tree": args.tree.resolve()} if args.tree else {})
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_no in range(1, args.rounds + 1):
        for name, tree in trees.items():
            figures = _run(tree, args.bootstrap, args.traces)
            seen[name].append(figures)
            print(
                f"round {round_no} {name}: {figures['rate']:,.0f} traces/s, "
                f"{figures['cpu_ms']:.2f} ms CPU a trace, {figures['share']:.2f} of a core"
            )
    medians = {
        name: {key: statistics.median(f[key] for f in runs) for key in runs[0]}
        for name, runs in seen.items()
    }
    for name, m in medians.items():
        print(f"median {name}: {m['rate']:,.0f} traces/s, {m['cpu_ms']:.2f} ms CPU a trace")
    if args.tree:
        this, other = medians["this tree"], medians["--tree"]
        print(
            f"this tree / --tree: traces/s {this['rate'] / other['rate']:.2f}, "
            f"CPU a trace {this['cpu_ms'] / other['cpu_ms']:.2f}"
        )


if __name__ == "__main__":
    main()
