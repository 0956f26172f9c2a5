"""How long does `rag-monitor` take to answer when it has nothing to do?

    python bench/cli_start.py [--runs 20] [--command PATH]

Runs each command line below `--runs` times, one after another, as a user runs them (the
installed `rag-monitor` script of this environment, a fresh process each time), and prints the
median, fastest and 90th-percentile wall time per command; then the modules of the heavy list
(`tests/test_cli_imports.py`) that `import monitor.cli` and parsing arguments load. The target
(issue 24): `--version` and a usage error under 300 ms on a quiet machine. A loaded machine
adds time to every line alike: compare lines of one run, and `python -c pass` (the
interpreter's own start) with the rest.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--version",),
    ("--help",),
    ("run", "--port", "9000"),  # a usage error
    ("review", "--worst", "0"),  # a usage error found by an argument type
    ("golden", "score", "--help"),
    ("check-config",),  # loads the settings: pydantic, not the domain
)


def wall_times(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append((time.perf_counter() - started) * 1000)
    return times


def heavy_modules_loaded(python: str) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.cli_imports import heavy_modules_after_parsing

    return heavy_modules_after_parsing(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per command (default 20)")
    parser.add_argument(
        "--command",
        default=str(Path(sys.executable).with_name("rag-monitor")),
        help="the rag-monitor script (default: the one beside this Python)",
    )
    args = parser.parse_args()
    rows = [("python -c pass", wall_times([sys.executable, "-c", "pass"], args.runs))]
    for command in COMMANDS:
        rows.append(
            ("rag-monitor " + " ".join(command), wall_times([args.command, *command], args.runs))
        )
    width = max(len(name) for name, _ in rows)
    print(f"{'command':<{width}}  median   min    p90   (ms, {args.runs} runs each)")
    for name, times in rows:
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{name:<{width}}  {statistics.median(times):6.0f} {min(times):6.0f} {p90:6.0f}")
    heavy = heavy_modules_loaded(sys.executable)
    print("heavy modules loaded by import monitor.cli + parsing:", ", ".join(heavy) or "none")


if __name__ == "__main__":
    main()
