"""Running `rag-monitor` as a user runs it: the installed script, in a fresh process, with no
`RAGMON_` variable of the calling environment leaking in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RAG_MONITOR = Path(sys.executable).with_name("rag-monitor")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its `RAGMON_` variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGMON_")}
    env.update(extra)
    return env


def rag_monitor(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 180,
    store: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """`rag-monitor ARGS` with `env` as its only `RAGMON_` variables (and the store's URL, a
    SQLite file at `store` when given); output captured."""
    if store is not None:
        env["RAGMON_STORE__URL"] = f"sqlite+aiosqlite:///{store}"
    return subprocess.run(
        [str(RAG_MONITOR), *args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
