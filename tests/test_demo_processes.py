"""The demo's child processes stop without asyncio's child watcher losing their exit."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.demo import processes
from monitor.demo.processes import ChildProcess
from tests.support.traces import wait_for


def _no_popen_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Popen.send_signal` polls (waitpid) before signalling, reaping a child that has just
    exited before asyncio's watcher does: a stop must never go through it."""

    def refuse(self: subprocess.Popen[bytes], sig: int) -> None:
        raise AssertionError(f"Popen.send_signal({sig}) would poll and may reap the child")

    monkeypatch.setattr(subprocess.Popen, "send_signal", refuse)


def test_a_child_that_ends_on_sigterm_reports_its_own_exit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _no_popen_signals(monkeypatch)

    async def run() -> int | None:
        child = await ChildProcess.start(
            "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"]
        )
        await child.stop()
        return child.process.returncode

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        code = asyncio.run(run())
    assert code == -15  # SIGTERM, as the child watcher reaped it: not the 255 of a lost exit
    assert not [r for r in caplog.records if r.name == "asyncio"]
    assert not processes._running


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    _no_popen_signals(monkeypatch)
    monkeypatch.setattr(processes, "STOP_SECONDS", 0.5)
    ignores_term = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )

    async def run() -> int | None:
        log = tmp_path / "stubborn.log"
        child = await ChildProcess.start(
            "stubborn", [sys.executable, "-c", ignores_term], log_file=log
        )
        await wait_for(lambda: b"ready" in log.read_bytes(), 30, "SIGTERM ignored")
        await child.stop()
        return child.process.returncode

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        code = asyncio.run(run())
    assert code == -9
    assert not [r for r in caplog.records if r.name == "asyncio"]
