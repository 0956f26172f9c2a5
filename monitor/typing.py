"""The seams between packages: every protocol one package implements and another calls.

A stage (`monitor.stages`) is run by the consume loop; a processor is what the score stage hands
each trace to; the others are what the stages and evaluators need of the sinks, the evaluators
and the redaction, so that none of them imports another's classes. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from aiokafka.structs import TopicPartition

from monitor.messages import RawMessage, Routed
from monitor.models import Constraint, EvaluationResult, Trace


class Stage(Protocol):
    """One hop of the pipeline: one kind of input, one output, run by a consume loop.

    `handle_batch` takes the messages the router sent here from one fetch and returns once they
    are handed on (not necessarily finished: the stage finishes their offsets when their work is
    done); `tick` is called after every fetch, with or without messages (time-driven work:
    traces whose assembly is due); `drain` finishes what is in flight at shutdown or at the end
    of a file, until `deadline` (monotonic), and says whether everything finished. A rebalance
    is announced with `on_revoked` (before the partitions go) and `on_assigned` (the whole new
    assignment), so a stage keeps state only for the partitions it owns.
    """

    name: str

    async def handle_batch(self, batch: Sequence[Routed]) -> None: ...

    async def tick(self) -> None: ...

    async def drain(self, deadline: float) -> bool: ...

    def on_revoked(self, partitions: set[TopicPartition]) -> None: ...

    def on_assigned(self, assignment: set[TopicPartition]) -> None: ...


@runtime_checkable
class Timed(Protocol):
    """A stage whose `tick` has work due at a known time (traces whose assembly settles)."""

    def due_in(self, now: float) -> float | None:
        """Seconds from `now` (monotonic) until its tick has work due; None: nothing waits."""
        ...


class Source(Protocol):
    """Where a consume loop reads raw messages: a Kafka consumer group, or a file."""

    name: str

    async def fetch(self, wait_at_most: float | None = None) -> Sequence[RawMessage] | None:
        """The next batch (empty when nothing came for a while, or for `wait_at_most` seconds
        when given: a stage has work due by then); None when the input ended."""
        ...

    async def commit_if_due(self) -> None:
        """Commit the finished offsets when the commit interval has passed."""
        ...


class PartitionListener(Protocol):
    """Hears of a consumer group's rebalances: `on_revoked` before partitions go (their
    in-flight work may still finish), `on_assigned` with the whole new assignment."""

    async def on_revoked(self, partitions: set[TopicPartition]) -> None: ...

    async def on_assigned(self, assignment: set[TopicPartition]) -> None: ...


class TraceProcessor(Protocol):
    """What the score stage does with each valid trace (scoring, conversations, the sinks)."""

    async def process(self, trace: Trace) -> None:
        """Handle one trace; raising marks it failed (it is dead-lettered, never dropped)."""
        ...


@runtime_checkable
class BatchPreparing(Protocol):
    """A processor that prepares for a batch of traces at once (its conversations read from the
    store together) before the score stage hands it the batch's traces one by one."""

    def batch(
        self, traces: Sequence[tuple[Trace, Collection[TopicPartition]]]
    ) -> AbstractAsyncContextManager[None]:
        """Held while the traces (each with the partitions it was read from) are processed."""
        ...


class DeadLetterSink(Protocol):
    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        """Store the message (or `value` in its place) durably; return only once it is stored."""
        ...


WholeTraceCheck = Callable[[str], Awaitable[bool]]
"""Whether a trace id already has a result of the whole trace (not of a fragment of it)."""


class SyncEvaluator(Protocol):
    name: str

    def evaluate(self, trace: Trace) -> EvaluationResult: ...


class Judge(Protocol):
    name: str

    @property
    def circuit_open(self) -> bool: ...

    async def evaluate(self, trace: Trace) -> EvaluationResult: ...


class TurnJudge(Protocol):
    async def judge_turn(
        self, trace: Trace, constraints: list[Constraint], history: list[tuple[str, str]]
    ) -> Any: ...


class TextRedactor(Protocol):
    def redact(self, text: str) -> str: ...


class DurableVerdicts(Protocol):
    """Verdicts (JSON) by key, kept where a restarted process finds them."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, trace_id: str, verdict: str) -> None: ...


class CounterChild(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class TermCounter(Protocol):
    """`ragmon_estimate_terms_total` or `ragmon_estimate_weighted_terms_total`."""

    def labels(self, *values: str) -> CounterChild: ...


__all__ = [
    "CounterChild",
    "DeadLetterSink",
    "DurableVerdicts",
    "Judge",
    "PartitionListener",
    "Source",
    "Stage",
    "SyncEvaluator",
    "TermCounter",
    "TextRedactor",
    "TraceProcessor",
    "TurnJudge",
    "WholeTraceCheck",
]
