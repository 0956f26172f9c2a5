"""Publishing evaluation results to the results topic (JSON, keyed like the input)."""

from __future__ import annotations

from typing import Any

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from monitor.models import EvaluationResult
from monitor.retry import PRODUCE_BACKOFF, FailingCalls, RetryMetrics, RetryPolicy
from monitor.sinks.produce import ProduceRejected, classify, producer_limits
from monitor.sinks.topics import require_topic

log = structlog.get_logger(__name__)

STATEMENTS_OMITTED = "statements_omitted"
"""Flag of a published result whose statement verdicts made it too large for the topic."""


class ResultsPublisher:
    """Produces each result and returns once the broker acknowledged it (at-least-once).

    Transient failures are retried until the broker takes the result (the trace's offset stays
    uncommitted meanwhile). A result too large for the topic is published without its statement
    verdicts, flagged `statements_omitted` (the store keeps them); a failure no retry can cure
    raises :class:`ProduceRejected`.
    """

    def __init__(
        self,
        topic: str,
        producer_kwargs: dict[str, Any],
        max_message_bytes: int,
        retry_metrics: RetryMetrics | None = None,
        failing: FailingCalls | None = None,
    ) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(
            acks="all", linger_ms=5, **producer_limits(max_message_bytes), **producer_kwargs
        )
        self._closed = False
        self._retry = RetryPolicy(
            "results",
            PRODUCE_BACKOFF,
            retry_on=self._retryable,
            metrics=retry_metrics,
            failing=failing,
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
        await self._retry.call(lambda: self._produce(result), topic=self.topic)

    async def _produce(self, result: EvaluationResult) -> None:
        key = (result.conversation_id or result.trace_id).encode("utf-8")
        try:
            await self._send(key, result)
        except KafkaError as exc:
            kind = classify(exc)
            if kind == "transient":
                raise
            if kind == "too_large" and result.statements:
                log.warning(
                    "result too large for the results topic; publishing it without statements",
                    trace_id=result.trace_id,
                    evaluator=result.evaluator,
                    statements=len(result.statements),
                )
                slim = result.model_copy(
                    update={"statements": [], "flags": [*result.flags, STATEMENTS_OMITTED]}
                )
                await self._produce(slim)
                return
            raise ProduceRejected(self.topic, "results.topic", exc) from exc

    async def _send(self, key: bytes, result: EvaluationResult) -> None:
        value = result.model_dump_json().encode("utf-8")
        future = await self._producer.send(self.topic, value=value, key=key)
        await future

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, KafkaError) and classify(exc) == "transient" and not self._closed
