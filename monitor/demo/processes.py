"""Child processes of the demo (the embedded broker, Prometheus), each in its own session.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group. A broker started in
the demo's group would die at once, before the daemon has committed and left its group, and the
daemon would then wait for a broker that never comes back. In a session of their own the
children get no signal from the terminal: the demo stops them itself, after the daemon, in
order. On Linux each child is also told to die with the demo (PR_SET_PDEATHSIG), so a demo
killed outright leaves no broker behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

STOP_SECONDS = 5.0

_PR_SET_PDEATHSIG = 1
_running: dict[int, asyncio.subprocess.Process] = {}


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGTERM the child when the demo's thread exits."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return hook


class ChildProcess:
    """One started child; `stop()` ends it (SIGTERM, then SIGKILL after STOP_SECONDS)."""

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        log_file: Path | None = None,
        cwd: Path | None = None,
    ) -> ChildProcess:
        output = log_file.open("ab") if log_file is not None else asyncio.subprocess.DEVNULL
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent(),  # only prctl, safe between fork and exec
            )
        finally:
            if log_file is not None and not isinstance(output, int):
                output.close()
        _running[process.pid] = process
        return cls(name, process)

    async def wait(self) -> int:
        code = await self.process.wait()
        _running.pop(self.process.pid, None)
        return code

    async def stop(self) -> None:
        if self.process.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), STOP_SECONDS)
            except TimeoutError:
                self._signal(signal.SIGKILL)
                await self.process.wait()
        _running.pop(self.process.pid, None)

    def _signal(self, signum: int) -> None:
        """Signal the child unless asyncio has seen it exit. Not `Process.terminate()`/`kill()`:
        they poll first (`waitpid`), which reaps a child that has just exited before asyncio's
        child watcher can; the watcher then warns "Unknown child process pid" on the terminal
        and reports exit code 255."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signum)


def kill_all_children() -> None:
    """SIGKILL every child still running (for an exit that cannot wait, e.g. a second ^C)."""
    for pid, process in list(_running.items()):
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _running.pop(pid, None)
