"""Memory of the file source on endless or oversized input: does it stay flat?

    python bench/file_source.py [--seconds 10]

Runs the real `rag-monitor run --source file:-` process twice and samples its resident memory
(VmRSS) every half second:

1. ``/dev/zero`` on stdin: one line that never ends (before lines were bounded, the process grew
   to 2.8 GB in 8 seconds);
2. a pipe fed as fast as the process reads it with 8 MB lines (each over the 1 MB
   ``kafka.max_message_bytes``, so each is dead-lettered ``too_large``), counting the bytes it
   took.

Printed per case: RSS once serving (after start-up), the highest and the last RSS, their
difference, and the input read. Flat memory means the growth stays near zero however much input
was read. Absolute figures vary between machines.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _start(stdin: int, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env.update(
        RAGMON_HTTP__HOST="127.0.0.1",
        RAGMON_HTTP__PORT=str(port),
        RAGMON_LOG__LEVEL="error",
        RAGMON_STORE__URL=f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "run", "--source", "file:-"],
        cwd=ROOT,
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the daemon did not start serving")


def _measure(process: subprocess.Popen[bytes], seconds: float) -> tuple[float, float, float]:
    time.sleep(1.0)
    first = _rss_mb(process.pid)
    highest = first
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.5)
        highest = max(highest, _rss_mb(process.pid))
    last = _rss_mb(process.pid)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    return first, highest, last


def endless_line(seconds: float, workdir: Path) -> tuple[float, float, float, str]:
    with open("/dev/zero", "rb") as zero:
        process, _ = _start(zero.fileno(), workdir)
    first, highest, last = _measure(process, seconds)
    return first, highest, last, "unbounded (/dev/zero)"


def oversized_lines(seconds: float, workdir: Path) -> tuple[float, float, float, str]:
    read_fd, write_fd = os.pipe()
    process, _ = _start(read_fd, workdir)
    os.close(read_fd)
    line = b"x" * (8 * 1024 * 1024) + b"\n"
    written = 0
    stop = threading.Event()

    def feed() -> None:
        nonlocal written
        try:
            while not stop.is_set():
                written += os.write(write_fd, line)
        except OSError:
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    first, highest, last = _measure(process, seconds)
    stop.set()
    os.close(write_fd)
    return first, highest, last, f"{written / 2**20:,.0f} MB in 8 MB lines"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring time per case")
    args = parser.parse_args()
    print(f"{'case':<20} {'RSS start':>10} {'RSS max':>9} {'RSS end':>9} {'growth':>8}  input")
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in (("endless line", endless_line), ("oversized lines", oversized_lines)):
            first, highest, last, read = case(args.seconds, Path(tmp))
            print(
                f"{name:<20} {first:>8.0f}MB {highest:>7.0f}MB {last:>7.0f}MB"
                f" {highest - first:>+6.0f}MB  {read} over {args.seconds:.0f}s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
