"""What can go wrong when the daemon produces a record, and what it does about each.

Every producer of the daemon (dead letters, the OTLP stage's internal topics, results) is sized
from the settings (:func:`producer_limits`) and sorts a failed send into one of three kinds
(:func:`classify`):

- ``too_large``: the record can never be written as it is, however often it is sent again
  (aiokafka's own check against ``max_request_size``, or the broker's ``max.message.bytes`` of
  the topic). The writer makes it smaller (:func:`fit_value`) or hands it back to its caller.
- ``fatal``: the cluster refuses the request itself (authorization, an invalid topic, an
  unsupported version, a bad configuration): sending it again cannot succeed until someone
  changes the cluster or the settings. :class:`ProduceRejected` stops the daemon, naming the
  topic and the setting, before any offset passes the message (like a Kafka Streams
  application whose production exception handler fails).
- ``transient``: anything else (the broker away, a leader moving, a timeout, an error this
  module does not know): retried until the broker acknowledges, while readiness reports a
  write that has been failing for too long.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Self

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    ClusterAuthorizationFailedError,
    CorruptRecordException,
    IllegalSaslStateError,
    IncompatibleBrokerVersion,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTimestampError,
    InvalidTopicError,
    KafkaConfigurationError,
    KafkaError,
    MessageSizeTooLargeError,
    PolicyViolationError,
    ProducerFenced,
    RecordListTooLargeError,
    RecordTooLargeError,
    SaslAuthenticationFailed,
    SecurityDisabled,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnrecognizedBrokerVersion,
    UnsupportedCodecError,
    UnsupportedForMessageFormatError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import size_of_varint

from monitor.faults import ServiceFault
from monitor.retry import PRODUCE_BACKOFF, FailingCalls, Operation, RetryMetrics, RetryPolicy
from monitor.sinks.topics import require_topic

__all__ = [
    "BATCH_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "FailureKind",
    "ProduceRejected",
    "TopicProducer",
    "classify",
    "fit_value",
    "producer_limits",
    "record_size",
]

RECORD_OVERHEAD_BYTES = 64 * 1024
"""Room above `kafka.max_message_bytes` for what the daemon adds to a record (headers, the
re-encoding of a part) in its producers' `max_request_size` and its topics' `max.message.bytes`."""

BATCH_BYTES = 256 * 1024
"""The most a producer gathers for one partition in a batch (when `kafka.max_message_bytes` is
not smaller). aiokafka keeps a single open batch per partition, and a send that finds it full
waits until the batch is on its way to the broker: at its default (16 KiB, about six results)
the results producer held up the scoring of every few traces (bench/producer_batch.py)."""

FailureKind = Literal["transient", "too_large", "fatal"]

TOO_LARGE: tuple[type[KafkaError], ...] = (
    MessageSizeTooLargeError,  # the broker: over the topic's max.message.bytes
    RecordListTooLargeError,  # the broker: a batch over the segment size
    RecordTooLargeError,  # aiokafka: over the batch size
)
FATAL: tuple[type[KafkaError], ...] = (
    TopicAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    SaslAuthenticationFailed,
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
    SecurityDisabled,
    InvalidTopicError,
    InvalidRequiredAcksError,
    InvalidRequestError,
    InvalidTimestampError,
    CorruptRecordException,
    PolicyViolationError,
    UnsupportedVersionError,
    UnsupportedForMessageFormatError,
    IncompatibleBrokerVersion,
    UnrecognizedBrokerVersion,
    UnsupportedCodecError,
    KafkaConfigurationError,
    ProducerFenced,
)


def classify(exc: BaseException) -> FailureKind:
    """What a failed send means for the record (see the module docstring)."""
    if isinstance(exc, TOO_LARGE):
        return "too_large"
    if isinstance(exc, FATAL):
        return "fatal"
    return "transient"


class ProducerStopped(ServiceFault):
    """A write waited for the broker when its producer was stopped (shutdown): the trace is
    unfinished, never dead-lettered; the next owner reads it again."""


class ProduceRejected(Exception):
    """The cluster refuses to take records on `topic` for good (a `fatal` failure)."""

    def __init__(self, topic: str, setting: str, cause: BaseException) -> None:
        self.topic = topic
        self.setting = setting
        self.cause = cause
        super().__init__(
            f"cannot write to topic {topic!r} ({setting}): {type(cause).__name__}: {cause}; "
            "check the topic, its ACLs and the kafka settings"
        )


def producer_limits(max_message_bytes: int) -> dict[str, Any]:
    """The size settings every producer of the daemon takes: a record as large as the biggest
    input message, with room for what the daemon adds (aiokafka's default `max_request_size`,
    1 MiB, is exactly the default `kafka.max_message_bytes`: a dead letter of a message at
    the limit would never fit); batches of `BATCH_BYTES`, never more than a message may be, since
    a broker checks a whole batch against its topic's `max.message.bytes`."""
    return {
        "max_request_size": max_message_bytes + RECORD_OVERHEAD_BYTES,
        "max_batch_size": min(BATCH_BYTES, max_message_bytes),
    }


