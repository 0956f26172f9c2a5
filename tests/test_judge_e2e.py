"""The daemon with the LLM judge: real broker, real openai client, scripted chat server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.sinks.store import Store
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce, read_all
from tests.support.openai_server import OpenAIServer
from tests.support.traces import (
    RunningDaemon,
    encode,
    native_trace,
    produce_traces,
    scoring_settings,
    wait_for,
)

pytestmark = pytest.mark.kafka


def _settings(broker: KafkaBroker, prefix: str, db: Path, judge_url: str, **judge: Any) -> Settings:
    return scoring_settings(
        broker.bootstrap,
        prefix,
        db,
        sampling={"rate": 1.0},
        judge={
            "base_url": judge_url,
            "api_key": "sk-test-secret-key-123456",
            "timeout_seconds": 2,
            "max_retries": 0,
            "circuit_failure_threshold": 3,
            "circuit_reset_seconds": 1,
            **judge,
        },
    )


async def test_sampled_traces_get_a_judge_result_beside_tier_zero(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in", f"{topic_prefix}.dlq"])
    trace = native_trace(
        7,
        answer="Branch 7 opens at 9:00. It also serves UNSUPPORTED free coffee to ann@example.com.",
    )
    async with OpenAIServer() as server:
        daemon = Daemon(
            _settings(kafka_broker, topic_prefix, tmp_path / "r.db", server.url),
            SourceSpec("kafka"),
            registry=CollectorRegistry(),
        )
        running = RunningDaemon(daemon)
        await running.started()
        await produce(kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(trace)])
        value = daemon.metrics.registry.get_sample_value
        await wait_for(
            lambda: (
                value(
                    "ragmon_evaluations_total",
                    {"agent": "default", "evaluator": "llm", "outcome": "ok"},
                )
                == 1.0
            ),
            30,
            "judge result",
        )
        assert await running.stop() == 0
        sent = json.dumps([r.body for r in server.requests])
        metric_calls = [r for r in server.requests if r.task != "ragmon_turn"]
        assert len(metric_calls) <= 2, "at most two chat calls for the reference-free metrics"
        assert "ann@example.com" not in sent, "redacted before it leaves the process"

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        judged = await store.get_result(trace["trace_id"], "llm")
        tier0 = await store.get_result(trace["trace_id"], "heuristic")
    finally:
        await store.close()
    assert judged is not None and tier0 is not None
    assert judged.scores["faithfulness"].value == pytest.approx(0.5)
    assert [s.supported for s in judged.statements] == [True, False]
    # the judged result says why it was judged, with tier 0's prediction made before it
    assert judged.selection is not None and tier0.selection is None
    assert judged.selection.uniform and judged.selection.inclusion_probability == 1.0
    assert set(judged.selection.predictions) >= {"faithfulness", "answer_relevancy"}
    assert value("ragmon_judge_requests_total", {"evaluator": "llm", "outcome": "ok"}) >= 1.0
    decisions = [
        value("ragmon_sampler_decisions_total", {"agent": "default", "outcome": o}) or 0
        for o in ("sampled", "priority")
    ]
    assert sum(decisions) == 1.0


async def test_a_dead_judge_opens_the_circuit_while_tier_zero_and_consumption_go_on(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in", f"{topic_prefix}.dlq"])
    server = OpenAIServer()
    await server.start()
    url = server.url
    await server.stop()  # nothing listens there now: every call is refused
    daemon = Daemon(
        _settings(kafka_broker, topic_prefix, tmp_path / "r.db", url),
        SourceSpec("kafka"),
        registry=CollectorRegistry(),
    )
    running = RunningDaemon(daemon)
    await running.started()
    value = daemon.metrics.registry.get_sample_value
    traces = [native_trace(i, conversation_id=f"c{i}") for i in range(20)]
    await produce(kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(t) for t in traces[:5]])
    await wait_for(
        lambda: value("ragmon_judge_circuit_open", {"evaluator": "llm", "endpoint": "chat"}) == 1.0,
        30,
        "the circuit to open",
    )
    await produce(kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(t) for t in traces[5:]])
    await wait_for(
        lambda: (
            value(
                "ragmon_evaluations_total",
                {"agent": "default", "evaluator": "heuristic", "outcome": "ok"},
            )
            == 20.0
        ),
        60,
        "tier 0 scored every trace",
    )
    shed = value("ragmon_sampler_shed_total", {"agent": "default", "reason": "circuit_open"})
    assert shed is not None and shed > 0, "judge work is shed while the circuit is open"
    unmeasured = value(
        "ragmon_evaluation_unmeasured_total",
        {"agent": "default", "metric": "faithfulness", "evaluator": "llm", "reason": "judge_error"},
    )
    assert unmeasured is not None and unmeasured >= 1.0, "a failed judgement is unmeasured, not 0"
    for selection in ("uniform", "priority"):
        labels = {"agent": "default", "metric": "faithfulness", "evaluator": "llm"}
        count = value("ragmon_evaluation_score_ratio_count", {**labels, "selection": selection})
        assert count is None

    # The endpoint comes back on the same port: after the reset time a probe closes the circuit.
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    async with OpenAIServer() as revived:
        await revived.stop()
        await revived.start(port=port)
        await asyncio.sleep(1.2)
        await produce(
            kafka_broker.bootstrap,
            f"{topic_prefix}.in",
            [encode(native_trace(99, conversation_id="c99"))],
        )
        await wait_for(
            lambda: (
                value(
                    "ragmon_evaluations_total",
                    {"agent": "default", "evaluator": "llm", "outcome": "ok"},
                )
                == 1.0
            ),
            30,
            "a judged trace after recovery",
        )
        assert value("ragmon_judge_circuit_open", {"evaluator": "llm", "endpoint": "chat"}) == 0.0
    assert await running.stop() == 0


async def test_a_judged_turn_result_carries_the_turn_judges_tokens(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """The `llm` result of a judged conversation turn counts every token spent judging its
    trace: the trace judge's calls and the turn judge's, in the store and on the results
    topic, exactly as the server reported them."""
    topics = [f"{topic_prefix}.{t}" for t in ("in", "dlq", "results")]
    await create_topics(kafka_broker.bootstrap, topics)
    db = tmp_path / "r.db"
    traces = [
        native_trace(n, conversation_id=f"conv-{n // 2}", turn=n % 2 + 1, trace_id=f"tok-{n}")
        for n in range(4)
    ]
    async with OpenAIServer() as server:
        settings = _settings(kafka_broker, topic_prefix, db, server.url)
        settings = settings.model_copy(
            update={"results": settings.results.model_copy(update={"topic": topics[2]})}
        )
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        running = RunningDaemon(daemon)
        await running.started()
        await produce_traces(kafka_broker.bootstrap, topics[0], traces)
        store = await Store.open(f"sqlite+aiosqlite:///{db}")
        try:

            async def judged() -> dict[str, Any]:
                found = {}
                for t in traces:
                    result = await store.get_result(t["trace_id"], "llm")
                    if result is not None:
                        found[t["trace_id"]] = result
                return found

            await wait_for(
                lambda: _count(judged(), len(traces)), 60, "every trace judged and stored"
            )
            stored = await judged()
        finally:
            await store.close()
        assert await running.stop() == 0

        # What the server reported, per trace (its question): the trace calls and the turn call.
        spent: dict[str, tuple[int, int]] = {}
        turn_calls = 0
        for received in server.requests:
            data = received.data or {}
            question = data.get("question") or data.get("latest_user_message")
            assert question is not None and received.usage is not None
            turn_calls += received.task == "ragmon_turn"
            before = spent.get(question, (0, 0))
            spent[question] = (
                before[0] + received.usage["prompt_tokens"],
                before[1] + received.usage["completion_tokens"],
            )
    assert turn_calls == len(traces), "every judged turn had its turn call"
    by_trace: dict[str, Any] = {}  # the last record of each trace's llm result
    for record in await read_all(kafka_broker.bootstrap, topics[2], 2 * len(traces)):
        value = json.loads(record.value)
        if value["evaluator"] == "llm":
            by_trace[value["trace_id"]] = value
    for t in traces:
        expected = spent[t["query"]]
        tokens = stored[t["trace_id"]].tokens
        assert tokens is not None
        assert (tokens.input_tokens, tokens.output_tokens) == expected
        assert (
            by_trace[t["trace_id"]]["tokens"]["input_tokens"],
            by_trace[t["trace_id"]]["tokens"]["output_tokens"],
        ) == expected


async def _count(found: Any, expected: int) -> bool:
    return len(await found) >= expected
