"""The offset tracker never offers a commit past an unfinished message."""

from __future__ import annotations

from aiokafka.structs import TopicPartition

from monitor.source.offsets import OffsetTracker

TP = TopicPartition("in", 0)


def test_commit_stops_at_the_lowest_unfinished_offset() -> None:
    tracker = OffsetTracker()
    for offset in range(5):
        tracker.begin(TP, offset)
    tracker.finish(TP, 0)
    tracker.finish(TP, 2)
    tracker.finish(TP, 3)
    assert tracker.to_commit() == {TP: 1}, "offset 1 is unfinished, so nothing past it commits"
    tracker.finish(TP, 1)
    assert tracker.to_commit() == {TP: 4}
    tracker.finish(TP, 4)
    assert tracker.to_commit() == {TP: 5}, "all finished: commit one past the last read"


def test_a_message_with_several_units_finishes_only_when_all_are_done() -> None:
    tracker = OffsetTracker()
    tracker.begin(TP, 7)
    tracker.add_units(TP, 7, 2)
    tracker.finish(TP, 7)
    tracker.finish(TP, 7)
    assert tracker.to_commit() == {TP: 7}
    tracker.finish(TP, 7)
    assert tracker.to_commit() == {TP: 8}


def test_nothing_to_commit_twice_and_revoked_partitions_are_forgotten() -> None:
    tracker = OffsetTracker()
    tracker.begin(TP, 0)
    tracker.finish(TP, 0)
    tracker.mark_committed(tracker.to_commit())
    assert tracker.to_commit() == {}, "an unchanged offset is not committed again"
    tracker.begin(TP, 1)
    tracker.forget({TP})
    tracker.finish(TP, 1)  # a late finish of a revoked partition is ignored
    assert tracker.to_commit() == {}
    assert tracker.pending() == 0


def test_partitions_are_independent() -> None:
    other = TopicPartition("in", 1)
    tracker = OffsetTracker()
    tracker.begin(TP, 0)
    tracker.begin(other, 10)
    tracker.finish(other, 10)
    assert tracker.to_commit() == {TP: 0, other: 11}
    assert tracker.pending(TP) == 1 and tracker.pending(other) == 0
