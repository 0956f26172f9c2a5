"""The offset tracker never offers a commit past an unfinished message."""

from __future__ import annotations

from aiokafka.structs import TopicPartition

from monitor.sources.offsets import OffsetTracker, ReplayFilter, commit_metadata

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


def test_commit_metadata_lists_the_unfinished_offsets_beyond_the_commit() -> None:
    tracker = OffsetTracker()
    for offset in range(10, 16):
        tracker.begin(TP, offset)
    for offset in (11, 12, 14):  # 10, 13 and 15 are spans of traces still assembling
        tracker.finish(TP, offset)
    ((offset, metadata),) = tracker.to_commit_with_metadata().values()
    assert offset == 10 and metadata == "unfinished:6:0,3,5"
    tracker.mark_committed({TP: offset}, {TP: metadata})
    assert tracker.to_commit_with_metadata() == {}, "nothing moved"
    tracker.finish(TP, 13)
    assert tracker.to_commit_with_metadata() == {TP: (10, "unfinished:6:0,5")}

    replay = ReplayFilter()  # the partition's next owner
    replay.load(TP, 10, "unfinished:6:0,5")
    assert [o for o in range(10, 18) if replay.done(TP, o)] == [11, 12, 13, 14]
    assert not replay.done(TP, 12), "past the range the filter is gone"


def test_the_next_owner_knows_which_offsets_it_reads_again() -> None:
    """Offsets from the commit to what the previous owner had read are read again (the
    unfinished ones among them are not skipped); later ones are new, and so is everything
    when the commit carried no metadata or the partition was forgotten."""
    replay = ReplayFilter()
    replay.load(TP, 10, "unfinished:6:0,5")
    assert [o for o in range(8, 18) if replay.read_before(TP, o)] == list(range(10, 16))
    for offset in range(10, 18):
        replay.done(TP, offset)  # the skipping range is used up, what was read is still known
    assert replay.read_before(TP, 15) and not replay.read_before(TP, 16)
    replay.forget([TP])
    assert not replay.read_before(TP, 10)
    replay.load(TP, 10, "")
    assert not replay.read_before(TP, 10)


def test_commit_metadata_that_does_not_fit_or_parse_means_read_everything_again() -> None:
    assert commit_metadata(0, 10_000, range(0, 10_000, 2)) == ""
    assert commit_metadata(5, 5, []) == ""
    replay = ReplayFilter()
    replay.load(TP, 0, "written by someone else")
    replay.load(TP, 0, "unfinished:zz:1")
    assert not replay.done(TP, 1)
