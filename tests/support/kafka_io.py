"""Producing to and reading from the test broker with aiokafka's own clients."""

from __future__ import annotations

import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord, TopicPartition


async def create_topics(
    bootstrap: str, names: list[str], partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(
                    name, num_partitions=partitions, replication_factor=1, topic_configs=configs
                )
                for name in names
            ]
        )
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(names)
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    *,
    keys: list[bytes | None] | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    compression: str | None = None,
    partition: int | None = None,
    partitions: list[int] | None = None,
) -> None:
    """`partition` for every message, or `partitions` one per message (else by key)."""
    largest = max((len(v) for v in values), default=0)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=compression,
        linger_ms=5,
        acks="all",
        max_request_size=max(1_048_576, largest + 65_536),
    )
    await producer.start()
    try:
        futures = []
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            chosen = partitions[i] if partitions is not None else partition
            futures.append(
                await producer.send(topic, value=value, key=key, headers=headers, partition=chosen)
            )
        for future in futures:
            await future
    finally:
        await producer.stop()


async def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def read_all(
    bootstrap: str, topic: str, expected: int, timeout: float = 30.0
) -> list[ConsumerRecord[Any, Any]]:
    """Read a topic from the beginning until `expected` records arrived or the timeout passed."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[ConsumerRecord[Any, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for batch in batches.values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records
