"""What a failure means for the trace being processed: its own fault, or the world's.

- :class:`DataFault`: the trace itself cannot be processed (its rows are refused by the store,
  its id belongs to another conversation, ...). It is dead-lettered with the fault's `reason`,
  and only that trace.
- :class:`ServiceFault`: a service the pipeline writes to (the store, the broker) is away and
  the call could not wait for it any longer: the process is shutting down, or the trace's
  partition went to another replica (:class:`WorkAbandoned`). The trace is neither finished
  nor dead-lettered: its offset stays uncommitted and it is read again.

Sinks raise these; the score stage decides what happens to the trace. Retrying a store or
broker call while the process runs is the sink's job (`monitor.retry`), so these reach the
score stage only when waiting is over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from aiokafka.structs import TopicPartition


class DataFault(Exception):
    """The trace is at fault: dead-letter it with `reason` (a `DEAD_LETTER_REASONS` value)."""

    reason = "processing_error"

    def __init__(self, detail: str, reason: str | None = None) -> None:
        super().__init__(detail)
        if reason is not None:
            self.reason = reason


class ServiceFault(Exception):
    """A service is away and waiting for it is over: leave the trace unfinished."""


class WorkAbandoned(ServiceFault):
    """The trace's partition went to another replica, which reads it again: write nothing
    more for it here."""


@dataclass(frozen=True, slots=True)
class _Claim:
    owned: Callable[[], bool]
    partitions: tuple[TopicPartition, ...]


# The trace being processed: the partitions it was read from, and whether it is still this
# replica's to finish (those partitions still assigned). Set by the score stage around each
# trace; read by the sinks before they write, and by the conversation stage to scope its state.
_claim: ContextVar[_Claim | None] = ContextVar("ragmon_trace_claim", default=None)


@contextmanager
def owned_while(
    predicate: Callable[[], bool], partitions: tuple[TopicPartition, ...] = ()
) -> Iterator[None]:
    """Within this block (and tasks started in it), the current trace, read from
    `partitions`, is ours while `predicate` holds."""
    token = _claim.set(_Claim(predicate, partitions))
    try:
        yield
    finally:
        _claim.reset(token)


def current_owner() -> Callable[[], bool] | None:
    """The predicate of the trace being processed (None outside the score stage)."""
    claim = _claim.get()
    return claim.owned if claim is not None else None


def current_partitions() -> tuple[TopicPartition, ...]:
    """The partitions the trace being processed was read from (none outside the score stage)."""
    claim = _claim.get()
    return claim.partitions if claim is not None else ()


def check_owned() -> None:
    """Raise `WorkAbandoned` when the trace being processed is no longer ours."""
    owner = current_owner()
    if owner is not None and not owner():
        raise WorkAbandoned("partition revoked: the next owner processes the trace")
