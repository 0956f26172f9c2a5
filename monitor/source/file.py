"""The file source: replay or backfill a JSONL file (or stdin) through the same pipeline."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

from monitor.source.messages import RawMessage

BATCH_LINES = 256


def _read_batch(stream: IO[bytes], limit: int) -> list[bytes]:
    lines: list[bytes] = []
    for _ in range(limit):
        line = stream.readline()
        if not line:
            break
        lines.append(line)
    return lines


async def read_lines(path: str) -> AsyncIterator[list[RawMessage]]:
    """Yield batches of non-blank lines as messages; `-` reads stdin. Offsets are line numbers.

    Reading happens in a worker thread so a slow pipe never stalls the event loop (and with it
    /healthz and /metrics).
    """
    label = "stdin" if path == "-" else path
    stream: IO[bytes] = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115, ASYNC230
    try:
        line_no = 0
        while True:
            batch = await asyncio.to_thread(_read_batch, stream, BATCH_LINES)
            if not batch:
                return
            messages = []
            for raw in batch:
                line_no += 1
                value = raw.rstrip(b"\r\n")
                if value.strip():
                    messages.append(
                        RawMessage(topic=label, partition=0, offset=line_no, key=None, value=value)
                    )
            yield messages
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
