"""Dead letters: a message that cannot be processed is kept, with why, and blocks nothing."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import structlog
from aiokafka.errors import KafkaError

from monitor.messages import RawMessage
from monitor.retry import FailingCalls, RetryMetrics
from monitor.sinks.produce import TopicProducer, classify, fit_value, record_size

log = structlog.get_logger(__name__)

HEADER_PREFIX = "ragmon."
ORIGINAL_SIZE_HEADER = HEADER_PREFIX + "original.size"
TRUNCATED_HEADER = HEADER_PREFIX + "value.truncated"
MAX_HEADER_DETAIL_CHARS = 1000


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
        "error.message": detail[:MAX_HEADER_DETAIL_CHARS],
    }
    kept = [(k, v) for k, v in msg.headers if not k.startswith(HEADER_PREFIX)]
    return kept + [(HEADER_PREFIX + k, v.encode("utf-8")) for k, v in ours.items()]


@dataclass(frozen=True, slots=True)
class _Letter:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]

    def within(self, limit: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
        """Key, value and headers of the letter cut to at most `limit` bytes: the head of the
        value, marked truncated; when not even that fits, without the original headers, then
        without the key. Raises _Unfit when nothing fits."""
        if record_size(self.key, self.value, self.headers) <= limit:
            return self.key, self.value, self.headers
        marked = [*self.headers, (TRUNCATED_HEADER, b"true")]
        ours = [(k, v) for k, v in marked if k.startswith(HEADER_PREFIX)]
        for key, headers in ((self.key, marked), (self.key, ours), (None, ours)):
            if record_size(key, b"", headers) <= limit:
                return key, fit_value(key, self.value or b"", headers, limit), headers
        raise _Unfit(limit)


class _Unfit(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"not even the dead letter's own headers fit in {limit} bytes")


class KafkaDeadLetters(TopicProducer):
    """Produces dead letters to a topic with the original key, value and headers.

    The producer is sized from `kafka.max_message_bytes` (:func:`producer_limits`). A letter
    that does not fit, in the producer or in the topic (the broker refuses it), is cut to what
    fits: the head of the value, with the header ``ragmon.value.truncated``; the header
    ``ragmon.original.size`` always gives the full size. A smaller size the topic takes is
    remembered for the next letters.

    `send` retries transient failures (unbounded, jittered) until the broker acknowledges or the
    producer is stopped: the caller's offset stays uncommitted meanwhile, so a crash re-reads the
    message instead of losing it. A failure that cannot pass by retrying (authorization, an
    invalid topic, ...) raises :class:`ProduceRejected` at once.
    """

    def __init__(
        self,
        topic: str,
        producer_kwargs: dict[str, Any],
        max_message_bytes: int,
        retry_metrics: RetryMetrics | None = None,
        failing: FailingCalls | None = None,
    ) -> None:
        super().__init__(
            topic,
            "kafka.dlq_topic",
            "dead_letters",
            producer_kwargs,
            max_message_bytes,
            retry_metrics,
            failing,
        )
        self._limit = self.max_request_size
        self._max_message_bytes = max_message_bytes

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
        headers = dead_letter_headers(msg, reason, error_class, detail)
        headers.append((ORIGINAL_SIZE_HEADER, str(size).encode()))
        letter = _Letter(msg.key, payload, headers)
        await self.write(lambda: self._produce(letter), topic=self.topic)

    async def _produce(self, letter: _Letter) -> None:
        """One attempt: cut smaller while the record is too large; raises what else fails."""
        while True:
            try:
                key, value, headers = letter.within(self._limit)
            except _Unfit as exc:
                raise self.rejected(exc) from None
            try:
                await self.producer.send_and_wait(self.topic, value=value, key=key, headers=headers)
                return
            except KafkaError as exc:
                kind = classify(exc)
                if kind == "fatal":
                    raise self.rejected(exc) from exc
                if kind == "transient":
                    raise
                self._limit = self._smaller(self._limit, exc)

    def _smaller(self, limit: int, exc: KafkaError) -> int:
        """The next size to try once the topic refused a record of up to `limit` bytes."""
        smaller = self._max_message_bytes if limit > self._max_message_bytes else limit // 2
        log.warning(
            "the dead-letter topic refused a letter as too large; cutting letters smaller",
            topic=self.topic,
            error=type(exc).__name__,
            limit_bytes=smaller,
        )
        return smaller


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
