"""The judge against real model servers: llama.cpp's ``llama-server`` and llama-cpp-python's
``llama_cpp.server``, each serving Gemma 3 270M (chat, and a second process for embeddings).

Built and installed by ``scripts/setup-llama.sh`` (``scripts/test.sh`` runs it); a test whose
servers are not installed skips, or fails under ``RAGMON_TEST_REQUIRE_SERVICES=1``.

The model is a tiny base model: its verdicts mean nothing. Every assertion is about the wire and
the bookkeeping, read from a recording proxy between the judge and the server
(tests/support/llama_servers.py): every call accepted (after at most one refused response-format
attempt per process), every request bounded by ``max_tokens`` and every reply within it, every
token the server reported counted (results, Prometheus counters, the token budget), and every
score either measured in [0, 1] or unmeasured with a reason -- never 0 for a failure, never NaN.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_client import CallFailure
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.llm import METRICS, LLMJudge
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenTally
from monitor.golden.dataset import GenerationCase
from monitor.golden.judges import LLMAnswerJudge
from monitor.models import Constraint, EvaluationResult
from monitor.sinks.store import Store
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import produce
from tests.support.llama_servers import (
    MODEL_ALIAS,
    SERVER_KINDS,
    Exchange,
    Installed,
    ModelServer,
    RecordingProxy,
    ServerKind,
)
from tests.support.score_cli import run_score
from tests.support.traces import (
    encode,
    native_trace,
    start_judging_daemon,
    trace_of,
    wait_for,
)

pytestmark = pytest.mark.slow  # two real model servers, seconds per call

MAX_TOKENS = 64  # small: the tiny model may repeat itself until the bound, and CPU time is short
FAILURE_REASONS = {
    "malformed_output",
    "truncated_output",
    "judge_error",
    "judge_timeout",
    "context_too_long",
}
CHAT_CONTEXT = 2048  # tokens; the long trace below does not fit


class Servers:
    """One kind of server: chat and embeddings processes, each behind a recording proxy."""

    def __init__(self, kind: ServerKind, found: Installed, log_dir: Path) -> None:
        self.kind = kind
        self.chat = ModelServer(kind, found, context=CHAT_CONTEXT).start(log_dir)
        try:
            self.embeddings = ModelServer(kind, found, embeddings=True).start(log_dir)
        except BaseException:
            self.chat.stop()
            raise
        self.chat_proxy = RecordingProxy(self.chat.url).start()
        self.embeddings_proxy = RecordingProxy(self.embeddings.url).start()

    def reset(self) -> None:
        self.chat_proxy.exchanges.clear()
        self.embeddings_proxy.exchanges.clear()

    def judge_settings(self, **overrides: Any) -> dict[str, Any]:
        values: dict[str, Any] = {
            "base_url": self.chat_proxy.url,
            "embedding_base_url": self.embeddings_proxy.url,
            "model": MODEL_ALIAS,
            "embedding_model": MODEL_ALIAS,
            "max_tokens": MAX_TOKENS,
            "timeout_seconds": 120,
            "max_retries": 1,
            "backoff_base_seconds": 0.1,
            "max_concurrency": 1,
        }
        values.update(overrides)
        return values

    def stop(self) -> None:
        self.chat_proxy.stop()
        self.embeddings_proxy.stop()
        self.chat.stop()
        self.embeddings.stop()


@pytest.fixture(scope="module", params=SERVER_KINDS)
def servers(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llama_install: Installed,
) -> Iterator[Servers]:
    kind: ServerKind = request.param
    started = Servers(kind, llama_install, tmp_path_factory.mktemp(kind.replace(".", "_")))
    yield started
    started.stop()


# ---------------------------------------------------------------------------------------------
# What every test checks


def assert_wire(exchanges: list[Exchange], bound: int = MAX_TOKENS) -> None:
    """Every call bounded (twice the bound for the one repeat of a reply cut at it), every reply
    within its request's bound; refusals only of the response format (at most one per call) or
    of a prompt too long for the context."""
    assert exchanges, "the judge made no call"
    for e in exchanges:
        assert e.max_tokens in (bound, 2 * bound), e.request.keys()
        if e.status == 200:
            assert e.usage("completion_tokens") <= e.max_tokens
        else:
            text = e.error_text.lower()
            assert "response_format" in text or "json" in text or "context" in text, text
    assert any(e.status == 200 for e in exchanges), "no call was accepted"


def assert_scores(result: EvaluationResult) -> None:
    for name, score in result.scores.items():
        if score.value is None:
            assert score.reason, name
        else:
            assert math.isfinite(score.value) and 0.0 <= score.value <= 1.0, (name, score)


def spent(exchanges: list[Exchange]) -> int:
    return sum(e.tokens for e in exchanges if e.status == 200)


LONG_CONTEXT = " ".join(
    f"Paragraph {i}: the branch office at street {i} keeps its own opening hours, which change "
    f"with the season and are posted at the door and on the website of the company."
    for i in range(60)
)


# ---------------------------------------------------------------------------------------------
# The judge in process: trace judge, turn judge, golden judge with embeddings


async def test_trace_judge_calls_are_accepted_bounded_and_counted(servers: Servers) -> None:
    servers.reset()
    budget = TokenBudget()
    registry = CollectorRegistry()
    config = JudgeConfig.model_validate(servers.judge_settings())
    judge = LLMJudge(config, JudgeMetrics(registry), budget=budget)
    try:
        results = [await judge.evaluate(trace_of(1))]
    finally:
        await judge.aclose()
    exchanges = servers.chat_proxy.chat()
    assert_wire(exchanges)
    for result in results:
        assert_scores(result)
        assert set(result.scores) == set(METRICS)
    if servers.kind == "llama_cpp.server":  # refuses json_schema (HTTP 500): one step down
        assert judge.client.response_mode == "json_object"
        refused = [e for e in exchanges if e.status != 200]
        assert refused and all(e.response_format["type"] == "json_schema" for e in refused)
        accepted = [e for e in exchanges if e.status == 200]
        assert all("schema" in (e.response_format or {}) for e in accepted)
    else:
        assert judge.client.response_mode == "json_schema"
        assert all(e.status == 200 for e in exchanges)
    total = spent(exchanges)
    assert total > 0
    assert (
        sum(
            (r.tokens.input_tokens or 0) + (r.tokens.output_tokens or 0)
            for r in results
            if r.tokens
        )
        == total
    )
    assert budget.used == total
    counted = sum(
        registry.get_sample_value(f"ragmon_judge_{kind}_tokens_total", {"evaluator": "llm"}) or 0
        for kind in ("input", "output")
    )
    assert counted == total


async def test_a_prompt_longer_than_the_context_is_unmeasured_with_its_cause(
    servers: Servers,
) -> None:
    servers.reset()
    config = JudgeConfig.model_validate(
        servers.judge_settings(max_chars_per_chunk=100_000, circuit_failure_threshold=1)
    )
    judge = LLMJudge(config, JudgeMetrics(CollectorRegistry()))
    long_trace = trace_of(3, contexts=[{"id": "long", "text": LONG_CONTEXT * 2}])
    try:
        result = await judge.evaluate(long_trace)
        assert judge.client.circuit.state == "closed"
    finally:
        await judge.aclose()
    assert result.scores["faithfulness"].reason == "context_too_long"
    assert result.scores["context_precision"].reason == "context_too_long"
    assert any("context" in e.lower() for e in result.errors), result.errors
    tasks = [
        e.task
        for e in servers.chat_proxy.chat()
        if e.status != 200 and "context" in e.error_text.lower()
    ]
    assert sorted(tasks) == ["ragmon_faithfulness", "ragmon_relevance"]  # once each, no retry


async def test_turn_judge_is_bounded_and_its_tokens_charged(servers: Servers) -> None:
    servers.reset()
    budget = TokenBudget()
    config = JudgeConfig.model_validate(servers.judge_settings())
    judge = LLMJudge(config, JudgeMetrics(CollectorRegistry()), budget=budget)
    constraints = [Constraint(id="k1", text="Answer in one sentence.")]
    try:
        judgement = await judge.judge_turn(trace_of(4), constraints, [("Hi", "Hello.")])
    finally:
        await judge.aclose()
    exchanges = servers.chat_proxy.chat("ragmon_turn")
    assert_wire(exchanges)
    if judgement.unmeasured_reason is not None:
        assert judgement.unmeasured_reason in FAILURE_REASONS
        assert [v.status for v in judgement.verdicts] == ["unmeasured"]
    else:
        assert all(v is None or 0 <= v <= 10 for v in judgement.outcomes.values())
    assert judgement.tokens is not None
    total = spent(servers.chat_proxy.exchanges)
    assert (judgement.tokens.input_tokens or 0) + (judgement.tokens.output_tokens or 0) == total
    assert budget.used == total


async def test_golden_judge_with_embeddings_from_the_second_server(servers: Servers) -> None:
    servers.reset()
    budget = TokenBudget()
    config = JudgeConfig.model_validate(servers.judge_settings())
    judge = LLMAnswerJudge(config, budget=budget)
    case = GenerationCase(
        id="q1",
        question="When does branch 1 open?",
        reference="Branch 1 opens at 9:00. It closes at 17:00.",
    )
    try:
        scores = await judge.judge(case, "Branch 1 opens at 9:00.", ["Branch 1 opens at 9:00."])
    finally:
        await judge.aclose()
    assert_wire(servers.chat_proxy.chat())
    embedded = servers.embeddings_proxy.exchanges
    assert [e.status for e in embedded] == [200]
    assert not any(e.embedding for e in servers.chat_proxy.exchanges)
    assert scores.semantic_similarity is not None and 0 <= scores.semantic_similarity <= 1
    for name, reason in scores.unmeasured.items():
        assert (
            reason in FAILURE_REASONS
            or reason.startswith("semantic_similarity_")
            or reason == "no_claims"
        ), (name, reason)
    total = spent(servers.chat_proxy.exchanges) + spent(embedded)
    assert (scores.input_tokens or 0) + (scores.output_tokens or 0) == total
    assert budget.used == total


async def test_embeddings_on_the_chat_server_are_unsupported_and_leave_chat_alone(
    servers: Servers,
) -> None:
    servers.reset()
    config = JudgeConfig.model_validate(
        servers.judge_settings(embedding_base_url=None, circuit_failure_threshold=1, max_retries=3)
    )
    judge = LLMJudge(config, JudgeMetrics(CollectorRegistry()))
    try:
        with pytest.raises(CallFailure) as failed:
            await judge.client.embed(["It opens at 9:00."], MODEL_ALIAS, TokenTally())
        assert judge.client.embeddings_circuit.state == "closed"
        after = await judge.evaluate(trace_of(5))
    finally:
        await judge.aclose()
    assert failed.value.reason == "judge_error"
    assert "not supported" in failed.value.detail
    embeds = [e for e in servers.chat_proxy.exchanges if e.embedding]
    assert len(embeds) == 1, "an unsupported endpoint is not retried"
    assert judge.client.circuit.state == "closed"
    assert_scores(after)
    assert any(e.status == 200 for e in servers.chat_proxy.chat())


# ---------------------------------------------------------------------------------------------
# Through the commands: `score --evaluator llm` and the daemon with Kafka


def test_score_command_with_the_llm_judge(servers: Servers, tmp_path: Path) -> None:
    servers.reset()
    traces = [
        native_trace(
            11,
            conversation_id="conv-a",
            turn=1,
            constraints=[{"id": "k1", "text": "Answer briefly."}],
        ),
        native_trace(12, contexts=[{"id": "long", "text": LONG_CONTEXT * 2}]),
    ]
    source = tmp_path / "traces.jsonl"
    source.write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    output = tmp_path / "results.jsonl"
    env = {
        **os.environ,
        "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{tmp_path / 's.db'}",
        "RAGMON_JUDGE__MAX_CHARS_PER_CHUNK": "100000",
        **{
            f"RAGMON_JUDGE__{key.upper()}": str(value)
            for key, value in servers.judge_settings().items()
        },
    }
    done = run_score(source, output, "llm", env, timeout=900)
    # the long trace cannot be judged (nor, at 64 tokens, perhaps the other): exit 3, one line
    # with the count and the reasons
    assert done.returncode == 3, done.stderr[-3000:]
    last = done.stderr.splitlines()[-1]
    assert "of 2 traces were not judged (" in last and "context_too_long" in last, last
    results = [
        EvaluationResult.model_validate_json(line) for line in output.read_text().splitlines()
    ]
    judged = {r.trace_id: r for r in results if r.evaluator == "llm"}
    assert set(judged) == {t["trace_id"] for t in traces}, "every trace judged or unmeasured"
    for result in judged.values():
        assert_scores(result)
    assert judged["trace-000012"].scores["faithfulness"].reason == "context_too_long"
    exchanges = servers.chat_proxy.chat()
    assert_wire(exchanges)
    counted = sum(
        (r.tokens.input_tokens or 0) + (r.tokens.output_tokens or 0)
        for r in judged.values()
        if r.tokens
    )
    # a result's tokens are every token spent judging its trace, the turn judge's included
    assert counted == spent(exchanges)


async def test_daemon_with_the_judge_over_kafka(
    servers: Servers, kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    servers.reset()
    running = await start_judging_daemon(
        kafka_broker.bootstrap, topic_prefix, tmp_path / "r.db", servers.judge_settings()
    )
    daemon = running.daemon
    traces = [native_trace(20 + n, conversation_id=f"conv-k{n}", turn=1) for n in range(2)]
    await produce(kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(t) for t in traces])
    value = daemon.metrics.registry.get_sample_value

    def judged() -> float:
        return sum(
            value(
                "ragmon_evaluations_total", {"agent": "default", "evaluator": "llm", "outcome": o}
            )
            or 0
            for o in ("ok", "partial", "error")
        )

    await wait_for(lambda: judged() == 2.0, 600, "two judge results")
    # the metrics count a judgement before the turn judge (slow on a small server) and the store
    # write finish: stop once both traces' tier-0 and judge results are stored
    await wait_for(
        lambda: (value("ragmon_store_writes_total", {"outcome": "ok"}) or 0) >= 4.0,
        600,
        "tier-0 and judge results of both traces stored",
    )
    assert await running.stop() == 0
    shed = sum(
        value("ragmon_sampler_shed_total", {"agent": "default", "reason": r}) or 0
        for r in ("queue_full", "token_budget", "circuit_open", "rate_lowered")
    )
    assert shed == 0
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    try:
        for t in traces:
            result = await store.get_result(t["trace_id"], "llm")
            assert result is not None
            assert_scores(result)
    finally:
        await store.close()
    exchanges = servers.chat_proxy.chat()
    assert_wire(exchanges)
    counted = sum(
        value(f"ragmon_judge_{kind}_tokens_total", {"evaluator": "llm"}) or 0
        for kind in ("input", "output")
    )
    assert counted == spent(exchanges), "every token, the turn judge's included"
