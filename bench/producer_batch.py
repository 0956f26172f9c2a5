"""What the producers' batch size does to the native scored run.

    python bench/producer_batch.py [--sizes 16384,262144,1048576] [--rounds 3] [--scored 9000]

Starts the test broker, and per round and batch size (taking turns, so the machine's load
falls on each alike) produces ``--scored`` RAG turns as native JSON (three a conversation, as
`bench/ingest.py` scores them) and runs the scored measurement of `bench/ingest.py` (default
scoring stage, SQLite store, results topic, no judge) with every producer of the daemon built
with that `max_batch_size` (`monitor.sinks.produce.producer_limits`; 16,384 is aiokafka's
default). Prints each run, then per size the median rate and CPU per trace and their ratios to
the first size's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import Topics, _turns  # noqa: E402
from bench.scored_rate import scored  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402
from monitor.sinks import produce as produce_module  # noqa: E402
from monitor.sinks import writer as writer_module  # noqa: E402

_limits = produce_module.producer_limits


def batching(size: int) -> None:
    """Every producer built from now on batches at most `size` bytes a partition."""

    def limits(max_message_bytes: int) -> dict[str, Any]:
        return {**_limits(max_message_bytes), "max_batch_size": size}

    produce_module.producer_limits = limits
    writer_module.producer_limits = limits


async def run_once(bootstrap: str, count: int) -> tuple[float, float]:
    """The run's traces/s (burst) and CPU per trace (ms)."""
    topics = Topics(bootstrap)
    await topics.create()
    await topics.produce_native(_turns(count))
    run = await scored(topics.settings([topics.scored_native]), count, topics.results)
    return run.burst, run.cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="16384,262144,1048576", help="batch sizes, bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scored", type=int, default=9_000, help="RAG turns per run")
    args = parser.parse_args()
    configure_logging("console", "error")
    sizes = [int(s) for s in args.sizes.split(",")]
    runs: dict[int, list[tuple[float, float]]] = {size: [] for size in sizes}
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        for round_number in range(1, args.rounds + 1):
            for size in sizes:
                batching(size)
                rate, cpu_ms = asyncio.run(run_once(broker.bootstrap, args.scored))
                runs[size].append((rate, cpu_ms))
                print(f"round {round_number}, batch {size:,}: {rate:,.0f}/s, {cpu_ms:.3f} ms")
    base_rate = statistics.median(r for r, _ in runs[sizes[0]])
    base_cpu = statistics.median(c for _, c in runs[sizes[0]])
    for size, measured in runs.items():
        rate = statistics.median(r for r, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        print(
            f"batch {size:>9,}: median {rate:,.0f} traces/s ({rate / base_rate:.2f}x), "
            f"{cpu:.3f} ms of CPU a trace ({cpu / base_cpu:.2f}x)"
        )


if __name__ == "__main__":
    main()
