"""What the producers do with a record that fails: cut it, hand it back, retry it or stop.

Unit tests with the producer's client faked at its boundary (`send_and_wait`/`send`), so each
broker answer can be chosen; the same paths against the real broker are in
`tests/test_faults_oversized.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownError,
)

from monitor.messages import RawMessage
from monitor.models import EvaluationResult, Score, StatementVerdict
from monitor.retry import FailingCalls
from monitor.sinks.deadletter import KafkaDeadLetters
from monitor.sinks.produce import (
    BATCH_BYTES,
    RECORD_OVERHEAD_BYTES,
    ProduceRejected,
    classify,
    fit_value,
    producer_limits,
    record_size,
)
from monitor.sinks.results import STATEMENTS_OMITTED, ResultsPublisher
from monitor.sinks.writer import OutRecord, TopicWriter

Headers = list[tuple[str, bytes]]
Answer = Callable[[bytes | None, Headers], BaseException | None]


class FakeProducer:
    """Records every send; `answer(value, headers)` says what the broker answers (None: ok)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        self.acked: list[tuple[str, bytes | None, bytes | None, Headers]] = []

    async def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, headers: Any = None
    ) -> None:
        future = await self.send(topic, value=value, key=key, headers=headers)
        await future

    async def send(
        self, topic: str, value: Any = None, key: Any = None, headers: Any = None
    ) -> asyncio.Future[None]:
        record = (topic, key, value, list(headers or []))
        self.sent.append(record)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        error = self.answer(value, list(headers or []))
        if error is None:
            self.acked.append(record)
            future.set_result(None)
        else:
            future.set_exception(error)
        return future

    async def stop(self) -> None:
        return None


def message(value: bytes, headers: Headers | None = None) -> RawMessage:
    return RawMessage("in", 2, 41, b"key-1", value, tuple(headers or [("producer", b"app")]))


def dead_letters(
    answer: Answer, max_message_bytes: int = 10_000
) -> tuple[KafkaDeadLetters, FakeProducer]:
    sink = KafkaDeadLetters("dlq", {"bootstrap_servers": "127.0.0.1:1"}, max_message_bytes)
    fake = FakeProducer(answer)
    sink.producer = fake
    sink.retry = dataclasses.replace(sink.retry, sleep=_no_sleep)  # no waits
    return sink, fake


async def _no_sleep(seconds: float) -> None:
    return None


def headers_of(record: tuple[str, bytes | None, bytes | None, Headers]) -> dict[str, str]:
    return {k: v.decode() for k, v in record[3]}


def test_failures_are_sorted_into_what_the_writer_can_do_about_them() -> None:
    assert classify(MessageSizeTooLargeError()) == "too_large"
    assert classify(RecordTooLargeError()) == "too_large"
    assert classify(TopicAuthorizationFailedError()) == "fatal"
    # aiokafka does not mark its timeouts retriable, but a broker that is away passes
    assert classify(KafkaTimeoutError()) == "transient"
    assert classify(KafkaConnectionError()) == "transient"
    assert classify(NotLeaderForPartitionError()) == "transient"
    assert classify(UnknownError()) == "transient", "unknown errors are retried (and reported)"


def test_producers_take_a_record_as_large_as_the_largest_message_plus_headers() -> None:
    assert producer_limits(1_048_576)["max_request_size"] == 1_048_576 + RECORD_OVERHEAD_BYTES


def test_producers_batch_no_more_than_a_topic_takes_as_one_message() -> None:
    """A broker checks a whole batch against the topic's `max.message.bytes`: a batch of small
    records larger than a message may be would be refused as too large, each record in it."""
    assert producer_limits(1_048_576)["max_batch_size"] == BATCH_BYTES
    assert producer_limits(4_096)["max_batch_size"] == 4_096


def test_fit_value_keeps_the_longest_head_that_fits() -> None:
    headers = [("ragmon.error.reason", b"too_large")]
    value = bytes(range(256)) * 400
    for limit in (200, 1_000, 50_000):
        head = fit_value(b"k", value, headers, limit)
        assert value.startswith(head)
        assert record_size(b"k", head, headers) <= limit
        assert record_size(b"k", value[: len(head) + 1], headers) > limit
    assert fit_value(b"k", value, headers, 10**6) == value
    assert fit_value(b"k", value, headers, 10) == b"", "nothing fits: empty"


async def test_a_dead_letter_larger_than_the_producer_takes_is_cut_with_its_size_in_headers() -> (
    None
):
    sink, fake = dead_letters(lambda value, headers: None, max_message_bytes=10_000)
    big = b"x" * 200_000
    await sink.send(message(big), "too_large", "DecodeError", "200000 bytes, limit 10000")
    ((topic, key, value, _),) = fake.acked
    headers = headers_of(fake.acked[0])
    assert topic == "dlq" and key == b"key-1"
    assert value is not None and big.startswith(value)
    assert record_size(key, value, fake.acked[0][3]) <= 10_000 + RECORD_OVERHEAD_BYTES
    assert len(value) > 10_000, "as much as the producer takes"
    assert headers["ragmon.value.truncated"] == "true"
    assert headers["ragmon.original.size"] == "200000"
    assert headers["ragmon.error.reason"] == "too_large"
    assert (headers["ragmon.original.topic"], headers["ragmon.original.partition"]) == ("in", "2")
    assert headers["ragmon.original.offset"] == "41"
    assert headers["producer"] == "app", "the original headers are kept"


