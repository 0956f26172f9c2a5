"""CPU of the OTLP stages per trace, in process and without Kafka or scoring: the re-key stage
splitting exports, the assemble stage assembling and mapping the traces.

    python bench/otlp_stage.py [--traces 3000] [--rounds 3] [--tree DIR ...] [--steps]

Two paths, each in a fresh process per round (``time.process_time`` per trace):

- ``single``: as a single replica runs them (`kafka.single_replica`): the re-key stage hands
  its parts straight to the assemble stage.
- ``topics``: as the two consumer groups run them, minus the broker: the parts the re-key stage
  would produce to the spans topic (with the headers it writes) read back by the assemble stage.

The RAG turns are ``bench/ingest.py``'s (four spans a turn, 20 turns an OTLP protobuf export).
Each ``--tree DIR`` (a source tree holding another ``monitor``) is timed too, the trees taking
turns round by round, so that they share the machine's load; compare the ratios.

``--steps`` times each step alone with the garbage collector off, the best of several passes:
``split`` (exports into per-trace parts), ``assemble`` (the assembler taking the parts and
releasing the complete traces), ``decode`` (a part into span records), ``map`` (span records
onto a `Trace`) and ``stamp`` (the rest of a release's mapping: merging its parts, the digest
of what it maps to, the assembly stamp). To see where the time goes::

    py-spy record -r 250 -f raw -o otlp.raw -- python bench/otlp_stage.py --worker single
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PATHS = ("single", "topics")
STEPS = ("split", "assemble", "decode", "map", "stamp")
STEP_REPEATS = 5  # each step's timing in a worker: the best of these passes


def worker(path: str, traces: int) -> dict[str, Any]:
    """One path in this process; imports `monitor` from the tree first on the path."""
    sys.path.insert(1, str(REPO))
    from prometheus_client import CollectorRegistry

    from bench.ingest import _turns, otlp_exports
    from monitor.logs import configure_logging
    from monitor.messages import RawMessage, Routed
    from monitor.metrics import Metrics
    from monitor.sources.offsets import OffsetTracker
    from monitor.stages.assemble import AssembleStage, OtlpMetrics
    from monitor.stages.reject import Rejecter
    from monitor.stages.rekey import InProcess, RekeyStage, SpansTopicOutput
    from tests.support.recorder import LetterRecorder
    from tests.support.traces import daemon_settings

    configure_logging("console", "warning")
    exports = otlp_exports(_turns(traces))
    settings = daemon_settings("localhost:1", ["t"], "g", "dlq", otlp_assembly_settle_seconds=0)
    metrics = Metrics(CollectorRegistry())
    tracker = OffsetTracker()
    rejecter = Rejecter(LetterRecorder(), metrics, tracker, max_bytes=1 << 20)

    class Released:
        def __init__(self) -> None:
            self.count = 0

        async def take_assembled(self, items: Any) -> None:
            self.count += len(items)

    class SpansTopic:  # what SpansTopicOutput would produce, kept as spans-topic messages
        def __init__(self) -> None:
            self.messages: list[RawMessage] = []

        async def send_all(self, records: Any) -> list[Any]:
            for record in records:
                offset = len(self.messages)
                self.messages.append(
                    RawMessage("spans", 0, offset, record.key, record.value, tuple(record.headers))
                )
            return []

    released = Released()
    assemble = AssembleStage(
        kafka=settings.kafka,
        metrics=metrics,
        otlp_metrics=OtlpMetrics(metrics.registry),
        rejecter=rejecter,
        tracker=tracker,
        output=released,
    )
    spans = SpansTopic()
    output = (
        InProcess(assemble.take_parts)
        if path == "single"
        else SpansTopicOutput(spans, "spans", "traces", rejecter, tracker)  # type: ignore[arg-type]
    )
    rekey = RekeyStage(output, rejecter, tracker, metrics)
    inputs = [RawMessage("otlp", 0, i, None, value) for i, value in enumerate(exports)]

    async def run() -> None:
        for msg in inputs:
            tracker.begin(msg.tp, msg.offset)
        for i in range(0, len(inputs), 25):
            await rekey.handle_batch([Routed(m, "otlp_proto") for m in inputs[i : i + 25]])
            await assemble.tick()
        for msg in spans.messages:
            tracker.begin(msg.tp, msg.offset)
        for i in range(0, len(spans.messages), 500):
            batch = spans.messages[i : i + 500]
            await assemble.handle_batch([Routed(m, "otlp_proto", internal=True) for m in batch])
            await assemble.tick()
        await assemble.flush()

    started = time.process_time()
    asyncio.run(run())
    cpu = time.process_time() - started
    assert released.count == traces, released.count
    return {"us_per_trace": cpu * 1e6 / traces}


def steps_worker(traces: int) -> dict[str, float]:
    """µs per trace of each step (`STEPS`) in this process, the best of `STEP_REPEATS` passes."""
    import gc

    sys.path.insert(1, str(REPO))
    from bench.ingest import _turns, otlp_exports
    from monitor.formats.assembly import TraceAssembler
    from monitor.formats.otlp import decode_otlp, spans_to_trace
    from monitor.formats.otlp_release import map_release
    from monitor.formats.otlp_split import split_by_trace

    exports = otlp_exports(_turns(traces))
    gc.collect()
    gc.freeze()
    gc.disable()

    def best(work: Any) -> tuple[float, Any]:
        fastest, result = float("inf"), None
        for _ in range(STEP_REPEATS):
            started = time.process_time()
            result = work()
            fastest = min(fastest, time.process_time() - started)
        return fastest * 1e6 / traces, result

    split, splits = best(lambda: [split_by_trace(e, "otlp_proto") for e in exports])

    def assemble() -> list[Any]:  # each export's parts added, then what is complete released
        assembler: TraceAssembler[int] = TraceAssembler(
            max_seconds=30, grace_seconds=30, max_traces=traces, max_bytes=1 << 40
        )
        releases = []
        for n, done in enumerate(splits):
            for part in done.parts:
                assembler.add(part.trace_id, part.data, part.shapes, n, 1.0, None)
            releases += assembler.pop_ready(1.0)
        return releases

    assembled, releases = best(assemble)
    parts = [part.data for done in splits for part in done.parts]
    decode, _ = best(lambda: [decode_otlp(p, "otlp_proto") for p in parts])
    both, traced = best(lambda: [spans_to_trace(decode_otlp(p, "otlp_proto")) for p in parts])
    assert len(traced) == traces and all(t is not None for t in traced)
    # a release's mapping also merges its parts, hashes what it maps to and stamps the trace
    whole, mapped = best(lambda: [map_release(r, False) for r in releases])
    assert len(mapped) == traces and all(m is not None for m in mapped)
    return {
        "split": split,
        "assemble": assembled,
        "decode": decode,
        "map": both - decode,
        "stamp": whole - both,
    }


def steps(trees: list[Path], traces: int, rounds: int) -> None:
    found: dict[Path, list[dict[str, float]]] = {}
    for _ in range(rounds):
        for tree in trees:
            done = subprocess.run(
                [sys.executable, __file__, "--worker", "steps", "--traces", str(traces)],
                env={**os.environ, "RAGMON_BENCH_TREE": str(tree)},
                capture_output=True,
                text=True,
                check=True,
            )
            found.setdefault(tree, []).append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"CPU per trace of each OTLP step (µs), {traces:,} traces, the minimum of {rounds} "
        "processes, garbage collector off"
    )
    least = {
        tree: {step: min(r[step] for r in runs) for step in STEPS} for tree, runs in found.items()
    }
    for tree, figures in least.items():
        cells = "  ".join(f"{step} {figures[step]:6.1f}" for step in STEPS)
        print(f"  {str(tree)[-40:]:<40} {cells}  total {sum(figures.values()):6.1f}")
    for tree in trees[:-1]:
        ratio = sum(least[REPO].values()) / sum(least[tree].values())
        print(f"  total, this tree / {tree.name}: {ratio:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--steps", action="store_true", help="time each step alone")
    parser.add_argument(
        "--worker", choices=(*PATHS, "steps"), help="run one path here (for a profiler)"
    )
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, os.environ.get("RAGMON_BENCH_TREE") or str(REPO))
        if args.worker == "steps":
            print(json.dumps(steps_worker(args.traces)))
        else:
            print(json.dumps(worker(args.worker, args.traces)))
        return 0
    trees = [*(tree.resolve() for tree in args.tree), REPO]
    if args.steps:
        steps(trees, args.traces, args.rounds)
        return 0
    found: dict[tuple[Path, str], list[float]] = {}
    for _ in range(args.rounds):
        for path in PATHS:
            for tree in trees:
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", path, "--traces", str(args.traces)],
                    env={**os.environ, "RAGMON_BENCH_TREE": str(tree)},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                value = json.loads(done.stdout.strip().splitlines()[-1])["us_per_trace"]
                found.setdefault((tree, path), []).append(value)
    print(f"CPU per trace through the OTLP stages (µs), {args.traces:,} traces, median [range]")
    for (tree, path), values in found.items():
        print(
            f"  {str(tree)[-40:]:<40} {path:<7} {statistics.median(values):7.0f} "
            f"[{min(values):.0f}-{max(values):.0f}]"
        )
    for tree in trees[:-1]:
        for path in PATHS:
            ratio = statistics.median(found[(REPO, path)]) / statistics.median(found[(tree, path)])
            print(f"  {path}: CPU per trace, this tree / {tree.name}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
