"""What the event loop and the store's thread do per native scored trace: counts, not samples.

    python bench/scored_loop.py [--scored 6000] [--no-results]

Starts the test broker, produces ``--scored`` RAG turns as native JSON (three a conversation,
as `bench/ingest.py` scores them) and runs the same scored measurement as
`bench/scored_profile.py` (default scoring stage, SQLite store, results topic, no judge), with
the running loop instrumented from the first message read to the last trace processed. Per
trace it prints:

- the callbacks the loop ran (``Handle._run``), by kind: task steps, wake-ups of a task by the
  future it awaited, other future callbacks, the rest by callback name;
- the ``select`` calls (the loop's wake-ups), how many were asked not to wait (a timeout of
  0), how many returned events, and the loop thread's CPU inside them (its own CPU clock); the
  callbacks scheduled from another thread (``call_soon_threadsafe``: SQLite's worker thread
  answering);
- tasks and futures created;
- the store's group commits: how many, the steps in each (mean, median, largest), and the CPU of
  the SQLite worker threads (their own CPU clocks, not sampled), by operation (each call run
  in a worker thread timed with ``time.thread_time``).

Counting costs CPU of its own, so the run's CPU per trace printed is above an uninstrumented
run's; the counts are exact, and run on to the daemon's stop (a few callbacks past the last
trace).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiosqlite  # noqa: E402

from bench.ingest import Topics, _turns  # noqa: E402
from bench.scored_rate import scored  # noqa: E402
from monitor.logs import configure_logging  # noqa: E402
from monitor.sinks import store as store_module  # noqa: E402


class Counts:
    """What the instrumented loop saw while `on` was True."""

    def __init__(self) -> None:
        self.on = False
        self.callbacks: Counter[str] = Counter()
        self.selects: Counter[str] = Counter()
        self.threadsafe = 0
        self.select_cpu = 0.0  # seconds of the loop thread's CPU inside select
        self.tasks = 0
        self.futures = 0
        self.batches: list[int] = []
        self.sqlite_cpu = 0.0  # seconds of the worker threads' CPU while counting
        # per operation run in a worker thread: [calls, seconds of that thread's CPU]
        self.sqlite_ops: dict[str, list[float]] = {}


def _kind(callback: Callable[..., Any]) -> str:
    name = getattr(callback, "__qualname__", None) or type(callback).__name__
    if type(callback).__name__ == "TaskStepMethWrapper" or name.endswith("__step"):
        return "task step"
    if name.endswith(("__wakeup", "task_wakeup")) or "Wakeup" in type(callback).__name__:
        return "task woken by its future"
    bound = getattr(callback, "__self__", None)
    if bound is None:
        return f"{getattr(callback, '__module__', '?')}.{name}"
    return f"{type(bound).__name__}.{name.rsplit('.', 1)[-1]}"


def _sqlite_threads_cpu() -> float:
    """CPU seconds of the live aiosqlite worker threads."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.ident is not None and "_connection_worker_thread" in repr(
            getattr(thread, "_target", None)
        ):
            total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total


class SqliteThreads:
    """The CPU of the store's SQLite worker threads (their own clocks) from `start` until the
    store closes (its connections, and with them the threads, end there)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._on = False
        close = store_module.Store.close

        async def close_counted(store: Any) -> None:
            if self._on:
                self.seconds += _sqlite_threads_cpu()
                self._on = False
            await close(store)

        store_module.Store.close = close_counted  # type: ignore[method-assign]

    def start(self) -> None:
        self._on = True
        self.seconds = -_sqlite_threads_cpu()


def _operation(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """An aiosqlite call by its method and, for SQL, the statement's first words."""
    name = getattr(fn, "__name__", type(fn).__name__)
    if args and isinstance(args[0], str):
        words = args[0].replace("(", " ").split()
        target = next((w for w in words if "_" in w or w.islower()), "")
        return f"{name}: {' '.join(words[:2])} {target}".strip()
    return name


