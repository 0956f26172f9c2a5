"""Scored native throughput end to end, two source trees in one session: same broker, same
messages, the trees taking turns in fresh processes.

    python bench/ingest_trees.py --tree /tmp/start-tree --tree /tmp/main-tree [--rounds 4]
        [--traces 5000] [--results]

``bench/ingest.py --tree DIR`` runs its whole bench on another tree's ``monitor``, but it
imports today's module layout (``monitor.stages``, ``monitor.formats``, ...), which a tree from
before the pipeline-stages refactor does not have. This bench needs only what every tree has
had since before issue 26: ``monitor.daemon.Daemon`` and the daemon's two counters
(``bench/scored_rate.py``). It starts the test broker, writes the workload once, and for each
round runs one worker process per tree (the order alternating round by round), each importing
``monitor`` from its tree and ``bench``/``tests`` from this checkout, so both trees are driven
and timed by the same code on the same messages.

The workload is the one of ``bench/ingest.py --scoring`` at the issue's start (dbcdfd7), which
measured the issue's baseline of 327 traces/s: ``--traces`` native traces of 1.4 KB (three
contexts, conversations of three turns, ``tests.support.traces.native_trace``), 6 partitions,
the default scoring stage (tier 0 on every trace, SQLite store in a temporary file,
conversations tracked, no judge) and no results topic (``--results``: both trees publish to one,
as production does). Each worker's consumer group is new, so it reads the topic from the start.

Printed per run: traces/s burst (first message read to last trace processed) and sustained
(10% to 90% of the traces processed), the worker's CPU per trace over each span, and the load
average; then each tree's medians and the ratio of the other trees to the first, by median
and per round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 6
FIGURES = ("burst", "sustained", "cpu_ms", "sustained_cpu_ms")


def load_monitor(tree: Path) -> None:
    """Import `tree`'s ``monitor`` package, then put this checkout on the path for ``bench``
    and ``tests`` (a full tree's own would shadow them)."""
    sys.path.insert(0, str(tree))
    import monitor

    sys.path.remove(str(tree))
    sys.path.insert(0, str(REPO))
    # last, for the top-level modules beside `monitor`: a compiled build's shared runtime
    # (bench/compiled_tree.py); a full tree's own bench and tests stay behind this checkout's
    sys.path.append(str(tree))
    if not Path(monitor.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"monitor came from {monitor.__file__}, not {tree}")


def worker(tree: Path, bootstrap: str, topic: str, expected: int, results: str | None) -> None:
    load_monitor(tree)
    from bench.scored_rate import scored
    from monitor.logs import configure_logging
    from tests.support.traces import daemon_settings

    configure_logging("console", "warning")
    group = f"trees-{uuid.uuid4().hex[:6]}"
    settings = daemon_settings(bootstrap, [topic], group, f"{topic}.dlq", format="auto")
    run = asyncio.run(scored(settings, expected, results))
    print(json.dumps({name: getattr(run, name) for name in FIGURES}))


def run_worker(tree: Path, bootstrap: str, topic: str, expected: int, results: str | None) -> Any:
    command = [sys.executable, __file__, "--worker", str(tree), "--bootstrap", bootstrap]
    command += ["--topic", topic, "--traces", str(expected)]
    command += ["--results-topic", results] if results else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the worker of {tree} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


async def write_workload(bootstrap: str, topic: str, traces: int, results: str | None) -> None:
    sys.path.insert(0, str(REPO))
    from bench.ingest import _payload
    from tests.support.kafka_io import create_topics, produce

    await create_topics(bootstrap, [topic, *([results] if results else [])], PARTITIONS)
    await create_topics(bootstrap, [f"{topic}.dlq"])
    for start in range(0, traces, 5000):  # as dbcdfd7's bench wrote them
        chunk = [_payload(n) for n in range(start, min(start + 5000, traces))]
        await produce(bootstrap, topic, chunk, keys=[str(i).encode() for i in range(len(chunk))])


def compare(bootstrap: str, trees: list[Path], traces: int, rounds: int, results: bool) -> None:
    topic = f"trees-{uuid.uuid4().hex[:8]}"
    results_topic = f"{topic}.results" if results else None
    asyncio.run(write_workload(bootstrap, topic, traces, results_topic))
    print(
        f"{traces:,} native traces, {PARTITIONS} partitions, results topic "
        f"{'on' if results else 'off'}; trees: " + ", ".join(str(t) for t in trees),
        flush=True,
    )
    figures: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for round_no in range(1, rounds + 1):
        order = trees if round_no % 2 else trees[::-1]
        for tree in order:
            run = run_worker(tree, bootstrap, topic, traces, results_topic)
            figures[tree].append(run)
            print(
                f"round {round_no}, {tree.name}: {run['burst']:,.0f} traces/s burst, "
                f"{run['sustained']:,.0f} sustained; CPU {run['cpu_ms']:.2f} ms a trace "
                f"({run['sustained_cpu_ms']:.2f} in 10-90%); load average "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print(f"\nmedian of {rounds} rounds [range]:")
    for tree, runs in figures.items():
        line = ", ".join(
            f"{name} {statistics.median(r[name] for r in runs):,.2f} "
            f"[{min(r[name] for r in runs):,.2f}-{max(r[name] for r in runs):,.2f}]"
            for name in FIGURES
        )
        print(f"  {tree.name}: {line}")
    base = trees[0]
    for tree in trees[1:]:
        for name in FIGURES:
            ours = [r[name] for r in figures[tree]]
            theirs = [r[name] for r in figures[base]]
            per_round = ", ".join(f"{o / t:.2f}" for o, t in zip(ours, theirs, strict=True))
            ratio = statistics.median(ours) / statistics.median(theirs)
            print(f"  {tree.name} / {base.name}, {name}: {ratio:.2f} (per round {per_round})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", default=[], help="a source tree")
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    parser.add_argument("--traces", type=int, default=5000, help="native traces scored")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--results", action="store_true", help="publish to a results topic")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--results-topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker.resolve(), args.bootstrap, args.topic, args.traces, args.results_topic)
        return
    trees = [tree.resolve() for tree in args.tree]
    if len(trees) < 2:
        parser.error("give two trees or more (--tree DIR --tree DIR)")
    if args.bootstrap:
        compare(args.bootstrap, trees, args.traces, args.rounds, args.results)
        return
    sys.path.insert(0, str(REPO))
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        compare(broker.bootstrap, trees, args.traces, args.rounds, args.results)


if __name__ == "__main__":
    main()
