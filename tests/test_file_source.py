"""The file source (`run --source file:PATH|file:-`) and `score` on bad input: bounded lines, live
stdin, SIGTERM while idle, binary files, one-line errors, and the summary a replay ends with."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from monitor.sources.file import LineSplitter, split_lines
from tests.support.traces import native_trace

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env.update(
        {
            "RAGMON_LOG__FORMAT": "json",
            "RAGMON_HTTP__HOST": "127.0.0.1",
            "RAGMON_HTTP__PORT": str(_free_port()),
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        }
    )
    env.update(extra)
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "monitor.cli", *args]


def _dead_letters(stderr: str) -> list[dict[str, object]]:
    return [json.loads(x) for x in stderr.splitlines() if x.startswith('{"dead_letter"')]


def _processed(port: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("ragmon_traces_processed_total{")
    )


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ------------------------------------------------------------------------- the line splitter


def test_lines_are_cut_at_newlines_with_crlf_and_a_last_line_without_newline() -> None:
    splitter = LineSplitter(max_line_bytes=100)
    lines = splitter.feed(b'{"a": 1}\r\n{"b"') + splitter.feed(b": 2}\n\nlast") + splitter.end()
    assert [(x.value, x.size) for x in lines] == [
        (b'{"a": 1}', 8),
        (b'{"b": 2}', 8),
        (b"", 0),
        (b"last", 4),
    ]


def test_a_line_over_the_limit_keeps_only_its_start_and_its_real_size() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    lines = []
    for _ in range(1000):  # one 1 MB line in 1 kB chunks
        lines += splitter.feed(b"x" * 1000)
    lines += splitter.feed(b"\nnext\n")
    assert [(len(x.value), x.size) for x in lines] == [(11, 1_000_000), (4, 4)]


def test_split_lines_reads_a_stream_with_the_same_bound() -> None:
    data = b"a" * 50 + b"\n" + b"b" * 5 + b"\n"
    lines = list(split_lines(io.BytesIO(data), max_line_bytes=20))
    assert [(len(x.value), x.size) for x in lines] == [(21, 50), (5, 5)]


# ----------------------------------------------------------------------- the real process


@pytest.mark.slow
def test_endless_input_keeps_memory_flat_and_sigterm_stops_it(tmp_path: Path) -> None:
    """`run --source file:- < /dev/zero`: one endless line. Before lines were bounded the
    process grew by hundreds of MB a second; now it holds at most one line's limit."""
    env = _env(tmp_path, RAGMON_SHUTDOWN__DEADLINE_SECONDS="5")
    port = env["RAGMON_HTTP__PORT"]
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.Popen(
            _cli("run", "--source", "file:-"),
            stdin=zero,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                _processed(port)
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(1)
        first = _rss_kib(proc.pid)
        time.sleep(4)  # about 10 GB of zeros offered meanwhile
        second = _rss_kib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0
    assert second - first < 20 * 1024, f"RSS grew from {first} to {second} KiB"


@pytest.mark.slow
def test_stdin_is_processed_line_by_line_as_it_arrives_and_sigterm_stops_it_while_idle(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, RAGMON_SHUTDOWN__DEADLINE_SECONDS="5")
    proc = subprocess.Popen(
        _cli("run", "--source", "file:-"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(native_trace(1)) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        processed = 0.0
        while time.monotonic() < deadline and processed < 1:
            time.sleep(0.3)
            try:
                processed = _processed(env["RAGMON_HTTP__PORT"])
            except OSError:
                continue
        assert processed == 1, "a line is scored while the pipe is still open"
        time.sleep(1.5)  # stdin idle: nothing more comes
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
        took = time.monotonic() - started
        stdout = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0
    assert took < 5, f"SIGTERM on idle stdin took {took:.1f}s"
    assert "replayed 1 lines of stdin: 1 traces scored" in stdout


@pytest.mark.slow
def test_a_binary_file_is_invalid_utf8_and_a_huge_line_is_reported_truncated(
    tmp_path: Path,
) -> None:
    source = tmp_path / "mixed.jsonl"
    huge = json.dumps({**native_trace(2), "answer": "x" * 3_000_000})
    source.write_bytes(
        b"\xff\xfe\x00binary \x89PNG\r\n"
        + huge.encode()
        + b"\n"
        + json.dumps(native_trace(3)).encode()
        + b"\n"
    )
    result = subprocess.run(
        _cli("run", "--source", f"file:{source}"),
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    letters = _dead_letters(result.stderr)
    assert [(x["line"], x["reason"]) for x in letters] == [(1, "invalid_utf8"), (2, "too_large")]
    too_large = letters[1]
    assert too_large["value_truncated"] is True
    assert too_large["value_bytes"] == len(huge)
    assert str(len(huge)) in str(too_large["error"]), "the error gives the line's real size"
    longest = max(len(x) for x in result.stderr.splitlines())
    assert longest < 4000, "a 3 MB line is not copied into stderr"
    assert "1 traces scored, 2 dead-lettered (invalid_utf8 1, too_large 1)" in result.stdout


@pytest.mark.slow
def test_the_replay_ends_with_a_summary_like_score(tmp_path: Path) -> None:
    result = subprocess.run(
        _cli("run", "--source", "file:examples/traces.jsonl"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("replayed 7 lines of examples/traces.jsonl: 6 traces scored")
    assert "1 dead-lettered (schema_violation 1)" in lines[0]
    assert any(line.split()[:2] == ["faithfulness", "mean"] for line in lines)
    assert any("unsupported statements" in line for line in lines)
    assert any(line.strip().startswith("judge: off") for line in lines)
    assert any("review --since" in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "--source", "file:missing.jsonl"), "--source file:missing.jsonl: no such file"),
        (("run", "--source", "file:."), "--source file:. is a directory"),
        (("score", "--input", "missing.jsonl", "--output", "o.jsonl"), "--input missing.jsonl"),
        (("score", "--input", ".", "--output", "o.jsonl"), "--input . is a directory"),
        (
            ("score", "--input", "in.jsonl", "--output", "no/such/dir/o.jsonl"),
            "--output no/such/dir/o.jsonl: folder no/such/dir does not exist",
        ),
        (("score", "--input", "in.jsonl", "--output", "."), "--output . is a directory"),
        (("run", "--source", "nowhere"), "--source must be 'kafka' or 'file:PATH'"),
    ],
)
def test_bad_paths_are_one_line_naming_the_flag_with_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "in.jsonl").write_text(json.dumps(native_trace(1)) + "\n")
    result = subprocess.run(
        _cli(*args), cwd=tmp_path, capture_output=True, text=True, timeout=60, env=_env(tmp_path)
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [x for x in result.stderr.splitlines() if x.startswith("rag-monitor:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Kafka" not in result.stderr


@pytest.mark.slow
def test_the_replay_summary_reports_what_the_judge_shed(tmp_path: Path) -> None:
    """A one-slot judge queue and a slow judge: traces replayed together are shed
    (queue_full), the rest judged; the summary counts both."""
    from tests.support.openai_server import OpenAIServer, Reply

    server = OpenAIServer(script=lambda received: Reply(delay=0.3))
    server.start_in_thread()
    source = tmp_path / "traces.jsonl"
    source.write_text("".join(json.dumps(native_trace(i)) + "\n" for i in range(12)))
    try:
        result = subprocess.run(
            _cli("run", "--source", f"file:{source}"),
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(
                tmp_path,
                RAGMON_JUDGE__BASE_URL=server.url,
                RAGMON_SAMPLING__RATE="1.0",
                RAGMON_SAMPLING__QUEUE_SIZE="1",
            ),
        )
    finally:
        server.stop_in_thread()
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = [x.strip() for x in result.stdout.splitlines() if x.strip().startswith("judge:")]
    match = re.fullmatch(
        r"judge: 12 traces selected \(sampled (\d+), priority (\d+)\), 0 not in the sample;"
        r" shed (\d+) \(([a-z_ \d,]+)\); judged (\d+)",
        line,
    )
    assert match is not None, line
    sampled, priority, shed, judged = (int(match.group(i)) for i in (1, 2, 3, 5))
    reasons = dict(part.rsplit(" ", 1) for part in match.group(4).split(", "))
    assert reasons.get("queue_full") and sum(map(int, reasons.values())) == shed, line
    assert set(reasons) <= {"queue_full", "rate_lowered"}
    assert judged >= 1 and sampled + priority == judged and judged + shed == 12
