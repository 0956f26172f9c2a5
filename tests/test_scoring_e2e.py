"""Trace in through the real broker -> tier-0 result in the store, results topic and metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.models import EvaluationResult
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce, read_all
from tests.support.traces import RunningDaemon, encode, native_trace, scoring_settings

pytestmark = pytest.mark.kafka

GROUNDED = native_trace(
    1,
    query="What time does the Shibuya branch open on Saturdays?",
    contexts=[{"id": "kb-12", "text": "The Shibuya branch opens at 10:00 on Saturdays."}],
    answer="The Shibuya branch opens at 10:00 on Saturdays.",
    agent="support-bot",
)
INVENTED = native_trace(
    2,
    query="How long is the warranty on the X200 vacuum?",
    contexts=[{"id": "kb-77", "text": "The X200 vacuum has a two-year limited warranty."}],
    answer="The X200 has a 5-year warranty covering accidental damage, mail bob@example.com.",
    agent="support-bot",
)


def _settings(broker: KafkaBroker, prefix: str, db: Path) -> Settings:
    return scoring_settings(broker.bootstrap, prefix, db, results_topic=f"{prefix}.results")


async def test_a_trace_gets_a_stored_published_and_exported_result(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    await create_topics(
        kafka_broker.bootstrap, [f"{topic_prefix}.{t}" for t in ("in", "dlq", "results")]
    )
    await produce(
        kafka_broker.bootstrap,
        f"{topic_prefix}.in",
        [encode(GROUNDED), encode(INVENTED)],
        keys=[b"conv-a", b"conv-b"],
    )
    daemon = Daemon(
        _settings(kafka_broker, topic_prefix, tmp_path / "r.db"),
        SourceSpec("kafka"),
        registry=CollectorRegistry(),
    )
    running = RunningDaemon(daemon)
    await running.started()
    published = await read_all(kafka_broker.bootstrap, f"{topic_prefix}.results", expected=2)
    assert await running.stop() == 0

    results = {json.loads(r.value)["trace_id"]: (r.key, json.loads(r.value)) for r in published}
    assert set(results) == {GROUNDED["trace_id"], INVENTED["trace_id"]}
    key, grounded = results[GROUNDED["trace_id"]]
    assert key == GROUNDED["conversation_id"].encode(), "keyed like the input: by conversation"
    assert grounded["evaluator"] == "heuristic"
    assert grounded["scores"]["faithfulness"]["value"] == 1.0
    _, invented = results[INVENTED["trace_id"]]
    assert invented["scores"]["faithfulness"]["value"] < 1.0
    claims = [s["statement"] for s in invented["statements"] if not s["supported"]]
    assert claims and "5-year" in claims[0]
    assert "bob@example.com" not in json.dumps(invented), "redacted on the results topic"
    assert "unsupported_entities" in invented["flags"]

    reopened = Settings.model_validate(
        {"store": {"url": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"}}
    )
    from monitor.sinks.store import Store

    store = await Store.open(reopened.store.url.get_secret_value())
    try:
        stored = await store.get_result(INVENTED["trace_id"], "heuristic")
        assert stored is not None and stored.scores["faithfulness"].value is not None
        assert "bob@example.com" not in stored.model_dump_json(), "redacted in the store"
        published_statements = EvaluationResult.model_validate(invented).statements
        assert stored.statements == published_statements, "the store keeps what was published"
    finally:
        await store.close()

    value = daemon.metrics.registry.get_sample_value
    labels = {
        "agent": "support-bot",
        "metric": "faithfulness",
        "evaluator": "heuristic",
        "selection": "all",
    }
    assert value("ragmon_evaluation_score_ratio_count", labels) == 2.0
    assert value("ragmon_evaluation_score_ratio_sum", labels) < 2.0
    assert (
        value(
            "ragmon_statements_total",
            {"agent": "support-bot", "evaluator": "heuristic", "outcome": "unsupported"},
        )
        >= 1.0
    )
    assert value("ragmon_results_published_total", {"outcome": "ok"}) == 2.0
    assert value("ragmon_store_writes_total", {"outcome": "ok"}) == 2.0
