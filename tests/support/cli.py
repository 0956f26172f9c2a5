"""`rag-monitor` as a user runs it: a subprocess from the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def rag_monitor(
    *argv: str, store: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``rag-monitor ARGV``; no ``RAGMON_`` variable of the test's environment reaches it
    but the store's URL, a SQLite file at `store` when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    if store is not None:
        env["RAGMON_STORE__URL"] = f"sqlite+aiosqlite:///{store}"
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
