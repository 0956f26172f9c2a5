"""Where the scored path's CPU goes, outside tier 0: py-spy on `bench/ingest.py`'s run.

    (py-spy comes with the dev extra: pip install -e ".[dev]")
    python bench/scored_profile.py [--input native|otlp] [--scored 6000] [--rate 200]
        [--out scored.raw] [--top 25] [--all-threads]

Starts the test broker, produces ``--scored`` RAG turns (three a conversation, as
`bench/ingest.py` scores them) as native JSON, or with ``--input otlp`` as the OTLP protobuf
exports `bench/ingest.py` writes (20 turns an export) read by a single replica
(`kafka.single_replica`: split, assembled and scored in process), and runs the same scored
measurement (default scoring stage, SQLite store, results topic, no judge) with py-spy
attached to this process from the first message read to the last trace processed
(``--nonblocking``: the daemon is not paused to be sampled). Both inputs score the same
content, so the two reports side by side say what the OTLP stages add to a trace. It prints
the process's CPU per trace and shares it out by the samples:
tier 0 (any frame in ``monitor/evaluators/``), then, outside it, the parts of the path and
the functions with the most inclusive time, in µs of CPU per trace. The raw stacks stay in
``--out`` for a flame graph (``flamegraph.pl``, speedscope).

By default only the thread holding the GIL is sampled (py-spy's ``--gil``), and SQLite's worker
threads are timed by their own CPU clocks instead (one row; their samples are left out): the
loop thread's samples share out the rest of the process's CPU. (py-spy does not always keep its
rate on a loaded machine, so a sample is not taken as a fixed 1/``--rate`` s.) Sampling every
thread py-spy sees running (``--all-threads``, the earlier default) counted a thread waiting to
take the GIL back as busy: 155 µs a trace for SQLite's thread, whose own CPU clock said 80-90
(`bench/scored_loop.py`), and 81 for the loop's ``select``, whose CPU was 10-15.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import Topics, _turns  # noqa: E402
from bench.pyspy_raw import stacks as read_stacks  # noqa: E402
from bench.scored_loop import SqliteThreads  # noqa: E402
from bench.scored_rate import scored  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402

TIER0 = "monitor/evaluators/"
SQLITE = "_connection_worker_thread"  # aiosqlite's thread
# The parts of the path, each named by a frame its samples pass through (the first that
# matches wins; the order puts the inner parts first).
PARTS = (
    ("results topic: building and sending", "ResultsPublisher"),
    ("results topic: aiokafka's sender and connection", "aiokafka/producer"),
    ("store: SQLite in its thread", SQLITE),
    ("store: group commit on the loop", "monitor/sinks/store.py"),
    # SQLAlchemy runs a statement in a greenlet, whose samples do not show the store's frames
    ("store: group commit on the loop", "sqlalchemy/"),
    ("store: group commit on the loop", "aiosqlite/"),
    ("metrics of a result", "ScoringMetrics.record"),
    ("OTLP: splitting exports", "monitor/formats/otlp_split.py"),
    ("OTLP: decoding a release's spans", "decode_otlp"),
    ("OTLP: mapping spans to a trace", "monitor/formats/otlp_mapping.py"),
    ("OTLP: a release, the rest (digest, stamp)", "monitor/formats/otlp_release.py"),
    ("OTLP: the assembler", "monitor/formats/assembly.py"),
    ("conversation: numbering, step, commit", "monitor/stages/conversation"),
    ("conversation: state read per batch", "monitor/sinks/conversations.py"),
    ("decoding and validation", "monitor/stages/offloaded.py"),
    ("consume loop and fetcher", "monitor/stages/loop.py"),
    ("aiokafka's consumer", "aiokafka/consumer"),
    ("scoring stage, the rest", "monitor/stages/scoring.py"),
    ("score stage, the rest", "monitor/stages/score.py"),
    ("OTLP: assemble stage, the rest", "monitor/stages/assemble.py"),
    ("OTLP: re-key stage, the rest", "monitor/stages/rekey.py"),
    ("the event loop's select", "select (selectors.py"),
    ("this bench waiting for the counters", "bench/scored_rate.py"),
    ("daemon start-up (gc.freeze)", "_freeze_startup_heap"),
)


def _short(frame: str) -> str:
    """`function (file)` with the file relative to its package."""
    match = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if match is None:
        return frame
    function, file = match.groups()
    file = re.sub(r".*/site-packages/", "", file)
    file = re.sub(r".*/(monitor|bench|lib/python3\.\d+)/", r"\1/", file)
    return f"{function} ({file})"


def report(path: Path, ms_per_trace: float, top: int, sqlite_us: float | None) -> None:
    """Share the CPU per trace out by the samples; with `sqlite_us` (SQLite's threads' own CPU
    per trace), that is a row of its own and the other threads' samples share the rest."""
    stacks = read_stacks(path)
    if sqlite_us is not None:
        stacks = [(frames, n) for frames, n in stacks if not any(SQLITE in f for f in frames)]
    total = sum(n for _, n in stacks)
    # µs of CPU per trace that one sample stands for
    us = (ms_per_trace * 1000 - (sqlite_us or 0.0)) / total
    tier0 = sum(n for frames, n in stacks if any(TIER0 in f for f in frames))
    outside = [(frames, n) for frames, n in stacks if not any(TIER0 in f for f in frames)]
    print(
        f"{total:,} samples; tier 0 {tier0 * us / ms_per_trace / 1000:.1%} ({tier0 * us:.0f} "
        f"µs a trace), outside it {ms_per_trace * 1000 - tier0 * us:.0f} µs a trace:"
    )
    if sqlite_us is not None:
        print(
            f"  {sqlite_us:7.1f} µs  {sqlite_us / ms_per_trace / 1000:6.1%}  store: SQLite's "
            "worker threads (their CPU clocks)"
        )
    parts: Counter[str] = Counter()
    for frames, n in outside:
        joined = "\n".join(frames)
        name = next((name for name, mark in PARTS if mark in joined), "other")
        parts[name] += n
    for name, n in parts.most_common():
        print(f"  {n * us:7.1f} µs  {n * us / ms_per_trace / 1000:6.1%}  {name}")
    inclusive: Counter[str] = Counter()
    for frames, n in outside:
        for key in {_short(f) for f in frames[1:]}:  # frames[0] is the thread
            inclusive[key] += n
    print(f"the {top} functions with the most inclusive CPU outside tier 0, µs a trace:")
    shown = 0
    for key, n in inclusive.most_common():
        if key.split(" (")[0] in {"<module>", "main", "run", "Runner.run"} or "base_events" in key:
            continue  # the event loop and this script: every sample of the loop's thread
        print(f"  {n * us:7.1f}  {key}")
        shown += 1
        if shown == top:
            break


