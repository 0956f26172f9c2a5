"""Assembling the spans of one trace that arrive in several parts, until the trace is whole.

A trace is complete when its root span (a span without a parent) has ended and every span it
refers to as a parent is there. Exported spans have always ended, so a root in hand is an ended
root. A child ends before its parent, so an SDK exports it in the same batch or an earlier one;
but batches written to different partitions can be read out of order by a fraction of a second,
so a complete trace is released `settle_seconds` after it became complete (a child read just
after its root still joins). A trace that is not complete `max_seconds` after its first span is
released anyway, marked incomplete.

After its first release a trace is kept `grace_seconds` longer: spans that arrive then are added
and the trace is released again with the next revision (when it becomes complete, or when the
grace period ends), so a slow part re-maps and re-scores it. Spans of a trace forgotten after its
grace period are "late": the caller counts and drops them.

Event parts (log records that belong to the trace's spans, GenAI content sent as OTLP logs) are
held beside the span parts and handed out with them; they never make a trace complete or
incomplete. A first release that cannot be mapped yet (its content may still come as such
records) can be taken back with `hold`: the trace then waits, as if never released, for its next
part or until `max_seconds` after its first part.

Memory is bounded three ways: the count of unreleased (pending and held) traces, the count of
kept traces, and the bytes of all of them together, which include an estimate of each trace's
and span's bookkeeping besides the parts (`ENTRY_BYTES`, `SPAN_BYTES`). Kept traces have a count
of their own because at a steady rate they number rate x grace (10,000 at 330 traces/s and 30
s), which says nothing about traces waiting to be whole: sharing one count, a busy replica shed
kept traces all the time without being short of memory. Over a bound, kept traces are forgotten
first (over the kept count, only they), then the oldest pending (and held) ones are released
early (incomplete); every such shedding is reported through `on_shed`. A trace with more than
`max_spans` spans is rejected: what it held comes back from `take_rejected` (for a dead letter),
and its later parts are "rejected" too, so one huge trace costs neither memory nor CPU.

Parts are kept as the protobuf bytes they arrived as (far smaller than decoded spans) and only
decoded by whoever maps a release.

Not thread-safe; `now` is any monotonic clock in seconds. Pure: no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, NamedTuple, TypeVar

__all__ = ["ENTRY_BYTES", "SPAN_BYTES", "AddOutcome", "Release", "SpanShape", "TraceAssembler"]

T = TypeVar("T")
ENTRY_BYTES = 1536
"""Memory a trace's bookkeeping takes beyond its parts' bytes (its entry, sets, lists and index
slots; measured with tracemalloc at about 1.3-1.5 KB)."""
SPAN_BYTES = 160
"""Memory each span adds beyond its part's bytes (its id, its parent's, their set slots)."""
AddOutcome = Literal["held", "duplicate", "late", "rejected"]
ReleaseReason = Literal[
    "complete", "max_wait", "pending_limit", "grace_end", "flush", "too_many_spans"
]


class SpanShape(NamedTuple):
    """What completeness needs to know of a span."""

    span_id: bytes
    parent_span_id: bytes  # b"" for a root span
    start_time_unix_nano: int
    end_time_unix_nano: int


@dataclass(frozen=True, slots=True)
class Release(Generic[T]):
    """A trace handed out for mapping: all its parts so far.

    `tokens` are the inputs to finish once what is made of this release is safely stored (the
    parts that arrived since the previous release). `origin` is the token the trace's first span
    part came with, kept for dead-letter provenance. `start_ns` is the root span's start (the
    earliest span's start when the root is missing). `event_parts` are the log-record parts and
    `note` what the caller noted about the previous release (see `TraceAssembler.note`).
    """

    trace_id: str
    parts: tuple[bytes, ...]
    tokens: tuple[T, ...]
    origin: T
    revision: int
    complete: bool
    start_ns: int | None
    reason: ReleaseReason
    event_parts: tuple[bytes, ...] = ()
    note: Hashable = None


class _Entry(Generic[T]):
    __slots__ = (
        "dirty",
        "event_parts",
        "first_seen",
        "group",
        "held",
        "note",
        "origin",
        "origin_is_event",
        "parents",
        "part_hashes",
        "parts",
        "released_at",
        "revision",
        "root_ended",
        "root_start",
        "size",
        "span_ids",
        "start",
        "tokens",
        "trace_id",
    )

    def __init__(self, trace_id: str, origin: T, group: Hashable, now: float) -> None:
        self.trace_id = trace_id
        self.origin = origin
        self.group = group
        self.first_seen = now
        self.parts: list[bytes] = []
        self.part_hashes: set[int] = set()
        self.tokens: list[T] = []
        self.span_ids: set[bytes] = set()
        self.parents: set[bytes] = set()
        self.root_start: int | None = None
        self.start: int | None = None
        self.root_ended = False
        self.size = 0
        self.released_at: float | None = None
        self.revision = 0
        self.dirty = False
        self.event_parts: list[bytes] = []
        self.origin_is_event = False
        self.held = False
        self.note: Hashable = None

    def add_shapes(self, shapes: Iterable[SpanShape]) -> None:
        for span_id, parent, start, end in shapes:
            self.span_ids.add(span_id)
            if parent:
                self.parents.add(parent)
            else:
                self.root_ended = self.root_ended or end > 0
                if self.root_start is None or start < self.root_start:
                    self.root_start = start
            if start > 0 and (self.start is None or start < self.start):
                self.start = start

    @property
    def complete(self) -> bool:
        return self.root_ended and self.parents <= self.span_ids


class TraceAssembler(Generic[T]):
    def __init__(
        self,
        *,
        max_seconds: float,
        grace_seconds: float,
        max_traces: int,
        max_bytes: int,
        max_kept: int | None = None,
        settle_seconds: float = 0.0,
        on_shed: Callable[[str], None] | None = None,
        remember_forgotten: int = 100_000,
        max_spans: int | None = None,
    ) -> None:
        max_kept = max_traces if max_kept is None else max_kept
        if (
            min(max_seconds, grace_seconds, settle_seconds) < 0
            or min(max_traces, max_bytes, max_kept) < 1
        ):
            raise ValueError("bounds must be positive and times not negative")
        self.max_seconds = max_seconds
        self.settle_seconds = settle_seconds
        self.grace_seconds = grace_seconds
        self.max_traces = max_traces
        self.max_kept = max_kept
        self.max_bytes = max_bytes
        self._on_shed = on_shed
        self._entries: dict[str, _Entry[T]] = {}
        self._pending: OrderedDict[str, None] = OrderedDict()  # by first part, oldest first
        self._kept: OrderedDict[str, None] = OrderedDict()  # released, by first release
        self._ready: dict[str, float] = {}  # complete (since when) and due for a release
        self._shed: list[Release[T]] = []
        self._forgotten: OrderedDict[str, None] = OrderedDict()
        self._remember = remember_forgotten
        self.max_spans = max_spans
        self._too_big: OrderedDict[str, None] = OrderedDict()  # rejected for their span count
        self._rejected: list[Release[T]] = []
        # Releases taken back (see hold): trace id -> deadline, and a heap by deadline.
        self._held: dict[str, float] = {}
        self._held_order: list[tuple[float, int, str]] = []
        self._held_seq = itertools.count()
        self.bytes = 0

    @property
    def pending(self) -> int:
        """Traces not released yet (held ones included)."""
        return len(self._pending) + len(self._held)

    @property
    def kept(self) -> int:
        """Released traces kept for late spans (their grace period)."""
        return len(self._kept)

    def add(
        self,
        trace_id: str,
        part: bytes,
        shapes: Iterable[SpanShape],
        token: T,
        now: float,
        group: Hashable = None,
        *,
        events: bool = False,
    ) -> AddOutcome:
        """Take one part of a trace: spans with their shapes, or (`events`) log records that
        belong to its spans (no shapes).

        "held": the token comes back in a later Release. "duplicate": the part is already here
        and the trace was released, so there is nothing to do (finish the token now). "late":
        the trace was forgotten after its grace period (finish the token, count it).
        "rejected": the trace has more than `max_spans` spans; the token is not kept (dead-letter
        the part); what the trace held before is in `take_rejected`.
        """
        if trace_id in self._too_big:
            return "rejected"
        entry = self._entries.get(trace_id)
        shapes = tuple(shapes)
        digest = hash(part)
        new = entry is None or digest not in entry.part_hashes
        if new and not events and self._too_many_spans(entry, shapes):
            self._reject(trace_id, entry, now)
            return "rejected"
        if entry is None:
            if trace_id in self._forgotten:
                return "late"
            entry = self._entries[trace_id] = _Entry(trace_id, token, group, now)
            entry.origin_is_event = events
            entry.size = ENTRY_BYTES
            self.bytes += ENTRY_BYTES
            self._pending[trace_id] = None
        elif entry.origin_is_event and not events:
            entry.origin, entry.origin_is_event = token, False  # provenance: the spans' message
        if not new and entry.released_at is not None:
            return "duplicate"
        entry.tokens.append(token)
        if new:
            entry.part_hashes.add(digest)
            (entry.event_parts if events else entry.parts).append(part)
            cost = len(part) + SPAN_BYTES * len(shapes)
            entry.size += cost
            self.bytes += cost
            if not events:
                entry.add_shapes(shapes)
            if entry.released_at is not None:
                entry.dirty = True
        if entry.complete and (entry.released_at is None or entry.dirty):
            self._ready.setdefault(trace_id, now)
        else:
            self._ready.pop(trace_id, None)  # a new span names a parent not here yet
        self._enforce_bounds(now)
        return "held"

    def _too_many_spans(self, entry: _Entry[T] | None, shapes: tuple[SpanShape, ...]) -> bool:
        """Whether these spans would take the trace over `max_spans` (a span that came in an
        earlier part too counts once)."""
        if self.max_spans is None:
            return False
        held = len(entry.span_ids) if entry is not None else 0
        if held + len(shapes) <= self.max_spans:
            return False
        if entry is None:
            return True
        return len(entry.span_ids.union(shape.span_id for shape in shapes)) > self.max_spans

    def take_rejected(self) -> list[Release[T]]:
        """What the traces rejected for their span count held (each one's parts and tokens)."""
        rejected, self._rejected = self._rejected, []
        return rejected

    def _reject(self, trace_id: str, entry: _Entry[T] | None, now: float) -> None:
        self._too_big[trace_id] = None
        while len(self._too_big) > self._remember:
            self._too_big.popitem(last=False)
        if entry is None:
            return
        self._ready.pop(trace_id, None)
        if entry.tokens:
            self._rejected.append(self._release(entry, "too_many_spans", now))
        self._remove(entry)

    def pop_ready(self, now: float) -> list[Release[T]]:
        """Releases due at `now`: complete traces, traces waiting longer than `max_seconds`,
        traces shed for memory, and revisions of kept traces; forgets kept traces whose grace
        period ended (before this call: a trace released now stays until the next one, so the
        caller can still `hold` its release, even without a grace period)."""
        releases, self._shed = self._shed, []
        while self._kept:
            kept = self._entries[next(iter(self._kept))]
            assert kept.released_at is not None
            if now - kept.released_at < self.grace_seconds:
                break
            if kept.dirty:
                releases.append(self._release(kept, "grace_end", now))
            self._forget(kept)
        while self._ready:
            trace_id, since = next(iter(self._ready.items()))
            if now - since < self.settle_seconds:
                break
            del self._ready[trace_id]
            entry = self._entries.get(trace_id)
            if entry is not None and (entry.released_at is None or entry.dirty):
                releases.append(self._release(entry, "complete", now))
        while self._pending:
            trace_id = next(iter(self._pending))
            entry = self._entries[trace_id]
            if now - entry.first_seen < self.max_seconds:
                break
            releases.append(self._release(entry, "max_wait", now))
        while self._held_order and self._held_order[0][0] <= now:
            deadline, _, trace_id = heapq.heappop(self._held_order)
            if self._held.get(trace_id) == deadline:  # else released or dropped since
                releases.append(self._release(self._entries[trace_id], "max_wait", now))
        return releases

    def due_in(self, now: float) -> float | None:
        """Seconds until `pop_ready` next has a trace to release that is settled, has waited
        `max_seconds` or was held until now (0: already); None when none is waiting. Revisions
        due at the end of a grace period are not counted: they are rare, and never late by
        more than the caller's own ticking."""
        if self._shed:
            return 0.0
        deadlines = []
        if self._ready:
            deadlines.append(next(iter(self._ready.values())) + self.settle_seconds)
        if self._pending:
            deadlines.append(self._entries[next(iter(self._pending))].first_seen + self.max_seconds)
        if self._held_order:
            deadlines.append(self._held_order[0][0])
        return max(0.0, min(deadlines) - now) if deadlines else None

    def flush(self, now: float) -> list[Release[T]]:
        """Release everything that has news now and forget it all (the end of a replay)."""
        releases, self._shed = self._shed, []
        self._ready = {}
        for entry in list(self._entries.values()):
            if entry.released_at is None or entry.dirty:
                releases.append(self._release(entry, "flush", now))
            self._forget(entry)
        return releases

    def hold(self, release: Release[T], now: float) -> bool:
        """Take back a first release that cannot be used yet (its content may still come, as
        log records): the trace waits again, as if never released, for its next part or until
        `max_seconds` after its first part, when it is released for good; the release's tokens
        come back with the next release. False, and nothing changes, when that time has
        passed, the release was not the trace's first or was forced (memory bound, flush), or
        the trace is no longer here."""
        entry = self._entries.get(release.trace_id)
        deadline = (entry.first_seen if entry is not None else now) + self.max_seconds
        if (
            entry is None
            or release.revision != 1
            or entry.revision != 1
            or release.reason in ("pending_limit", "flush")
            or now >= deadline
        ):
            return False
        entry.revision = 0
        entry.tokens[:0] = release.tokens
        entry.released_at = None
        entry.dirty = False
        self._kept.pop(entry.trace_id, None)
        entry.held = True
        self._held[entry.trace_id] = deadline
        heapq.heappush(self._held_order, (deadline, next(self._held_seq), entry.trace_id))
        return True

    def note(self, trace_id: str, value: Hashable) -> None:
        """Remember `value` with a released trace; its next release carries it as `note` (the
        caller can tell a revision that changes nothing from one that does)."""
        entry = self._entries.get(trace_id)
        if entry is not None:
            entry.note = value

    def drop_pending(self, keep: set[Hashable]) -> int:
        """Forget the unreleased traces of every group not in `keep` (partitions that went to
        another replica): their unfinished parts are read again by the next owner. Released
        traces stay for the rest of their grace period. Returns how many were dropped."""
        dropped = [
            e for e in self._entries.values() if e.released_at is None and e.group not in keep
        ]
        for entry in dropped:
            self._ready.pop(entry.trace_id, None)
            self._remove(entry)
        return len(dropped)

    def _release(self, entry: _Entry[T], reason: ReleaseReason, now: float) -> Release[T]:
        entry.revision += 1
        tokens, entry.tokens = tuple(entry.tokens), []
        entry.dirty = False
        self._ready.pop(entry.trace_id, None)
        if entry.held:
            entry.held = False
            self._held.pop(entry.trace_id, None)
        if entry.released_at is None:
            self._pending.pop(entry.trace_id, None)
            entry.released_at = now
            self._kept[entry.trace_id] = None
        release = Release(
            trace_id=entry.trace_id,
            parts=tuple(entry.parts),
            tokens=tokens,
            origin=entry.origin,
            revision=entry.revision,
            complete=entry.complete,
            start_ns=entry.root_start if entry.root_start is not None else entry.start,
            reason=reason,
            event_parts=tuple(entry.event_parts),
            note=entry.note,
        )
        # Without a grace period the trace is forgotten by the next pop_ready (not here: the
        # caller may still `hold` this release).
        return release

    def _remove(self, entry: _Entry[T]) -> None:
        if self._entries.pop(entry.trace_id, None) is None:
            return  # already gone (forgotten at release when there is no grace period)
        self._pending.pop(entry.trace_id, None)
        self._kept.pop(entry.trace_id, None)
        self._held.pop(entry.trace_id, None)
        entry.held = False
        self.bytes -= entry.size

    def _forget(self, entry: _Entry[T]) -> None:
        self._remove(entry)
        self._forgotten[entry.trace_id] = None
        while len(self._forgotten) > self._remember:
            self._forgotten.popitem(last=False)

    def _enforce_bounds(self, now: float) -> None:
        while True:
            over_bytes = self.bytes > self.max_bytes
            if self._kept and (over_bytes or len(self._kept) > self.max_kept):
                entry = self._entries[next(iter(self._kept))]
                if entry.dirty:
                    self._shed.append(self._release(entry, "grace_end", now))
                self._forget(entry)
                self._report("grace_limit")
            elif (over_bytes or self.pending > self.max_traces) and self.pending:
                entry = self._entries[self._oldest_unreleased()]
                self._shed.append(self._release(entry, "pending_limit", now))
                self._forget(entry)
                self._report("pending_limit")
            else:
                break

    def _oldest_unreleased(self) -> str:
        """The pending or held trace seen first."""
        candidates = [next(iter(self._pending))] if self._pending else []
        held = self._first_held()
        if held is not None:
            candidates.append(held)
        return min(candidates, key=lambda trace_id: self._entries[trace_id].first_seen)

    def _first_held(self) -> str | None:
        """The held trace with the earliest deadline, which is the one seen first."""
        while self._held_order:
            deadline, _, trace_id = self._held_order[0]
            if self._held.get(trace_id) == deadline:
                return trace_id
            heapq.heappop(self._held_order)  # released or dropped since it was held
        return None

    def _report(self, reason: str) -> None:
        if self._on_shed is not None:
            self._on_shed(reason)