async def test_a_dead_letter_that_fits_is_kept_whole_and_unmarked() -> None:
    sink, fake = dead_letters(lambda value, headers: None)
    await sink.send(message(b"small"), "invalid_json", "DecodeError", "bad")
    ((_, _, value, _),) = fake.acked
    headers = headers_of(fake.acked[0])
    assert value == b"small" and "ragmon.value.truncated" not in headers
    assert headers["ragmon.original.size"] == "5"


async def test_a_topic_that_refuses_the_size_gets_smaller_letters_and_the_size_is_remembered() -> (
    None
):
    topic_limit = 3_000  # the dead-letter topic's max.message.bytes, lower than the producer's

    def broker(value: bytes | None, headers: Headers) -> BaseException | None:
        return MessageSizeTooLargeError() if len(value or b"") > topic_limit else None

    sink, fake = dead_letters(broker, max_message_bytes=10_000)
    await sink.send(message(b"y" * 50_000), "too_large", "DecodeError", "too large")
    attempts = [len(v or b"") for _, _, v, _ in fake.sent]
    assert len(fake.acked) == 1
    assert attempts[0] > 10_000 and attempts[-1] <= topic_limit
    assert attempts == sorted(attempts, reverse=True), "each attempt smaller than the last"
    assert headers_of(fake.acked[0])["ragmon.value.truncated"] == "true"
    fake.sent.clear()
    await sink.send(message(b"z" * 50_000), "too_large", "DecodeError", "too large")
    assert len(fake.sent) == 1, "the size the topic took is where the next letter starts"


async def test_a_refusal_for_good_stops_at_once_and_names_the_setting() -> None:
    sink, fake = dead_letters(lambda value, headers: TopicAuthorizationFailedError())
    with pytest.raises(ProduceRejected) as raised:
        await sink.send(message(b"poison"), "invalid_json", "DecodeError", "bad")
    assert len(fake.sent) == 1, "not retried"
    assert "kafka.dlq_topic" in str(raised.value) and "'dlq'" in str(raised.value)
    assert "TopicAuthorizationFailedError" in str(raised.value)


async def test_a_transient_failure_is_retried_until_acknowledged_and_reported_meanwhile() -> None:
    failing = FailingCalls()
    answers: list[BaseException | None] = [KafkaTimeoutError(), KafkaConnectionError(), None]
    seen: list[str | None] = []

    def broker(value: bytes | None, headers: Headers) -> BaseException | None:
        oldest = failing.oldest()
        seen.append(oldest.operation if oldest is not None else None)
        return answers.pop(0)

    sink, fake = dead_letters(broker)
    sink.retry = dataclasses.replace(sink.retry, failing=failing)
    await sink.send(message(b"poison"), "invalid_json", "DecodeError", "bad")
    assert len(fake.sent) == 3 and len(fake.acked) == 1
    assert seen == [None, "dead_letters", "dead_letters"], "failing while it retries"
    assert failing.oldest() is None


async def test_the_internal_topics_writer_hands_back_records_too_large_for_the_topic() -> None:
    writer = TopicWriter(
        {"bootstrap_servers": "127.0.0.1:1"}, 10_000, settings={"spans": "kafka.spans_topic"}
    )
    writer._producer = FakeProducer(
        lambda value, headers: MessageSizeTooLargeError() if len(value or b"") > 100 else None
    )
    records = [OutRecord("spans", b"a", b"small"), OutRecord("spans", b"b", b"x" * 500)]
    refused = await writer.send_all(records)
    assert [r.record for r in refused] == [records[1]]
    assert isinstance(refused[0].error, MessageSizeTooLargeError)
    writer._producer = FakeProducer(lambda value, headers: TopicAuthorizationFailedError())
    with pytest.raises(ProduceRejected, match=r"kafka\.spans_topic"):
        await writer.send_all(records[:1])


def _result(statements: int) -> EvaluationResult:
    return EvaluationResult(
        trace_id="t-1",
        conversation_id="c-1",
        timestamp=datetime(2026, 11, 26, tzinfo=UTC),
        evaluator="heuristic",
        scores={"faithfulness": Score.of(0.5)},
        statements=[
            StatementVerdict(statement="s" * 100, supported=True) for _ in range(statements)
        ],
    )


async def test_a_result_too_large_for_the_results_topic_is_published_without_its_statements() -> (
    None
):
    publisher = ResultsPublisher("results", {"bootstrap_servers": "127.0.0.1:1"}, 10_000)
    fake = FakeProducer(
        lambda value, headers: MessageSizeTooLargeError() if len(value or b"") > 2_000 else None
    )
    publisher.producer = fake
    await publisher.publish(_result(statements=3))
    await publisher.publish(_result(statements=100))
    first, second = (EvaluationResult.model_validate_json(v or b"") for _, _, v, _ in fake.acked)
    assert len(first.statements) == 3 and STATEMENTS_OMITTED not in first.flags
    assert second.statements == [] and second.flags == [STATEMENTS_OMITTED]
    assert second.scores == first.scores, "the scores are what matters and are all there"
