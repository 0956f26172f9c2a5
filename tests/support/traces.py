"""Builders for traces (native JSON dicts and `Trace` models) and helpers to drive a daemon
in-process during a test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.models import Context, Trace
from tests.support.kafka_io import create_topics, produce

FIXED_TIME = datetime(2026, 11, 26, tzinfo=UTC)


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


def trace_of(n: int, **overrides: Any) -> Trace:
    """:func:`native_trace` as a validated `Trace`."""
    return Trace.model_validate(native_trace(n, **overrides))


def make_trace(
    query: str,
    contexts: Sequence[str],
    answer: str,
    *,
    trace_id: str = "t-1",
    ranks: bool = True,
    **fields: Any,
) -> Trace:
    """A `Trace` from plain texts: the contexts get ids c0, c1, ... and ranks 0, 1, ... (none
    with `ranks=False`); `fields` set any other field (agent, conversation_id, turn, language,
    reference, timestamp; FIXED_TIME by default)."""
    return Trace(
        trace_id=trace_id,
        query=query,
        contexts=[
            Context(id=f"c{i}", text=text, rank=i if ranks else None)
            for i, text in enumerate(contexts)
        ],
        answer=answer,
        **{"timestamp": FIXED_TIME, **fields},
    )


def judge_trace(n: int = 1, **overrides: Any) -> Trace:
    """A trace for the scripted judge (tests/support/openai_server.py), whose markers say what
    it finds: the IRRELEVANT chunk at rank 1 is of no use, the rank 2 chunk is, and of the
    answer's three statements the UNSUPPORTED one has no support."""
    data: dict[str, Any] = {
        "trace_id": f"trace-{n}",
        "timestamp": datetime(2026, 11, 1, 12, 0, tzinfo=UTC),
        "agent": "support",
        "conversation_id": f"conv-{n}",
        "turn": 1,
        "query": f"When does branch {n} open and close?",
        "contexts": [
            {"id": f"doc-{n}-a", "text": "IRRELEVANT: the car park has 40 spaces.", "rank": 1},
            {
                "id": f"doc-{n}-b",
                "text": f"Branch {n} opens at 9:00. It closes at 17:00. IRRELEVANT: free coffee.",
                "rank": 2,
            },
        ],
        "answer": (
            f"Branch {n} opens at 9:00. It closes at 17:00. "
            "It also runs an UNSUPPORTED night service."
        ),
    }
    data.update(overrides)
    return Trace.model_validate(data)


async def produce_traces(bootstrap: str, topic: str, traces: Sequence[dict[str, Any]]) -> None:
    """Produce native traces to `topic`, each keyed by its conversation as services key them."""
    await produce(
        bootstrap,
        topic,
        [encode(t) for t in traces],
        keys=[t["conversation_id"].encode() for t in traces],
    )


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


async def start_judging_daemon(
    bootstrap: str, prefix: str, db: Path, judge: dict[str, Any]
) -> RunningDaemon:
    """A daemon with the judge (`judge` settings) on every trace (``sampling.rate`` 1.0),
    reading `<prefix>.in` (created here, with `<prefix>.dlq`), results stored in `db`; started."""
    await create_topics(bootstrap, [f"{prefix}.in", f"{prefix}.dlq"])
    settings = scoring_settings(bootstrap, prefix, db, sampling={"rate": 1.0}, judge=judge)
    running = RunningDaemon(Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry()))
    await running.started()
    return running


async def replay_with_judge(
    lines: Sequence[dict[str, Any]], folder: Path, rate: float
) -> tuple[Daemon, list[Any]]:
    """Replay native traces through the daemon (file source, SQLite store `folder/r.db`) with
    the scripted judge at sampling `rate`; the finished daemon and the judge's requests."""
    from tests.support.openai_server import OpenAIServer

    source = folder / "traces.jsonl"
    source.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    async with OpenAIServer() as server:
        settings = Settings.model_validate(
            {
                "http": {"host": "127.0.0.1", "port": 0},
                "store": {"url": f"sqlite+aiosqlite:///{folder / 'r.db'}"},
                "sampling": {"rate": rate},
                "judge": {"base_url": server.url, "api_key": "k", "max_retries": 0},
            }
        )
        daemon = Daemon(settings, SourceSpec("file", str(source)), registry=CollectorRegistry())
        assert await daemon.run() == 0
        return daemon, list(server.requests)
