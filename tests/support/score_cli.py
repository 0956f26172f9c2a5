"""Running `rag-monitor score` as a user does: a subprocess of this interpreter."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_score(
    source: str | Path,
    output: Path,
    evaluator: str,
    env: Mapping[str, str],
    *flags: str,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``rag-monitor score --input SOURCE --output OUTPUT --evaluator EVALUATOR FLAGS...`` in the
    repository, with exactly `env` as its environment; its output captured as text."""
    command = [sys.executable, "-m", "monitor.cli", "score", "--input", str(source)]
    command += ["--output", str(output), "--evaluator", evaluator, *flags]
    return subprocess.run(
        command,
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