def _timed(counts: Counts, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = counts.sqlite_ops.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += time.thread_time() - start

    return run


def instrument(counts: Counts) -> None:
    """Patch the running loop (and the store's group commit) to count into `counts`."""
    loop = asyncio.get_running_loop()
    handle_run = asyncio.events.Handle._run

    def run(handle: asyncio.events.Handle) -> None:
        if counts.on:
            counts.callbacks[_kind(handle._callback)] += 1  # type: ignore[attr-defined]
        handle_run(handle)

    asyncio.events.Handle._run = run
    selector = loop._selector  # type: ignore[attr-defined]
    select = selector.select

    def counted_select(timeout: float | None = None) -> Any:
        start = time.thread_time()
        events = select(timeout)
        if counts.on:
            counts.select_cpu += time.thread_time() - start
            counts.selects["no wait (timeout 0)" if timeout == 0 else "may sleep"] += 1
            counts.selects["returned events"] += bool(events)
        return events

    selector.select = counted_select
    threadsafe = loop.call_soon_threadsafe

    def counted_threadsafe(*args: Any, **kwargs: Any) -> Any:
        counts.threadsafe += counts.on
        return threadsafe(*args, **kwargs)

    loop.call_soon_threadsafe = counted_threadsafe
    create_future = loop.create_future

    def counted_future() -> asyncio.Future[Any]:
        counts.futures += counts.on
        return create_future()

    loop.create_future = counted_future

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        counts.tasks += counts.on
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    commit = store_module.Store._commit

    async def counted_commit(self: Any, batch: list[Any]) -> None:
        if counts.on:
            counts.batches.append(len(batch))
        await commit(self, batch)

    store_module.Store._commit = counted_commit
    execute = aiosqlite.Connection._execute

    async def timed_execute(self: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if counts.on:
            fn = _timed(counts, _operation(fn, args), fn)
        return await execute(self, fn, *args, **kwargs)

    aiosqlite.Connection._execute = timed_execute


async def measure(bootstrap: str, count: int, results: bool) -> None:
    topics = Topics(bootstrap)
    await topics.create()
    await topics.produce_native(_turns(count))
    counts = Counts()
    instrument(counts)
    sqlite = SqliteThreads()

    def attach() -> None:
        counts.on = True
        sqlite.start()

    run = await scored(
        topics.settings([topics.scored_native]),
        count,
        topics.results if results else None,
        on_first_read=attach,
    )
    counts.on = False
    counts.sqlite_cpu = sqlite.seconds
    print(f"scored native: {run.burst:,.0f} traces/s, {run.cpu_ms:.3f} ms of CPU a trace")
    report(counts, count)


def report(counts: Counts, traces: int) -> None:
    def per(n: float) -> str:
        return f"{n / traces:7.2f}"

    total = sum(counts.callbacks.values())
    print(f"loop callbacks (Handle._run) per trace: {per(total)}")
    for kind, n in counts.callbacks.most_common(12):
        print(f"  {per(n)}  {kind}")
    selects = counts.selects["no wait (timeout 0)"] + counts.selects["may sleep"]
    print(f"select calls per trace: {per(selects)}")
    for kind, n in counts.selects.items():
        print(f"  {per(n)}  {kind}")
    print(
        f"  the loop thread's CPU inside select: {counts.select_cpu * 1e6 / traces:.1f} µs a trace"
    )
    print(f"call_soon_threadsafe per trace: {per(counts.threadsafe)}")
    print(f"tasks created per trace: {per(counts.tasks)}; futures: {per(counts.futures)}")
    if counts.batches:
        steps = sum(counts.batches)
        print(
            f"group commits: {len(counts.batches):,} of {steps:,} steps; steps a commit: mean "
            f"{statistics.mean(counts.batches):.1f}, median {statistics.median(counts.batches):g},"
            f" largest {max(counts.batches)}; commits per trace {per(len(counts.batches))}"
        )
    print(f"SQLite worker threads' CPU: {counts.sqlite_cpu * 1e6 / traces:.1f} µs a trace, of it:")
    ops = sorted(counts.sqlite_ops.items(), key=lambda item: -item[1][1])
    for key, (calls, seconds) in ops:
        print(f"  {seconds * 1e6 / traces:7.1f} µs  {per(calls)} calls  {key}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scored", type=int, default=6000, help="RAG turns scored")
    parser.add_argument("--no-results", action="store_true", help="no results topic")
    args = parser.parse_args()
    configure_logging("console", "warning")
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as workdir, KafkaBroker(Path(workdir)) as broker:
        asyncio.run(measure(broker.bootstrap, args.scored, not args.no_results))


if __name__ == "__main__":
    main()
