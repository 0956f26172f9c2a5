"""Publishing evaluation results to the results topic (JSON, keyed like the input)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from monitor.models import EvaluationResult
from monitor.sinks.topics import require_topic


class ResultsPublisher:
    """Produces each result and returns once the broker acknowledged it (at-least-once)."""

    def __init__(self, topic: str, producer_kwargs: dict[str, Any]) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(acks="all", linger_ms=5, **producer_kwargs)

    async def start(self) -> None:
        try:
            await self._producer.start()
            await require_topic(self._producer, self.topic, "results.topic")
        except BaseException:
            await self._producer.stop()  # nothing left open behind a failed start
            raise

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, result: EvaluationResult) -> None:
        key = (result.conversation_id or result.trace_id).encode("utf-8")
        future = await self._producer.send(
            self.topic, value=result.model_dump_json().encode("utf-8"), key=key
        )
        await future
