"""Producing to the daemon's own topics, returning only once the broker has acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

log = structlog.get_logger(__name__)

RECORD_OVERHEAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)


class TopicWriter:
    """An acks=all producer whose `send_all` retries until every record is acknowledged.

    The caller's input offsets stay uncommitted meanwhile, so a crash re-reads the input instead
    of losing what was not written (at-least-once; consumers of these topics are idempotent).
    """

    def __init__(self, producer_kwargs: dict[str, Any], max_record_bytes: int) -> None:
        self._producer = AIOKafkaProducer(
            acks="all",
            linger_ms=5,
            max_request_size=max_record_bytes + RECORD_OVERHEAD_BYTES,
            **producer_kwargs,
        )
        self._closed = False

    async def start(self) -> None:
        try:
            await self._producer.start()
        except BaseException:
            await self._producer.stop()
            raise

    async def stop(self) -> None:
        self._closed = True
        await self._producer.stop()

    async def send_all(self, records: Sequence[OutRecord]) -> None:
        pending = list(records)
        delay = 0.2
        while pending:
            failed: list[OutRecord] = []
            sent = []
            for record in pending:
                try:
                    future = await self._producer.send(
                        record.topic, value=record.value, key=record.key, headers=record.headers
                    )
                except KafkaError:
                    failed.append(record)
                    continue
                sent.append((record, future))
            for record, future in sent:
                try:
                    await future
                except KafkaError:
                    failed.append(record)
            if failed:
                if self._closed:
                    raise KafkaError("producer closed with records unacknowledged")
                log.warning(
                    "produce to an internal topic failed; retrying",
                    records=len(failed),
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            pending = failed
