"""How long does `rag-monitor` take to answer when it has nothing to do?

    python bench/cli_start.py [--runs 20] [--tree DIR ...]

Runs each command line below `--runs` times, as a user runs them (a fresh process each time),
and prints the median, fastest and 90th-percentile wall time per command; then the modules of
the heavy list (`tests/support/cli_imports.py`) that `import monitor.cli` and parsing arguments
load. Without `--tree` the command is the installed `rag-monitor` script of this environment;
each `--tree DIR` runs `python -m monitor.cli` from that source tree instead (for example a
checkout of an older commit), the trees taking turns run by run so that they share the
machine's load. The target (issue 24): `--version` and a usage error under 300 ms on a quiet
machine. Compare lines of one run, and `python -c pass` (the interpreter's own start) with the
rest.
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


def wall_time(argv: list[str], cwd: str | None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - started) * 1000


def heavy_modules_loaded(python: str) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.cli_imports import heavy_modules_after_parsing

    return heavy_modules_after_parsing(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per command (default 20)")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        help="run `python -m monitor.cli` from this source tree (repeatable)",
    )
    args = parser.parse_args()
    script = str(Path(sys.executable).with_name("rag-monitor"))
    ways = [(f"{tree}: ", [sys.executable, "-m", "monitor.cli"], tree) for tree in args.tree]
    ways = ways or [("", [script], None)]
    times: dict[str, list[float]] = {"python -c pass": []}
    for _ in range(args.runs):
        times["python -c pass"].append(wall_time([sys.executable, "-c", "pass"], None))
        for command in COMMANDS:
            for label, argv, cwd in ways:
                name = f"{label}rag-monitor {' '.join(command)}"
                times.setdefault(name, []).append(wall_time([*argv, *command], cwd))
    width = max(len(name) for name in times)
    print(f"{'command':<{width}}  median   min    p90   (ms, {args.runs} runs each)")
    for name, values in times.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"{name:<{width}}  {statistics.median(values):6.0f} {min(values):6.0f} {p90:6.0f}")
    heavy = heavy_modules_loaded(sys.executable)
    print("heavy modules loaded by import monitor.cli + parsing:", ", ".join(heavy) or "none")


if __name__ == "__main__":
    main()
