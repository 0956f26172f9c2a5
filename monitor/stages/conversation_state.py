"""A conversation's state in memory: the turn numbering rule and what is stored of it.

Turn numbers: a native trace's `turn` wins; otherwise 1 + the number of the conversation's
traces that started earlier (ties by trace id). `ConversationState` keeps the order of starts,
the producers' turns, the turn each stored trace carries in the store, and, while a batch holds
the conversation, what the batch read of its stored traces. The tracker
(`monitor/stages/conversation.py`) numbers, loads, writes and evicts.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence

import structlog
from aiokafka.structs import TopicPartition

from monitor.models import Constraint, Trace
from monitor.sinks.conversations import StoredConversation, StoredTrace
from monitor.times import micros, micros_from_ns

log = structlog.get_logger(__name__)

DISAGREE = 0  # a stored trace whose turn row and results carry different turns


def start_micros(trace: Trace) -> int:
    """When the turn started, in microseconds since the epoch: the OTLP root span's start
    (`Trace.assembly.start_ns`) when known, else `timestamp`."""
    if trace.assembly is not None and trace.assembly.start_ns is not None:
        return micros_from_ns(trace.assembly.start_ns)
    return micros(trace.timestamp)


def turn_order_key(trace: Trace) -> tuple[int, int, str]:
    """The order in which a conversation's traces are processed: explicit turn, start, id."""
    return (trace.turn or 0, start_micros(trace), trace.trace_id)


class ConversationState:
    """One conversation in memory: how its turns are numbered and what of it is stored."""

    __slots__ = (
        "agent",
        "carried",
        "evaluators",
        "explicit",
        "known",
        "last_memory",
        "last_seen",
        "order",
        "partitions",
        "starts",
        "stored_turns",
    )

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.order: list[tuple[int, str]] = []  # (start µs, trace id) of turns numbered by start
        self.starts: dict[str, int] = {}  # trace id -> start µs, for the same turns
        self.explicit: dict[str, int] = {}  # trace id -> turn given by the producer
        self.evaluators: dict[str, str] = {}  # trace id -> evaluator of its turn row
        # trace id -> the turn its row and results carry in the store (DISAGREE: they differ)
        self.stored_turns: dict[str, int] = {}
        self.carried: list[Constraint] = []  # user-stated constraints extracted by the judge
        self.last_seen = time.monotonic()
        self.last_memory: int | None = None
        self.partitions: set[TopicPartition] = set()  # where its traces were read
        # trace id -> what is stored of it, read for a batch (ConversationTracker.batch)
        self.known: dict[str, StoredTrace] | None = None

    @property
    def last_turn(self) -> int:
        return max(len(self.order), max(self.explicit.values(), default=0))

    def turn_of(self, trace_id: str) -> int | None:
        if trace_id in self.explicit:
            return self.explicit[trace_id]
        start = self.starts.get(trace_id)
        if start is None:
            return None
        return bisect.bisect_left(self.order, (start, trace_id)) + 1

    def place(self, trace: Trace) -> tuple[int, bool]:
        """Number the trace: (turn, whether it is new here). Later turns move up."""
        if trace.turn is not None:
            new = trace.trace_id not in self.explicit
            self.explicit[trace.trace_id] = trace.turn
            return trace.turn, new
        known = self.turn_of(trace.trace_id)
        if known is not None:
            return known, False
        start = start_micros(trace)
        index = bisect.bisect_left(self.order, (start, trace.trace_id))
        self.order.insert(index, (start, trace.trace_id))
        self.starts[trace.trace_id] = start
        return index + 1, True

    def needed_by(self, traces: Sequence[Trace]) -> list[str]:
        """The trace ids whose stored rows and results the steps of `traces` (a batch's, of
        this conversation) will read: the stored turns they may move (numbered by a later
        start than the earliest new one, or misplaced already) and the batch's traces stored
        before (re-delivered), with the batch's own (whose stored turn row says which
        conversation has them). None when no step will read any."""
        new = [
            (start_micros(t), t.trace_id)
            for t in traces
            if t.turn is None and t.trace_id not in self.starts
        ]
        earliest = min(new, default=None)
        reread = [t.trace_id for t in traces if t.trace_id in self.stored_turns]
        moving = [
            trace_id
            for trace_id, number in self.stored_turns.items()
            if self.turn_of(trace_id) != number
            or (
                earliest is not None
                and trace_id in self.starts
                and (self.starts[trace_id], trace_id) > earliest
            )
        ]
        if not reread and not moving:
            return []
        return list(dict.fromkeys([*moving, *reread, *(t.trace_id for t in traces)]))

    def unplace(self, trace: Trace) -> None:
        """Undo a `place` whose turn was never recorded (its processing failed)."""
        if trace.turn is not None:
            self.explicit.pop(trace.trace_id, None)
            return
        start = self.starts.pop(trace.trace_id, None)
        if start is not None:
            self.order.remove((start, trace.trace_id))

    @classmethod
    def of(cls, conversation_id: str, agent: str, stored: StoredConversation) -> ConversationState:
        """The conversation in memory from what is stored. Traces whose turn row and results
        disagree, or whose number is not the one the rule gives (a renumbering cut short by two
        writers during a rebalance, or rows from before turn rows were keyed by trace), are
        rewritten by the conversation's next step."""
        conv = cls(agent)
        for row in stored.turns:
            if row.start_us is not None:
                conv.starts[row.trace_id] = row.start_us
            else:  # numbered by the producer (or stored before numbering by start)
                conv.explicit[row.trace_id] = row.turn
        conv.order = sorted((start, trace_id) for trace_id, start in conv.starts.items())
        for row in sorted(stored.turns, key=lambda r: r.turn):
            conv.evaluators[row.trace_id] = row.evaluator
            agree = stored.result_turns.get(row.trace_id, {row.turn}) == {row.turn}
            conv.stored_turns[row.trace_id] = row.turn if agree else DISAGREE
            if row.turn >= conv.last_turn:
                conv.last_memory = row.memory_tokens
        misplaced = sum(1 for t, n in conv.stored_turns.items() if conv.turn_of(t) != n)
        if misplaced:
            log.warning(
                "conversation turns to renumber on load",
                conversation_id=conversation_id,
                turns=misplaced,
            )
        conv.carried = stored.carried
        return conv
