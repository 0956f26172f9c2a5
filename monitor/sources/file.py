"""The file source: replay or backfill a JSONL file (or stdin) through the same pipeline.

Lines are handed on as they arrive (a live pipe is processed line by line, not at its end) and
memory stays flat whatever the input: a line longer than the size limit is never held whole,
only its first `max_line_bytes + 1` bytes (enough to dead-letter it as `too_large`, with its
real size). Reading runs in a thread of its own so a slow or idle pipe never stalls the event
loop (and with it /healthz and /metrics), and a stop request ends the replay at once even while
stdin is idle.
"""

from __future__ import annotations

import asyncio
import enum
import os
import stat
import threading
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import IO, Any

from monitor.messages import RawMessage

CHUNK_BYTES = 64 * 1024
BATCH_LINES = 256
QUEUED_CHUNKS = 4
IDLE_SECONDS = 1.0  # an idle input still yields (an empty batch) this often


class SourceReadError(Exception):
    """The input cannot be opened or read; the message is one line naming the path."""


def input_problem(path: str) -> str | None:
    """Why `path` cannot be read as a JSONL input (None when it can); `-` is stdin."""
    if path == "-":
        return None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"{path}: no such file"
    except PermissionError:
        return f"{path}: permission denied"
    except (OSError, ValueError) as exc:
        return f"{path}: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(info.st_mode):
        return f"{path} is a directory, not a JSONL file"
    if not os.access(path, os.R_OK):
        return f"{path}: permission denied"
    return None


@dataclass(frozen=True, slots=True)
class Line:
    """One line without its newline; `value` is cut to the splitter's bound, `size` is whole."""

    value: bytes
    size: int


class LineSplitter:
    """Cuts a byte stream into lines, keeping at most `max_line_bytes + 1` bytes of any line."""

    def __init__(self, max_line_bytes: int) -> None:
        self._keep = max_line_bytes + 1
        self._head = bytearray()
        self._size = 0

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        room = self._keep - len(self._head)
        if room > 0:
            self._head += piece[:room]

    def _take(self) -> Line:
        value = bytes(self._head)
        if self._size < self._keep:  # held whole
            value = value.rstrip(b"\r")
            line = Line(value, len(value))
        else:
            line = Line(value, self._size)
        self._head.clear()
        self._size = 0
        return line

    def feed(self, chunk: bytes) -> list[Line]:
        """The lines `chunk` completes."""
        lines: list[Line] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if start < len(chunk):
                    self._add(chunk[start:])
                return lines
            if self._size == 0 and end - start < self._keep:
                value = chunk[start:end].rstrip(b"\r")
                lines.append(Line(value, len(value)))
            else:
                self._add(chunk[start:end])
                lines.append(self._take())
            start = end + 1

    def end(self) -> list[Line]:
        """The last line, when the input does not end with a newline."""
        return [self._take()] if self._size else []


def split_lines(stream: IO[bytes], max_line_bytes: int) -> Iterator[Line]:
    """Lines of a binary stream (blocking reads), bounded as LineSplitter says."""
    splitter = LineSplitter(max_line_bytes)
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        yield from splitter.feed(chunk)
    yield from splitter.end()


