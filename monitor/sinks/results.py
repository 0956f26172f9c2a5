"""Publishing evaluation results to the results topic (JSON, keyed like the input)."""

from __future__ import annotations

from typing import Any

import structlog
from aiokafka.errors import KafkaError

from monitor.models import EvaluationResult
from monitor.retry import FailingCalls, RetryMetrics
from monitor.sinks.produce import TopicProducer, classify

log = structlog.get_logger(__name__)

STATEMENTS_OMITTED = "statements_omitted"
"""Flag of a published result whose statement verdicts made it too large for the topic."""


class ResultsPublisher(TopicProducer):
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
        super().__init__(
            topic,
            "results.topic",
            "results",
            producer_kwargs,
            max_message_bytes,
            retry_metrics,
            failing,
            linger_ms=5,
        )

    async def publish(self, result: EvaluationResult) -> None:
        await self.write(lambda: self._produce(result), topic=self.topic)

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
            raise self.rejected(exc) from exc

    async def _send(self, key: bytes, result: EvaluationResult) -> None:
        value = result.model_dump_json().encode("utf-8")
        future = await self.producer.send(self.topic, value=value, key=key)
        await future
