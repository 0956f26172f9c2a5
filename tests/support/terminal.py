"""Run a command in a real pseudo-terminal, as a user at a shell would, and press keys.

The command is the session leader of a new pseudo-terminal and its process group is the
terminal's foreground group, so writing ``\\x03`` (Ctrl-C) to the master makes the terminal
driver send SIGINT to every process of that group -- exactly what happens to a user's ^C, and
unlike a signal sent to one PID.
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path


class Terminal:
    def __init__(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes the command
            try:
                os.chdir(cwd)
                os.execvpe(argv[0], list(argv), env)
            finally:
                os._exit(127)
        self.pid = pid
        self._fd = fd
        self._output = bytearray()
        self._lock = threading.Lock()
        self._status: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.2)
                if not ready:
                    if self._status is not None:
                        return
                    continue
                chunk = os.read(self._fd, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                return
            if not chunk:
                return
            with self._lock:
                self._output += chunk

    @property
    def output(self) -> str:
        with self._lock:
            return self._output.decode("utf-8", "replace")

    def wait_for_text(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output:
                return self.output
            if self.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear within {timeout}s; output:\n{self.output}")

    def press_ctrl_c(self) -> None:
        os.write(self._fd, b"\x03")

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while running."""
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status = status
        if self._status is None:
            return None
        return os.waitstatus_to_exitcode(self._status)

    def wait(self, timeout: float) -> int | None:
        """The exit code within `timeout` seconds, or None if still running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.poll()
            if code is not None:
                self._reader.join(timeout=2)
                return code
            time.sleep(0.05)
        return None

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.wait(5)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def child_pids(pid: int) -> list[int]:
    """Direct children of a process (Linux /proc)."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return children
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except FileNotFoundError:
            continue
        children += [int(p) for p in text.split()]
    return children


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