async def measure(
    bootstrap: str, count: int, out: Path, rate: int, gil: bool, otlp: bool = False
) -> tuple[float, float]:
    """The run's CPU per trace (ms) and its SQLite threads' (µs)."""
    topics = Topics(bootstrap)
    await topics.create()
    settings = await topics.produce_scored(_turns(count), otlp)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    profiler: list[subprocess.Popen[bytes]] = []
    sqlite = SqliteThreads()

    def attach() -> None:
        sqlite.start()
        command = [spy, "record", "-r", str(rate), "-f", "raw", "-o", str(out)]
        command += ["--pid", str(os.getpid()), "--threads", "--nonblocking"]
        command += ["--gil"] if gil else []
        profiler.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
        time.sleep(0.5)  # py-spy attaches; the loop waits, so no trace goes unsampled

    run = await scored(settings, count, topics.results, on_first_read=attach)
    profiler[0].send_signal(signal.SIGINT)  # py-spy writes what it recorded and exits
    profiler[0].wait()
    print(
        f"scored {'OTLP, single replica' if otlp else 'native'}: {run.burst:,.0f} traces/s, "
        f"{run.cpu_ms:.3f} ms of this process's CPU a trace"
    )
    return run.cpu_ms, sqlite.seconds * 1e6 / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", choices=("native", "otlp"), default="native")
    parser.add_argument("--scored", type=int, default=6000, help="RAG turns scored")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, default=Path("scored.raw"))
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--all-threads", action="store_true", help="sample every running thread, not the GIL's"
    )
    args = parser.parse_args()
    configure_logging("console", "warning")
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        ms, sqlite_us = asyncio.run(
            measure(
                broker.bootstrap,
                args.scored,
                args.out.resolve(),
                args.rate,
                gil=not args.all_threads,
                otlp=args.input == "otlp",
            )
        )
    print(f"SQLite's worker threads: {sqlite_us:.1f} µs of CPU a trace (their clocks)")
    report(args.out, ms, args.top, None if args.all_threads else sqlite_us)


if __name__ == "__main__":
    main()
