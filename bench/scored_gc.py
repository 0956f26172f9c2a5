"""What the garbage collector costs the scored run, by generation.

    python bench/scored_gc.py [--input native|otlp] [--scored 12000] [--young 7000]
        [--middle 10] [--old 10]
    RAGMON_BENCH_TREE=DIR python bench/scored_gc.py     # another tree's `monitor` (a compiled one)

Starts the test broker, produces ``--scored`` RAG turns as native JSON (three a conversation,
as `bench/ingest.py` scores them), or with ``--input otlp`` as the OTLP protobuf exports
`bench/ingest.py` writes, read by a single replica, and runs the same scored measurement as
`bench/scored_profile.py` (default scoring stage, SQLite store, results topic, no judge) with
the collector's thresholds set first: ``--middle`` and ``--old`` as given, the youngest
generation's as the daemon sets it while consuming (`monitor.daemon`), ``--young`` here. From
the first message read to the last trace processed, `gc.callbacks` time every collection on
the thread that ran it (its CPU clock); the script prints the run's rate and CPU per trace, the
collector's µs a trace, and per generation the collections and their mean pause.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_tree = os.environ.get("RAGMON_BENCH_TREE")
sys.path[:0] = [str(Path(_tree).resolve())] if _tree else []
sys.path.insert(1 if _tree else 0, str(REPO))

from bench.ingest import Topics, _turns  # noqa: E402
from bench.scored_rate import scored  # noqa: E402
from monitor import daemon as daemon_module  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402


class Collections:
    """Count and CPU time of the collections of each generation, while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._started = time.thread_time()
            return
        generation = int(info["generation"])
        self.count[generation] += 1
        self.seconds[generation] += time.thread_time() - self._started


async def measure(
    bootstrap: str, count: int, collections: Collections, otlp: bool = False
) -> tuple[float, float]:
    """The run's traces/s (burst) and CPU per trace (ms)."""
    topics = Topics(bootstrap)
    await topics.create()
    settings = await topics.produce_scored(_turns(count), otlp)

    def attach() -> None:
        collections.on = True

    gc.callbacks.append(collections)
    try:
        run = await scored(settings, count, topics.results, on_first_read=attach)
    finally:
        collections.on = False
        gc.callbacks.remove(collections)
    return run.burst, run.cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scored", type=int, default=12_000, help="RAG turns scored")
    parser.add_argument("--input", choices=("native", "otlp"), default="native")
    parser.add_argument("--young", type=int, default=daemon_module.YOUNG_COLLECTION_THRESHOLD)
    parser.add_argument("--middle", type=int, default=gc.get_threshold()[1])
    parser.add_argument("--old", type=int, default=gc.get_threshold()[2])
    args = parser.parse_args()
    configure_logging("console", "error")
    daemon_module.YOUNG_COLLECTION_THRESHOLD = args.young
    gc.set_threshold(gc.get_threshold()[0], args.middle, args.old)
    from tests.support.kafka_broker import KafkaBroker

    collections = Collections()
    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        rate, cpu_ms = asyncio.run(
            measure(broker.bootstrap, args.scored, collections, otlp=args.input == "otlp")
        )
    per_trace = sum(collections.seconds) * 1e6 / args.scored
    print(
        f"thresholds {args.young} / {args.middle} / {args.old}: {rate:,.0f} traces/s, "
        f"{cpu_ms:.3f} ms of CPU a trace; the collector {per_trace:.1f} µs a trace "
        f"({per_trace / 10 / cpu_ms:.1f}%)"
    )
    for generation, (n, seconds) in enumerate(
        zip(collections.count, collections.seconds, strict=True)
    ):
        pause = seconds * 1e3 / n if n else 0.0
        print(f"  generation {generation}: {n} collections, {pause:.2f} ms each")


if __name__ == "__main__":
    main()
