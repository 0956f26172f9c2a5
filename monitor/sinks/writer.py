"""Producing to the daemon's own topics, returning only once the broker has acknowledged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from monitor.retry import PRODUCE_BACKOFF, FailingCalls, RetryMetrics, RetryPolicy
from monitor.sinks.produce import ProduceRejected, classify, producer_limits


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Refused:
    """A record the topic will never take as it is (too large), with the broker's error."""

    record: OutRecord
    error: KafkaError


class TopicWriter:
    """An acks=all producer sized from `kafka.max_message_bytes` whose `send_all` retries
    (unbounded, jittered) until every record is acknowledged or refused for good; records the
    broker took are not sent again.

    A record too large for its topic is not retried: `send_all` hands it back (the caller
    dead-letters what it was made of). A failure no retry can cure (authorization, an invalid
    topic, ...) raises :class:`ProduceRejected`, naming the setting of the topic (`settings`).
    The caller's input offsets stay uncommitted meanwhile, so a crash re-reads the input instead
    of losing what was not written (at-least-once; consumers of these topics are idempotent).
    """

    def __init__(
        self,
        producer_kwargs: dict[str, Any],
        max_record_bytes: int,
        retry_metrics: RetryMetrics | None = None,
        *,
        settings: Mapping[str, str] | None = None,
        failing: FailingCalls | None = None,
    ) -> None:
        self._producer = AIOKafkaProducer(
            acks="all", linger_ms=5, **producer_limits(max_record_bytes), **producer_kwargs
        )
        self._settings = dict(settings or {})
        self._closed = False
        self._last_error: KafkaError | None = None
        self._retry = RetryPolicy(
            "internal_topics",
            PRODUCE_BACKOFF,
            retry_on=lambda exc: isinstance(exc, _Unacknowledged),
            metrics=retry_metrics,
            failing=failing,
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

    async def __aenter__(self) -> TopicWriter:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def send_all(self, records: Sequence[OutRecord]) -> list[Refused]:
        """Write every record; returns those refused as too large (the rest are acknowledged)."""
        pending = list(records)
        refused: list[Refused] = []

        async def send_pending() -> None:
            nonlocal pending
            pending = await self._send_round(pending, refused)
            if pending:
                if self._closed:
                    raise KafkaError("producer closed with records unacknowledged")
                raise _Unacknowledged(pending, self._last_error)

        if pending:
            await self._retry.call(send_pending)
        return refused

    async def _send_round(
        self, records: list[OutRecord], refused: list[Refused]
    ) -> list[OutRecord]:
        """Send every record and wait for the broker; the records to send again."""
        failed: list[OutRecord] = []
        sent = []
        for record in records:
            try:
                future = await self._producer.send(
                    record.topic, value=record.value, key=record.key, headers=record.headers
                )
            except KafkaError as exc:
                self._sort(record, exc, failed, refused)
                continue
            sent.append((record, future))
        for record, future in sent:
            try:
                await future
            except KafkaError as exc:
                self._sort(record, exc, failed, refused)
        return failed

    def _sort(
        self,
        record: OutRecord,
        exc: KafkaError,
        failed: list[OutRecord],
        refused: list[Refused],
    ) -> None:
        kind = classify(exc)
        if kind == "fatal":
            setting = self._settings.get(record.topic, "an internal topic")
            raise ProduceRejected(record.topic, setting, exc) from exc
        if kind == "too_large":
            refused.append(Refused(record, exc))
        else:
            failed.append(record)
            self._last_error = exc


class _Unacknowledged(Exception):
    def __init__(self, records: list[OutRecord], last: KafkaError | None) -> None:
        cause = f" ({type(last).__name__}: {last})" if last is not None else ""
        super().__init__(f"{len(records)} records not acknowledged{cause}")
