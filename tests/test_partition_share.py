"""A replica's share of its input: the partitions of the scoring group's topics it holds."""

from __future__ import annotations

from aiokafka.structs import TopicPartition

from monitor.sources.kafka import partition_share


def test_the_share_counts_the_partitions_of_every_input_topic() -> None:
    """Two of a 3-partition topic and 6 of a 12-partition one: 8 of 15, whatever the topics
    carry; the other member of the group holds the other 7."""
    partitions = {"in": range(3), "traces": range(12)}
    mine = {TopicPartition("in", 0), TopicPartition("in", 2)}
    mine |= {TopicPartition("traces", p) for p in range(0, 12, 2)}
    theirs = {TopicPartition(t, p) for t, ps in partitions.items() for p in ps} - mine
    assert partition_share(mine, partitions) == 8 / 15
    assert partition_share(theirs, partitions) == 7 / 15


def test_no_partition_held_is_no_share() -> None:
    assert partition_share(set(), {"in": range(3)}) == 0.0
    assert partition_share({TopicPartition("other", 0)}, {"in": range(3)}) == 0.0
    assert partition_share(set(), {}) == 0.0


def test_a_partition_held_before_the_topic_is_known_still_counts() -> None:
    """Metadata not yet fetched for a topic: what is held of it is all that is known of it."""
    assert partition_share({TopicPartition("in", 0)}, {"in": ()}) == 1.0
    assert partition_share({TopicPartition("in", 4)}, {"in": range(3)}) == 1 / 4
