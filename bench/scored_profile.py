"""Where the scored path's CPU goes, outside tier 0: py-spy on `bench/ingest.py`'s run.

    (py-spy comes with the dev extra: pip install -e ".[dev]")
    python bench/scored_profile.py [--input native|otlp] [--scored 6000] [--rate 200]
        [--out scored.raw] [--top 25]

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
the functions with the most inclusive time, in µs of CPU per trace. Samples of idle threads
are not taken (py-spy's default), so the shares are of CPU, not of wall time. The raw stacks
stay in ``--out`` for a flame graph (``flamegraph.pl``, speedscope).
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

from bench.ingest import Topics, _turns, as_native, otlp_exports  # noqa: E402
from bench.pyspy_raw import stacks as read_stacks  # noqa: E402
from bench.scored_rate import scored  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402
from tests.support.kafka_io import produce  # noqa: E402

TIER0 = "monitor/evaluators/"
# The parts of the path, each named by a frame its samples pass through (the first that
# matches wins; the order puts the inner parts first).
PARTS = (
    ("results topic: building and sending", "ResultsPublisher"),
    ("results topic: aiokafka's sender and connection", "aiokafka/producer"),
    ("store: SQLite in its thread", "_connection_worker_thread"),
    ("store: group commit on the loop", "monitor/sinks/store.py"),
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


def report(path: Path, ms_per_trace: float, top: int) -> None:
    stacks = read_stacks(path)
    total = sum(n for _, n in stacks)
    us = ms_per_trace * 1000 / total  # µs of CPU per trace that one sample stands for
    tier0 = sum(n for frames, n in stacks if any(TIER0 in f for f in frames))
    outside = [(frames, n) for frames, n in stacks if not any(TIER0 in f for f in frames)]
    print(
        f"{total:,} samples; tier 0 {tier0 / total:.1%} ({tier0 * us:.0f} µs a trace), "
        f"outside it {(total - tier0) * us:.0f} µs a trace:"
    )
    parts: Counter[str] = Counter()
    for frames, n in outside:
        joined = "\n".join(frames)
        name = next((name for name, mark in PARTS if mark in joined), "other")
        parts[name] += n
    for name, n in parts.most_common():
        print(f"  {n * us:7.1f} µs  {n / total:6.1%}  {name}")
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


async def measure(bootstrap: str, count: int, out: Path, rate: int, otlp: bool = False) -> float:
    topics = Topics(bootstrap)
    await topics.create()
    turns = _turns(count)
    if otlp:
        await produce(bootstrap, topics.otlp, otlp_exports(turns))
        settings = topics.settings([], otlp=True, single=True)
    else:
        natives = await as_native(turns)
        await produce(
            bootstrap, topics.scored_native, [v for _, v in natives], keys=[k for k, _ in natives]
        )
        settings = topics.settings([topics.scored_native])
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    profiler: list[subprocess.Popen[bytes]] = []

    def attach() -> None:
        command = [spy, "record", "-r", str(rate), "-f", "raw", "-o", str(out)]
        command += ["--pid", str(os.getpid()), "--threads", "--nonblocking"]
        profiler.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
        time.sleep(0.5)  # py-spy attaches; the loop waits, so no trace goes unsampled

    run = await scored(settings, count, topics.results, on_first_read=attach)
    profiler[0].send_signal(signal.SIGINT)  # py-spy writes what it recorded and exits
    profiler[0].wait()
    print(
        f"scored {'OTLP, single replica' if otlp else 'native'}: {run.burst:,.0f} traces/s, "
        f"{run.cpu_ms:.3f} ms of this process's CPU a trace"
    )
    return run.cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", choices=("native", "otlp"), default="native")
    parser.add_argument("--scored", type=int, default=6000, help="RAG turns scored")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, default=Path("scored.raw"))
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    configure_logging("console", "warning")
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        ms = asyncio.run(
            measure(
                broker.bootstrap, args.scored, args.out.resolve(), args.rate, args.input == "otlp"
            )
        )
    report(args.out, ms, args.top)


if __name__ == "__main__":
    main()
