"""The real `rag-monitor` process: file replay, HTTP endpoints, SIGTERM with offsets committed."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.exposition import OPENMETRICS, catalog_problems
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import committed_offsets, create_topics, produce
from tests.support.traces import encode, native_trace, wait_for

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env.update({"RAGMON_LOG__FORMAT": "json", "RAGMON_HTTP__HOST": "127.0.0.1"}, **extra)
    return env


def _get(url: str, accept: str = "*/*") -> tuple[int, str]:
    try:
        request = urllib.request.Request(url, headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_file_source_replays_the_bundled_example_and_dead_letters_the_bad_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--source", "file:examples/traces.jsonl"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(RAGMON_HTTP__PORT=str(_free_port())),
    )
    assert result.returncode == 0, result.stderr
    letters = [
        json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"dead_letter"')
    ]
    assert len(letters) == 1
    assert letters[0]["line"] == 7 and letters[0]["reason"] == "schema_violation"
    assert "answer" in letters[0]["error"], "the error names the missing field"


@pytest.mark.slow
def test_file_source_reads_stdin_and_stores_a_result_per_trace(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps(native_trace(i)) for i in range(5)) + "\n"
    database = tmp_path / "results.db"
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--source", "file:-"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(
            RAGMON_HTTP__PORT=str(_free_port()),
            RAGMON_STORE__URL=f"sqlite+aiosqlite:///{database}",
        ),
    )
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(database) as db:
        stored = sorted(row[0] for row in db.execute("SELECT trace_id FROM evaluation_results"))
    assert stored == [f"trace-{i:06d}" for i in range(5)]


@pytest.mark.kafka
def test_sigterm_drains_commits_and_exits_zero(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    import asyncio

    topic, group = f"{topic_prefix}.in", f"{topic_prefix}.group"
    asyncio.run(
        create_topics(
            kafka_broker.bootstrap, [topic, f"{topic_prefix}.dlq", f"{topic_prefix}.results"]
        )
    )
    asyncio.run(
        produce(kafka_broker.bootstrap, topic, [encode(native_trace(i)) for i in range(50)])
    )
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "run"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(
            RAGMON_HTTP__PORT=str(port),
            RAGMON_KAFKA__BOOTSTRAP_SERVERS=kafka_broker.bootstrap,
            RAGMON_KAFKA__TOPICS=json.dumps([topic]),
            RAGMON_KAFKA__GROUP_ID=group,
            RAGMON_KAFKA__DLQ_TOPIC=f"{topic_prefix}.dlq",
            RAGMON_RESULTS__TOPIC=f"{topic_prefix}.results",
            RAGMON_STORE__URL=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
            RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS="60",  # only the shutdown commit counts
            RAGMON_SHUTDOWN__DEADLINE_SECONDS="10",
        ),
    )
    try:
        asyncio.run(wait_for(lambda: _ready(port), 60, "/readyz to report ready"))
        asyncio.run(wait_for(lambda: _processed(port) >= 50, 60, "all 50 traces processed"))
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        assert status == 200, body
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert 'ragmon_messages_consumed_total{topic="' + topic + '"} 50.0' in body
        assert "ragmon_build_info{" in body
        status, body = _get(f"http://127.0.0.1:{port}/metrics", accept=OPENMETRICS)
        assert catalog_problems(body) == [], "the daemon exports only catalog metrics"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 0, stderr
    assert elapsed < 10, f"shutdown took {elapsed:.1f}s"
    offsets = asyncio.run(committed_offsets(kafka_broker.bootstrap, group))
    assert offsets[(topic, 0)] == 50, "the shutdown commit covers everything processed"


def _ready(port: int) -> bool:
    try:
        return _get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    except OSError:
        return False


def _processed(port: int) -> float:
    _, body = _get(f"http://127.0.0.1:{port}/metrics")
    total = 0.0
    for line in body.splitlines():
        if line.startswith("ragmon_traces_processed_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.kafka
def test_a_missing_output_topic_stops_start_up_with_its_name(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    import asyncio

    asyncio.run(
        create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in", f"{topic_prefix}.dlq"])
    )
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        env=_env(
            RAGMON_HTTP__PORT=str(_free_port()),
            RAGMON_KAFKA__BOOTSTRAP_SERVERS=kafka_broker.bootstrap,
            RAGMON_KAFKA__TOPICS=json.dumps([f"{topic_prefix}.in"]),
            RAGMON_KAFKA__DLQ_TOPIC=f"{topic_prefix}.dlq",
            RAGMON_RESULTS__TOPIC=f"{topic_prefix}.missing",
            RAGMON_STORE__URL=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        ),
    )
    assert result.returncode == 3
    assert f"{topic_prefix}.missing" in result.stderr and "results.topic" in result.stderr
