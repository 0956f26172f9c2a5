"""CPU per trace at a steady rate, by fetch setting: what a replica costs below its capacity.

    python bench/steady_cpu.py [--rates 1,10,50,300] [--seconds 60] [--rounds 1]
        [--setting NAME=RAGMON_KEY=VALUE[,RAGMON_KEY=VALUE...]]...

`bench/ingest.py` times a backlog, where every fetch is full; a service's traffic comes at a
steady rate, a few traces at a time. This runs `bench/soak.py`'s daemon (a subprocess, SQLite
store, results topic, no judge unless `--judge-rate`) on one test broker at each rate for each
setting, taking turns, and prints the daemon's CPU per trace processed (every thread,
/proc/PID/stat) as the median of the samples after the first: by default aiokafka's fetch
defaults (`fetch_min_bytes` 1: the broker answers each trace alone) against the daemon's
(`kafka.fetch_min_bytes` 64 KiB, `kafka.fetch_max_wait_ms` 500 ms). A setting may name another
checkout for the daemon's code, so trees take turns on the same broker:

    python bench/steady_cpu.py --rates 20 --judge-rate 1 --rounds 2 \
        --setting before=RAGMON_BENCH_TREE=/tmp/before --setting now=
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.soak import Row, soak

DEFAULT_SETTINGS = {
    "aiokafka's defaults (1 byte, 500 ms)": ["RAGMON_KAFKA__FETCH_MIN_BYTES=1"],
    "the daemon's (64 KiB, 500 ms)": [],
}


def _one(bootstrap: str, rate: float, env: list[str], args: argparse.Namespace) -> list[Row]:
    run = argparse.Namespace(
        seconds=args.seconds,
        rate=rate,
        interval=args.interval,
        warmup=0.0,
        judge_rate=args.judge_rate,
        idle_seconds=10.0,
        env=env,
    )
    rows: list[Row] = []
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = soak(run, bootstrap, rows)
    if code == 2:  # aborted (^C, SIGTERM, the daemon not ready): no figure to take
        sys.exit(output.getvalue())
    return rows


def main() -> None:
    # `kill` or `timeout` ends the run as ^C does: the daemon and the broker are stopped
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1,10,50,300", help="traces per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0, help="each run's length (60)")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds a sample (15)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--judge-rate", type=float, default=0.0, help="sampling.rate (0: no judge)")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=RAGMON_KEY=VALUE[,...]",
        help="a setting to time instead of the two defaults (repeatable)",
    )
    args = parser.parse_args()
    settings = DEFAULT_SETTINGS
    if args.setting:
        settings = {}
        for item in args.setting:
            name, _, env = item.partition("=")
            settings[name] = [e for e in env.split(",") if e]
    rates = [float(r) for r in args.rates.split(",")]
    from tests.support.kafka_broker import KafkaBroker

    cpu: dict[tuple[str, float], list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        for _ in range(args.rounds):
            for rate in rates:
                for name, env in settings.items():
                    rows = _one(broker.bootstrap, rate, env, args)
                    samples = [r.cpu_ms for r in rows[1:]]  # the first holds the start-up
                    cpu.setdefault((name, rate), []).extend(samples)
                    print(f"  {name}, {rate:g}/s: {', '.join(f'{s:.2f}' for s in samples)}")
    print(f"\nCPU per trace, ms (median of the samples; judge sampling {args.judge_rate:g})")
    print("| setting | " + " | ".join(f"{r:g} traces/s" for r in rates) + " |")
    print("|---|" + "---|" * len(rates))
    for name in settings:
        cells = [f"{statistics.median(cpu[name, r]):.2f}" for r in rates]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
