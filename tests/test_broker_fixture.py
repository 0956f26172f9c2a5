"""The real Kafka test broker works: topics, produce/consume, and data surviving a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from tests.support.kafka_broker import BrokerUnavailable, KafkaBroker, find_kafka_libs
from tests.support.services import service_unavailable

pytestmark = pytest.mark.kafka

TOPIC = "broker-fixture-check"
GROUP = "broker-fixture-group"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    try:
        kafka = KafkaBroker(tmp_path / "kafka", libs_dir=find_kafka_libs())
        kafka.start()
    except BrokerUnavailable as exc:
        service_unavailable(str(exc))
    try:
        yield kafka
    finally:
        kafka.stop()


async def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(TOPIC, value, key=b"k")
    finally:
        await producer.stop()


async def _read_all(bootstrap: str, expected: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``expected`` records of partition 0, read without a group."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        records: list[tuple[int, bytes]] = []
        async with asyncio.timeout(30):
            while len(records) < expected:
                batch = await consumer.getmany(partition, timeout_ms=1000)
                for record in batch.get(partition, []):
                    assert record.value is not None
                    records.append((record.offset, record.value))
        return records
    finally:
        await consumer.stop()


async def _consume_in_group(bootstrap: str, expected: int) -> list[bytes]:
    """Read ``expected`` records as GROUP, from its committed offset, and commit them."""
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        values: list[bytes] = []
        async with asyncio.timeout(60):
            while len(values) < expected:
                batch = await consumer.getmany(timeout_ms=1000)
                values += [r.value for records in batch.values() for r in records if r.value]
        await consumer.commit()
        return values
    finally:
        await consumer.stop()


async def test_broker_keeps_messages_and_offsets_across_restart(broker: KafkaBroker) -> None:
    print(f"broker start took {broker.last_start_seconds:.2f}s")
    await asyncio.to_thread(broker.create_topic, TOPIC)
    assert TOPIC in await asyncio.to_thread(broker.list_topics)

    sent = [b"trace-1", b"trace-2", b"trace-3"]
    await _produce(broker.bootstrap, sent)
    before = await _read_all(broker.bootstrap, len(sent))
    assert before == [(0, b"trace-1"), (1, b"trace-2"), (2, b"trace-3")]
    assert await _consume_in_group(broker.bootstrap, len(sent)) == sent

    old_pid = broker.pid
    await asyncio.to_thread(broker.restart)
    assert broker.pid is not None and broker.pid != old_pid
    print(f"broker restart took {broker.last_start_seconds:.2f}s")

    # Same port, same data: the records are still there at the same offsets ...
    assert await _read_all(broker.bootstrap, len(sent)) == before
    # ... and so is the group's committed offset: it only gets what came after the restart.
    await _produce(broker.bootstrap, [b"trace-4"])
    assert await _consume_in_group(broker.bootstrap, 1) == [b"trace-4"]


def test_broker_recovers_after_kill(broker: KafkaBroker) -> None:
    """A SIGKILLed broker (no clean shutdown) comes back with its data on the same port."""
    broker.create_topic(TOPIC, partitions=2)
    asyncio.run(_produce(broker.bootstrap, [b"before-crash"]))
    port = broker.port

    broker.kill()
    assert not broker.running
    broker.start()
    print(f"broker start after kill took {broker.last_start_seconds:.2f}s")

    assert broker.port == port
    assert TOPIC in broker.list_topics()
    # The record went to one of the two partitions; both must be readable again.
    found = asyncio.run(_read_partitions(broker.bootstrap))
    assert found == [b"before-crash"]


async def _read_partitions(bootstrap: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(TOPIC, p) for p in (0, 1)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)

        async def behind() -> bool:
            positions = [await consumer.position(tp) for tp in partitions]
            return any(pos < end[tp] for pos, tp in zip(positions, partitions, strict=True))

        values: list[bytes] = []
        async with asyncio.timeout(30):
            while await behind():
                batch = await consumer.getmany(*partitions, timeout_ms=1000)
                values += [r.value for records in batch.values() for r in records if r.value]
        return values
    finally:
        await consumer.stop()


def test_sasl_ssl_listener_authenticates_with_scram(tmp_path: Path) -> None:
    """security="sasl_ssl": SCRAM-SHA-256 over TLS (throwaway CA) works; a wrong password fails."""
    try:
        kafka = KafkaBroker(tmp_path / "kafka", libs_dir=find_kafka_libs(), security="sasl_ssl")
        kafka.start()
    except BrokerUnavailable as exc:
        service_unavailable(str(exc))
    try:
        kafka.create_topic(TOPIC)
        secure = kafka.sasl_ssl_client_kwargs()
        assert secure["bootstrap_servers"] != kafka.bootstrap
        assert kafka.ca_file.is_file()

        async def round_trip() -> bytes | None:
            producer = AIOKafkaProducer(**secure)
            await producer.start()
            try:
                await producer.send_and_wait(TOPIC, b"over-tls")
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(TOPIC, auto_offset_reset="earliest", **secure)
            await consumer.start()
            try:
                record = await asyncio.wait_for(consumer.getone(), 30)
                value: bytes | None = record.value
                return value
            finally:
                await consumer.stop()

        assert asyncio.run(round_trip()) == b"over-tls"

        async def wrong_password() -> None:
            producer = AIOKafkaProducer(**{**secure, "sasl_plain_password": "wrong"})
            try:
                await producer.start()
            finally:
                await producer.stop()

        with pytest.raises(KafkaError):
            asyncio.run(wrong_password())
    finally:
        kafka.stop()