class _ChunkReader:
    """A daemon thread reading raw chunks (whatever a pipe has, up to CHUNK_BYTES) into a
    bounded queue; None marks the end, an OSError is handed over as it is."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop) -> None:
        self._path = path
        self._loop = loop
        self.queue: asyncio.Queue[bytes | OSError | None] = asyncio.Queue(QUEUED_CHUNKS)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="file-source", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _put(self, item: bytes | OSError | None) -> bool:
        """Hand an item to the event loop, waiting while the queue is full; False once closed."""
        while not self._closed.is_set():
            try:
                future = asyncio.run_coroutine_threadsafe(self.queue.put(item), self._loop)
            except RuntimeError:  # the loop is closed
                return False
            try:
                future.result(timeout=0.5)
                return True
            except TimeoutError:
                future.cancel()
        return False

    def _run(self) -> None:
        fd = -1
        try:
            # Opened here, not on the event loop: opening a FIFO waits for its writer.
            fd = 0 if self._path == "-" else os.open(self._path, os.O_RDONLY)
            while not self._closed.is_set():
                chunk = os.read(fd, CHUNK_BYTES)
                if not self._put(chunk if chunk else None) or not chunk:
                    return
        except OSError as exc:
            self._put(exc)
        finally:
            if fd > 0:
                os.close(fd)


async def read_lines(
    path: str, max_line_bytes: int, stop: asyncio.Event | None = None
) -> AsyncGenerator[list[RawMessage], None]:
    """Yield batches of non-blank lines as messages as they arrive; `-` reads stdin.

    Offsets are line numbers. An idle input yields an empty batch every IDLE_SECONDS (the caller
    can keep its heartbeat and timers going). Returns at the end of the input, or at once when
    `stop` is set. Raises SourceReadError when the input cannot be opened or read.
    """
    label = "stdin" if path == "-" else path
    reader = _ChunkReader(path, asyncio.get_running_loop())
    splitter = LineSplitter(max_line_bytes)
    stopped = asyncio.create_task(stop.wait()) if stop is not None else None
    line_no = 0

    def messages(lines: list[Line]) -> list[RawMessage]:
        nonlocal line_no
        out = []
        for line in lines:
            line_no += 1
            if line.value.strip():
                out.append(
                    RawMessage(
                        topic=label,
                        partition=0,
                        offset=line_no,
                        key=None,
                        value=line.value,
                        size=line.size if len(line.value) < line.size else None,
                    )
                )
        return out

    try:
        while True:
            woke = await _next_chunk(reader.queue, stopped)
            if woke is _Wake.STOPPED:
                return
            if woke is _Wake.IDLE:
                yield []
                continue
            item = woke
            lines: list[Line] = []
            while True:
                if isinstance(item, OSError):
                    raise SourceReadError(f"cannot read {label}: {item.strerror or item}")
                lines += splitter.end() if item is None else splitter.feed(item)
                if item is None or len(lines) >= BATCH_LINES or reader.queue.empty():
                    break
                item = reader.queue.get_nowait()
            for start in range(0, len(lines), BATCH_LINES):
                yield messages(lines[start : start + BATCH_LINES])
            if item is None:
                return
    finally:
        reader.close()
        if stopped is not None:
            stopped.cancel()


class _Wake(enum.Enum):
    STOPPED = "stopped"
    IDLE = "idle"


async def _next_chunk(
    queue: asyncio.Queue[bytes | OSError | None], stopped: asyncio.Task[bool] | None
) -> bytes | OSError | _Wake | None:
    """The next queued item, IDLE after IDLE_SECONDS without one, or STOPPED on stop."""
    if not queue.empty():
        return queue.get_nowait()
    getter = asyncio.ensure_future(queue.get())
    waiting: set[asyncio.Future[Any]] = {getter}
    if stopped is not None:
        waiting.add(stopped)
    done, _ = await asyncio.wait(waiting, timeout=IDLE_SECONDS, return_when="FIRST_COMPLETED")
    if getter in done:
        return getter.result()
    getter.cancel()
    if stopped is not None and stopped in done:
        return _Wake.STOPPED
    return _Wake.IDLE


class FileSource:
    """A file (or stdin) as a consume loop's source: `read_lines`' batches, None at the end.
    Offsets are line numbers and nothing is committed (a replay is run again whole)."""

    name = "file"

    def __init__(self, path: str, max_line_bytes: int, stop: asyncio.Event | None = None) -> None:
        self._batches = read_lines(path, max_line_bytes, stop=stop)

    async def fetch(self, wait_at_most: float | None = None) -> list[RawMessage] | None:
        """The next batch of lines (a replay releases what it assembles at its end: it does
        not wait for settling, so `wait_at_most` does not apply)."""
        return await anext(self._batches, None)

    async def commit_if_due(self) -> None:
        return None

    async def __aenter__(self) -> FileSource:
        return self

    async def __aexit__(self, *_: object) -> None:
        """Stop reading (the reader thread ends with the generator)."""
        await self._batches.aclose()