Headers = Sequence[tuple[str, bytes]]


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """Bytes of the record as the producer counts them against `max_request_size`."""
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers))
    return size


def fit_value(key: bytes | None, value: bytes, headers: Headers, limit: int) -> bytes:
    """The longest head of `value` with which the record is at most `limit` bytes (empty when
    not even the key and headers leave room)."""
    if record_size(key, value, headers) <= limit:
        return value
    without_value = record_size(key, b"", headers) - size_of_varint(0)
    keep = min(len(value), max(0, limit - without_value))
    while keep > 0 and without_value + size_of_varint(keep) + keep > limit:
        keep -= 1  # a few steps at most: the length prefix is a varint of up to 5 bytes
    return value[:keep]


class TopicProducer:
    """An acks=all producer of one configured topic (`setting` names it), sized from
    `kafka.max_message_bytes`, whose writes (`self.retry.call`) are retried while their failure
    is transient and the producer is not stopped. `start` checks that the topic exists."""

    def __init__(
        self,
        topic: str,
        setting: str,
        operation: Operation,
        producer_kwargs: dict[str, Any],
        max_message_bytes: int,
        retry_metrics: RetryMetrics | None = None,
        failing: FailingCalls | None = None,
        **options: Any,
    ) -> None:
        self.topic = topic
        self.setting = setting
        limits = producer_limits(max_message_bytes)
        self.max_request_size: int = limits["max_request_size"]
        self.producer = AIOKafkaProducer(acks="all", **limits, **options, **producer_kwargs)
        self._closed = False
        self.retry = RetryPolicy(
            operation,
            PRODUCE_BACKOFF,
            retry_on=self._retryable,
            metrics=retry_metrics,
            failing=failing,
        )

    async def start(self) -> None:
        try:
            await self.producer.start()
            await require_topic(self.producer, self.topic, self.setting)
        except BaseException:
            await self.producer.stop()  # nothing left open behind a failed start
            raise

    async def stop(self) -> None:
        self._closed = True
        await self.producer.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def write(self, produce: Callable[[], Awaitable[None]], **context: Any) -> None:
        """`produce`, retried while its failure is transient; once the producer is stopped, a
        transient failure is a :class:`ProducerStopped` (the trace stays unfinished)."""
        try:
            await self.retry.call(produce, **context)
        except KafkaError as exc:
            if self._closed and classify(exc) == "transient":
                raise ProducerStopped(f"{self.setting} producer stopped: {exc!r}") from exc
            raise

    def rejected(self, cause: BaseException) -> ProduceRejected:
        return ProduceRejected(self.topic, self.setting, cause)

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, KafkaError) and classify(exc) == "transient" and not self._closed
