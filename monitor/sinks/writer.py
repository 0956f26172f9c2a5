"""Producing to the daemon's own topics, returning only once the broker has acknowledged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from monitor.retry import PRODUCE_BACKOFF, RetryMetrics, RetryPolicy

RECORD_OVERHEAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)


class TopicWriter:
    """An acks=all producer whose `send_all` retries (unbounded, jittered) until every record is
    acknowledged; records the broker took are not sent again.

    The caller's input offsets stay uncommitted meanwhile, so a crash re-reads the input instead
    of losing what was not written (at-least-once; consumers of these topics are idempotent).
    """

    def __init__(
        self,
        producer_kwargs: dict[str, Any],
        max_record_bytes: int,
        retry_metrics: RetryMetrics | None = None,
    ) -> None:
        self._producer = AIOKafkaProducer(
            acks="all",
            linger_ms=5,
            max_request_size=max_record_bytes + RECORD_OVERHEAD_BYTES,
            **producer_kwargs,
        )
        self._closed = False
        self._retry = RetryPolicy(
            "internal_topics",
            PRODUCE_BACKOFF,
            retry_on=lambda exc: isinstance(exc, _Unacknowledged),
            metrics=retry_metrics,
        )

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

        async def send_pending() -> None:
            nonlocal pending
            pending = await self._send_round(pending)
            if pending:
                if self._closed:
                    raise KafkaError("producer closed with records unacknowledged")
                raise _Unacknowledged(len(pending))

        if pending:
            await self._retry.call(send_pending)

    async def _send_round(self, records: list[OutRecord]) -> list[OutRecord]:
        """Send every record and wait for the broker; the records it did not acknowledge."""
        failed: list[OutRecord] = []
        sent = []
        for record in records:
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
        return failed


class _Unacknowledged(Exception):
    def __init__(self, records: int) -> None:
        super().__init__(f"{records} records not acknowledged")
