"""The results producer batches many results per request (aiokafka waits at a full batch, so a
small one holds up scoring), but never more than its topic takes as one message: a broker checks
a whole batch against `max.message.bytes`, so a batch of small results over that limit would be
refused, and every result in it published without its statements. Real broker.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from monitor.models import EvaluationResult, Score, StatementVerdict
from monitor.sinks.results import STATEMENTS_OMITTED, ResultsPublisher
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, read_all

pytestmark = [pytest.mark.kafka]

TOPIC_LIMIT = 20_000  # the results topic's max.message.bytes, and kafka.max_message_bytes
RESULTS = 120  # about 1.6 KB each: ten times the topic's limit in all


def _result(n: int) -> EvaluationResult:
    return EvaluationResult(
        trace_id=f"t-{n}",
        conversation_id="c-1",  # one key: every result goes to one partition's batch
        timestamp=datetime(2026, 11, 26, tzinfo=UTC),
        evaluator="heuristic",
        scores={"faithfulness": Score.of(0.5)},
        statements=[StatementVerdict(statement="s" * 100, supported=True) for _ in range(12)],
    )


async def test_results_sent_at_once_to_a_topic_with_a_small_message_limit_keep_their_statements(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.results"
    await create_topics(
        kafka_broker.bootstrap, [topic], configs={"max.message.bytes": str(TOPIC_LIMIT)}
    )
    publisher = ResultsPublisher(topic, {"bootstrap_servers": kafka_broker.bootstrap}, TOPIC_LIMIT)
    async with publisher:
        await asyncio.gather(*(publisher.publish(_result(n)) for n in range(RESULTS)))

    published = [
        EvaluationResult.model_validate_json(record.value or b"")
        for record in await read_all(kafka_broker.bootstrap, topic, RESULTS)
    ]
    assert sorted(r.trace_id for r in published) == sorted(f"t-{n}" for n in range(RESULTS))
    omitted = [r.trace_id for r in published if STATEMENTS_OMITTED in r.flags]
    assert omitted == [], "each result fits the topic alone; none may lose its statements"
    assert all(len(r.statements) == 12 for r in published)
