"""Dead letters: a message that cannot be processed is kept, with why, and blocks nothing."""

from __future__ import annotations

import json
import sys
from typing import Any, Protocol, TextIO

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from monitor.messages import RawMessage
from monitor.retry import PRODUCE_BACKOFF, RetryMetrics, RetryPolicy
from monitor.sinks.topics import require_topic

HEADER_PREFIX = "ragmon."


def dead_letter_headers(
    msg: RawMessage, reason: str, error_class: str, detail: str
) -> list[tuple[str, bytes]]:
    """The original headers, then where the message came from and what was wrong with it."""
    ours = {
        "original.topic": msg.topic,
        "original.partition": str(msg.partition),
        "original.offset": str(msg.offset),
        "error.reason": reason,
        "error.class": error_class,
        "error.message": detail,
    }
    kept = [(k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)]
    return kept + [(HEADER_PREFIX + k, v.encode("utf-8")) for k, v in ours.items()]


class DeadLetterSink(Protocol):
    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        """Store the message (or `value` in its place) durably; return only once it is stored."""
        ...


class KafkaDeadLetters:
    """Produces dead letters to a topic with the original key, value and headers.

    `send` retries (unbounded, jittered) until the broker acknowledges or the producer is
    stopped: the caller's offset stays uncommitted meanwhile, so a crash re-reads the message
    instead of losing it.
    """

    def __init__(
        self,
        topic: str,
        producer_kwargs: dict[str, Any],
        retry_metrics: RetryMetrics | None = None,
    ) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(acks="all", **producer_kwargs)
        self._closed = False
        self._retry = RetryPolicy(
            "dead_letters",
            PRODUCE_BACKOFF,
            retry_on=self._retryable,
            metrics=retry_metrics,
        )

    async def start(self) -> None:
        try:
            await self._producer.start()
            await require_topic(self._producer, self.topic, "kafka.dlq_topic")
        except BaseException:
            await self._producer.stop()  # nothing left open behind a failed start
            raise

    async def stop(self) -> None:
        self._closed = True
        await self._producer.stop()

    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        headers = dead_letter_headers(msg, reason, error_class, detail)
        payload = msg.value if value is None else value

        async def produce() -> None:
            await self._producer.send_and_wait(
                self.topic, value=payload, key=msg.key, headers=headers
            )

        await self._retry.call(produce)

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, KafkaError) and not self._closed


class StreamDeadLetters:
    """Dead letters of the file source: one JSON line each (to stderr or a file).

    The value is cut to its first `max_value_chars` characters (`value_truncated` and
    `value_bytes` then say so): a 50 MB line is reported, not copied.
    """

    def __init__(self, stream: TextIO | None = None, max_value_chars: int = 500) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._max_value_chars = max_value_chars

    async def send(
        self,
        msg: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        payload = msg.value if value is None else value
        size = msg.value_size if value is None else len(value)
        shown = None
        truncated = False
        if payload is not None:
            # Decode no more than can be shown (4 bytes per character at most).
            shown = payload[: self._max_value_chars * 4].decode("utf-8", "replace")
            truncated = (
                len(shown) > self._max_value_chars
                or len(payload) > self._max_value_chars * 4
                or size > len(payload)
            )
            shown = shown[: self._max_value_chars]
        record: dict[str, object] = {
            "dead_letter": True,
            "source": msg.topic,
            "line": msg.offset,
            "reason": reason,
            "error_class": error_class,
            "error": detail,
            "value": shown,
        }
        if truncated:
            record["value_truncated"] = True
            record["value_bytes"] = size
        self._stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._stream.flush()
