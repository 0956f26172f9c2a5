"""A backlog of OTLP exports read by a freshly started daemon: what the assembler sheds.

    python bench/otlp_backlog.py [--turns 30000] [--topology single|topics] [--bootstrap H:P]

Writes ``--turns`` RAG turns as OTLP exports (``bench/ingest.py``'s: four spans a turn, 20 turns
an export) before the daemon starts, as a restart after an outage finds them, then runs the
daemon (scoring into a SQLite file, results topic on) until every turn is scored, and prints
the most traces it saw assembling at once, what the assembler shed by reason
(``ragmon_otlp_assembly_shed_total``), how long reading waited for room
(``ragmon_otlp_assembly_paused_seconds_total``) and the time taken. Starts the test broker
unless ``--bootstrap`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client import CollectorRegistry  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from bench import ingest  # noqa: E402
from bench.scored_rate import counter_total  # noqa: E402
from monitor import metrics_catalog as catalog  # noqa: E402
from monitor.daemon import Daemon, SourceSpec  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402
from tests.support.kafka_io import produce  # noqa: E402


async def run(bootstrap: str, turns: int, single: bool) -> None:
    topics = ingest.Topics(bootstrap)
    await topics.create()
    await produce(bootstrap, topics.otlp, ingest.otlp_exports(ingest._turns(turns)))
    settings = topics.settings([], otlp=True, single=single)
    with tempfile.TemporaryDirectory() as workdir:
        settings.store.url = SecretStr(f"sqlite+aiosqlite:///{Path(workdir) / 'results.db'}")
        settings.results.topic = topics.results
        registry = CollectorRegistry()
        daemon = Daemon(settings, SourceSpec("kafka"), registry=registry)
        task = asyncio.create_task(daemon.run())
        processed, otlp = daemon.metrics.traces_processed, daemon.otlp_metrics
        started, peak, scored = time.monotonic(), 0.0, 0.0
        while scored < turns:
            await asyncio.sleep(0.2)
            if task.done():
                task.result()
                raise RuntimeError("the daemon stopped before the last trace")
            pending = registry.get_sample_value("ragmon_otlp_assembly_traces", {"state": "pending"})
            peak = max(peak, pending or 0.0)
            scored = counter_total(processed, outcome="ok")
        took = time.monotonic() - started
        reasons = catalog.OTLP_ASSEMBLY_SHED.preset["reason"]
        shed = {reason: counter_total(otlp.shed, reason=reason) for reason in reasons}
        paused = counter_total(otlp.paused)
        daemon.request_stop()
        await task
    print(
        f"{'single replica' if single else 'internal topics'}: {turns:,} turns scored "
        f"{scored:,.0f} in {took:.0f} s; at most {peak:,.0f} traces assembling at once; "
        f"shed {', '.join(f'{k} {v:,.0f}' for k, v in shed.items())}; "
        f"reading paused {paused:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30_000)
    parser.add_argument("--topology", choices=("single", "topics"), default="single")
    parser.add_argument("--bootstrap", help="an existing broker; default: start the test broker")
    args = parser.parse_args()
    single = args.topology == "single"
    configure_logging("console", "warning")
    if args.bootstrap:
        asyncio.run(run(args.bootstrap, args.turns, single))
        return
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        asyncio.run(run(broker.bootstrap, args.turns, single))


if __name__ == "__main__":
    main()
