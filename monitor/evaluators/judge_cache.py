"""In-memory cache of judge verdicts: TTL plus a bound on entries (least recently used evicted).

Keys are built by :func:`cache_key` from the prompt version, the judge model and the SHA-256 of
what the judge would see (question, contexts and answer after redaction and truncation), so a
prompt change or a model change never serves an old verdict. Per replica; not shared.

`monitor.typing.DurableVerdicts` is the other cache: a trace's own verdicts kept in the
results store (keyed by trace, task and the same identity), so that they outlive the process
that asked for them.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


def cache_key(prompt_version: str, model: str, payload: str) -> str:
    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()
    return f"{prompt_version}|{model}|{digest}"


class TTLCache(Generic[V]):
    """`get` returns a live entry (refreshing its recency) or None; `put` evicts the oldest."""

    def __init__(
        self,
        ttl_seconds: float,
        max_entries: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.ttl_seconds > 0 and self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> V | None:
        if not self.enabled:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        if not self.enabled:
            return
        self._entries[key] = (self._clock() + self.ttl_seconds, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
