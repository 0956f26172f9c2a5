"""CPU-heavy work on one large input, off the event loop.

Decoding a large native trace, splitting a large OTLP export, mapping a trace of many spans:
each is pure Python work that grows with its input, and on the event loop it would hold
everything else (the Kafka fetcher, the probes, every other trace) until it is done. Above a
size it runs in a worker thread instead: the GIL still serialises Python work, but the loop
gets its turn every switch interval (5 ms). `bench/loop_lag.py` measures the loop's longest
gap with huge inputs; docs/performance.md states the bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

OFFLOAD_BYTES = 64 * 1024
"""Work on more input bytes than this runs in a worker thread: a few milliseconds of CPU at
this size; smaller work runs inline, which is cheaper than a thread hop."""

R = TypeVar("R")


async def offload(size: int, work: Callable[[], R]) -> R:
    """`work()`, in a worker thread when its input is more than `OFFLOAD_BYTES`."""
    if size > OFFLOAD_BYTES:
        return await asyncio.to_thread(work)
    return work()
