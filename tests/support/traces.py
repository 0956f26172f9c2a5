"""Builders for native traces and helpers to drive a daemon in-process during a test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.config import Settings
from monitor.daemon import Daemon


def native_trace(n: int, **overrides: Any) -> dict[str, Any]:
    """A valid native trace; `n` makes ids unique and content vary."""
    trace: dict[str, Any] = {
        "schema_version": 1,
        "trace_id": f"trace-{n:06d}",
        "timestamp": datetime(2026, 11, 1, 12, 0, n % 60, tzinfo=UTC).isoformat(),
        "agent": "default",
        "conversation_id": f"conv-{n // 3:05d}",
        "turn": n % 3 + 1,
        "query": f"What is the opening time of branch {n}?",
        "contexts": [
            {
                "id": f"doc-{n}",
                "text": f"Branch {n} opens at 9:00 and closes at 17:00.",
                "score": 0.8,
                "rank": 1,
            },
        ],
        "answer": f"Branch {n} opens at 9:00.",
    }
    trace.update(overrides)
    return trace


def encode(trace: dict[str, Any]) -> bytes:
    return json.dumps(trace).encode("utf-8")


def daemon_settings(
    bootstrap: str, topics: list[str], group: str, dlq: str, **kafka: Any
) -> Settings:
    return Settings.model_validate(
        {
            "kafka": {
                "bootstrap_servers": bootstrap,
                "topics": topics,
                "group_id": group,
                "dlq_topic": dlq,
                "commit_interval_seconds": 0.2,
                "session_timeout_ms": 10_000,
                "heartbeat_interval_ms": 1_000,
                **kafka,
            },
            "http": {"host": "127.0.0.1", "port": 0},
            "log": {"format": "console", "level": "warning"},
            "shutdown": {"deadline_seconds": 10},
        }
    )


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]],
    timeout: float,
    what: str,
    interval: float = 0.1,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


class RunningDaemon:
    """A daemon running as a task of the test's event loop."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.task: asyncio.Task[int] = asyncio.create_task(daemon.run())

    async def started(self, timeout: float = 30) -> None:
        await wait_for(
            lambda: self.daemon.started.is_set() or self.task.done(), timeout, "daemon start"
        )
        if self.task.done():
            self.task.result()

    async def stop(self, timeout: float = 30) -> int:
        self.daemon.request_stop()
        return await asyncio.wait_for(self.task, timeout)

    async def crash(self) -> None:
        """Cancel the run like a crash: no draining, no final commit."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def scoring_settings(
    bootstrap: str, prefix: str, db: Path, results_topic: str | None = None, **sections: Any
) -> Settings:
    """Settings of a daemon with the scoring stage: topics `<prefix>.in` / `.dlq`, a SQLite
    store at `db`, a free HTTP port; `sections` are merged over that (e.g. judge={...})."""
    values: dict[str, Any] = {
        "kafka": {
            "bootstrap_servers": bootstrap,
            "topics": [f"{prefix}.in"],
            "group_id": f"{prefix}.g",
            "dlq_topic": f"{prefix}.dlq",
            "commit_interval_seconds": 0.2,
        },
        "http": {"host": "127.0.0.1", "port": 0},
        "store": {"url": f"sqlite+aiosqlite:///{db}"},
        "results": {"topic": results_topic},
    }
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section}
    return Settings.model_validate(values)
