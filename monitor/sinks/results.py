"""Publishing evaluation results to the results topic (JSON, keyed like the input)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError

from monitor.faults import ServiceFault
from monitor.models import EvaluationResult
from monitor.retry import PRODUCE_BACKOFF, RetryMetrics, RetryPolicy
from monitor.sinks.topics import require_topic


class ResultsUnavailable(ServiceFault):
    """The publisher stopped while a result waited for the broker: the trace is unfinished."""


class ResultsPublisher:
    """Produces each result and returns once the broker acknowledged it (at-least-once).

    While the broker is away a result is sent again (unbounded, jittered, counted as
    `ragmon_retries_total{operation="results"}`): the trace stays unfinished and its offset
    uncommitted, never dead-lettered. An error that cannot succeed by waiting (a record the
    broker refuses) is raised.
    """

    def __init__(
        self, topic: str, producer_kwargs: dict[str, Any], retry_metrics: RetryMetrics | None = None
    ) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(acks="all", linger_ms=5, **producer_kwargs)
        self._closed = False
        self._retry = RetryPolicy(
            "results",
            PRODUCE_BACKOFF,
            retry_on=self._retryable,
            metrics=retry_metrics,
            log_level="info",  # one line per result while the broker is away
        )

    async def start(self) -> None:
        try:
            await self._producer.start()
            await require_topic(self._producer, self.topic, "results.topic")
        except BaseException:
            await self._producer.stop()  # nothing left open behind a failed start
            raise

    async def stop(self) -> None:
        self._closed = True
        await self._producer.stop()

    async def publish(self, result: EvaluationResult) -> None:
        key = (result.conversation_id or result.trace_id).encode("utf-8")
        value = result.model_dump_json().encode("utf-8")

        async def send() -> None:
            future = await self._producer.send(self.topic, value=value, key=key)
            await future

        try:
            await self._retry.call(send, trace_id=result.trace_id)
        except KafkaError as exc:
            if self._closed and _waitable(exc):
                raise ResultsUnavailable(f"results publisher stopped: {exc!r}") from exc
            raise

    def _retryable(self, exc: BaseException) -> bool:
        return _waitable(exc) and not self._closed


def _waitable(exc: BaseException) -> bool:
    """The broker may take it once it is back (aiokafka's timeouts are not marked retriable)."""
    return isinstance(exc, KafkaError) and (exc.retriable or isinstance(exc, KafkaTimeoutError))
