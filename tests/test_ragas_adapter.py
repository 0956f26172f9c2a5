"""The ragas adapter end to end: real ragas 0.4, its real openai client, a real HTTP server.

Each test starts the scripted OpenAI-compatible server (tests/support/openai_server.py) on a free
loopback port; ragas's own prompts go to it over HTTP and :class:`RagasScript` answers them the
way a judge model would (recognising each prompt by the response model ragas asks for), and the
server's deterministic ``/v1/embeddings`` serves the embeddings. Nothing of ragas, instructor or
openai is mocked.

Without the ``ragas`` extra the tests call ``service_unavailable`` (skip locally, fail in CI).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.models import EvaluationResult, Trace
from tests.support.openai_server import OpenAIServer, Received, Reply
from tests.support.ragas_script import (
    IRRELEVANT,
    UNSUPPORTED,
    RagasScript,
    ragas_task,
)
from tests.support.services import service_unavailable
from tests.support.traces import make_trace

API_KEY = "sk-test-ragas-secret-0123456789abcdef"

# ---------------------------------------------------------------------------------------------
# traces


def trace(trace_id: str, query: str, contexts: list[str], answer: str, **fields: Any) -> Trace:
    """Turn 1 of its own conversation, answered by agent support-bot."""
    return make_trace(
        query,
        contexts,
        answer,
        trace_id=trace_id,
        agent="support-bot",
        conversation_id=f"conv-{trace_id}",
        turn=1,
        **fields,
    )


EN = trace(
    "en-1",
    "What is the refund window for annual plans?",
    [
        "Annual plans can be refunded within 30 days of purchase. Refunds go to the original card.",
        f"{IRRELEVANT} Our office is closed on public holidays.",
    ],
    "Annual plans can be refunded within 30 days of purchase. "
    f"Refunds are also paid in cash at any branch {UNSUPPORTED}.",
    reference="Annual plans are refundable within 30 days of purchase, to the original card.",
)

JA = trace(
    "ja-1",
    "年間プランの返金期間はどれくらいですか？",
    [
        "年間プランは購入から30日以内であれば返金できます。返金は元のカードに行われます。",
        "返金の申請はマイページから行えます。",
    ],
    f"年間プランは購入から30日以内なら返金できます。店舗で現金でも返金されます{UNSUPPORTED}。",
    reference="年間プランは購入から30日以内に元のカードへ返金されます。",
    language="ja",
)

# ---------------------------------------------------------------------------------------------
# fixtures


@pytest_asyncio.fixture(loop_scope="function")
async def script() -> RagasScript:
    return RagasScript()


@pytest_asyncio.fixture(loop_scope="function")
async def server(script: RagasScript) -> AsyncIterator[OpenAIServer]:
    srv = OpenAIServer(script=script)
    await srv.start()
    yield srv
    await srv.stop()


def make_config(server: OpenAIServer, **overrides: Any) -> JudgeConfig:
    values: dict[str, Any] = {
        "base_url": server.url,
        "api_key": API_KEY,
        "model": "judge-test",
        "timeout_seconds": 5.0,
        "max_retries": 1,
        "circuit_failure_threshold": 2,
        "circuit_reset_seconds": 30.0,
        "input_price_per_million": 2.0,
        "output_price_per_million": 8.0,
    }
    values.update(overrides)
    return JudgeConfig.model_validate(values)


@pytest_asyncio.fixture(loop_scope="function")
async def make_evaluator(
    server: OpenAIServer, ragas_installed: None
) -> AsyncIterator[Callable[..., Any]]:
    from monitor.evaluators.ragas_adapter import RagasEvaluator
    from monitor.evaluators.ragas_runtime import RagasUnavailableError

    made: list[Any] = []

    def make(config: JudgeConfig | None = None, **kwargs: Any) -> RagasEvaluator:
        try:
            evaluator = RagasEvaluator(
                config or make_config(server),
                JudgeMetrics(CollectorRegistry()),
                embedding_model="embed-test",
                **kwargs,
            )
        except RagasUnavailableError as exc:
            service_unavailable(str(exc))
        made.append(evaluator)
        return evaluator

    yield make
    for evaluator in made:
        await evaluator.aclose()


def chat(server: OpenAIServer) -> list[Received]:
    return [r for r in server.requests if not r.embedding]


def embeddings(server: OpenAIServer) -> list[Received]:
    return [r for r in server.requests if r.embedding]


def reported(server: OpenAIServer, key: str) -> int:
    """The tokens of `key` the server reported, over every answered request."""
    return sum((r.usage or {}).get(key, 0) for r in server.requests)


def assert_well_formed(result: EvaluationResult) -> None:
    """Every score is in [0, 1] or unmeasured with a reason; never NaN."""
    for name, score in result.scores.items():
        if score.value is None:
            assert score.reason, name
        else:
            assert not math.isnan(score.value), name
            assert 0.0 <= score.value <= 1.0, (name, score.value)


# ---------------------------------------------------------------------------------------------
# scores


async def test_english_scores_in_range_with_statement_verdicts(
    server: OpenAIServer, script: RagasScript, make_evaluator: Callable[..., Any]
) -> None:
    evaluator = make_evaluator()
    result = await evaluator.evaluate(EN)

    assert result.evaluator == "ragas"
    assert (result.trace_id, result.conversation_id, result.turn, result.agent) == (
        "en-1",
        "conv-en-1",
        1,
        "support-bot",
    )
    assert list(result.scores) == [
        "faithfulness",
        "answer_relevancy",
        "context_precision",
        "context_utilization",
    ]
    assert result.errors == []
    assert_well_formed(result)
    s = result.scores
    assert s["faithfulness"].value == pytest.approx(0.5)
    assert [(v.supported, UNSUPPORTED in v.statement) for v in result.statements] == [
        (True, False),
        (False, True),
    ]
    assert result.unsupported_claims == [result.statements[1].statement]
    assert all(v.reason for v in result.statements)
    # chunk 1 useful, chunk 2 not: average precision 1.0 (ragas adds 1e-10 to the denominator)
    assert s["context_precision"].value == pytest.approx(1.0)
    assert s["context_utilization"] == s["context_precision"]
    assert s["answer_relevancy"].value is not None and 0.1 < s["answer_relevancy"].value <= 1.0

    # ragas's real prompts went over HTTP: statements + NLI, 3 generated questions, 1 per chunk
    assert sorted(script.tasks) == sorted(
        ["StatementGeneratorOutput", "NLIStatementOutput"]
        + ["AnswerRelevanceOutput"] * 3
        + ["ContextPrecisionOutput"] * 2
    )
    assert len(chat(server)) == 7
    assert {r.body.get("model") for r in chat(server)} == {"judge-test"}
    assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {API_KEY}"}
    assert [len(r.inputs) for r in embeddings(server)] == [1, 3]  # the question, then 3 questions
    assert {r.body.get("model") for r in embeddings(server)} == {"embed-test"}
    # tokens: what the server reported, summed over every response
    assert result.tokens is not None
    assert result.tokens.input_tokens == reported(server, "prompt_tokens")
    assert result.tokens.output_tokens == reported(server, "completion_tokens")
    assert result.judge_model == "judge-test"
    assert result.latency_ms is not None and result.latency_ms > 0
    assert not evaluator.circuit_open


async def test_japanese_scores_in_range_with_statement_verdicts(
    server: OpenAIServer, make_evaluator: Callable[..., Any]
) -> None:
    result = await make_evaluator().evaluate(JA)
    assert result.errors == []
    assert_well_formed(result)
    assert result.scores["faithfulness"].value == pytest.approx(0.5)
    assert [v.supported for v in result.statements] == [True, False]
    assert "30日以内" in result.statements[0].statement
    assert result.scores["context_precision"].value == pytest.approx(1.0)
    assert result.scores["answer_relevancy"].measured
    # the Japanese text went out as is (ragas dumps its inputs as UTF-8 JSON)
    assert any("年間プラン" in r.text for r in chat(server))


async def test_golden_metrics_against_the_reference(
    server: OpenAIServer, script: RagasScript, make_evaluator: Callable[..., Any]
) -> None:
    evaluator = make_evaluator()
    result = await evaluator.evaluate_with_reference(EN)
    assert result.errors == []
    assert_well_formed(result)
    assert set(result.scores) == {
        "faithfulness",
        "answer_relevancy",
        "context_precision",
        "context_utilization",
        "answer_correctness",
        "semantic_similarity",
        "context_recall",
    }
    s = result.scores
    # the reference's one sentence is attributed to the contexts
    assert s["context_recall"].value == pytest.approx(1.0)
    assert s["semantic_similarity"].value is not None and 0.3 < s["semantic_similarity"].value < 1
    # 1 TP, 1 FP (the unsupported claim), 0 FN: F1 = 2/3, weighted 0.75 with 0.25 x cosine
    assert s["answer_correctness"].value is not None
    assert 0.5 < s["answer_correctness"].value < 0.95
    assert "ClassificationWithReason" in script.tasks and "ContextRecallOutput" in script.tasks

    # a reference passed in wins; none at all leaves the golden metrics unmeasured
    ja = await evaluator.evaluate_with_reference(JA, reference=JA.reference)
    assert ja.scores["context_recall"].measured and ja.scores["semantic_similarity"].measured
    bare = await evaluator.evaluate_with_reference(EN.model_copy(update={"reference": None}))
    for name in ("answer_correctness", "semantic_similarity", "context_recall"):
        assert bare.scores[name].value is None
        assert bare.scores[name].reason == "no_reference"
    assert bare.scores["faithfulness"].measured


async def test_preconditions_are_unmeasured_without_calls(
    server: OpenAIServer, make_evaluator: Callable[..., Any]
) -> None:
    evaluator = make_evaluator()
    no_ctx = await evaluator.evaluate(EN.model_copy(update={"contexts": []}))
    assert no_ctx.scores["faithfulness"].reason == "no_contexts"
    assert no_ctx.scores["context_precision"].reason == "no_contexts"
    assert no_ctx.scores["context_utilization"].reason == "no_contexts"
    assert no_ctx.scores["answer_relevancy"].measured
    textless = await evaluator.evaluate(EN.model_copy(update={"contexts_without_text": 1}))
    for name in ("faithfulness", "context_precision", "context_utilization"):
        assert textless.scores[name].reason == "contexts_without_text"
    assert textless.scores["answer_relevancy"].measured
    server.reset()
    empty = await evaluator.evaluate(EN.model_copy(update={"answer": "  "}))
    assert {s.reason for s in empty.scores.values()} == {"empty_answer"}
    assert server.requests == []
    assert empty.tokens is None


async def test_everything_sent_is_redacted(
    server: OpenAIServer, make_evaluator: Callable[..., Any]
) -> None:
    secret_trace = trace(
        "pii-1",
        "My e-mail is jane.doe@example.com, can I get a refund? Call 090-1234-5678.",
        ["Refunds: write to refunds@example.com or quote card 4111 1111 1111 1111."],
        "Yes, jane.doe@example.com will receive the refund on card 4111-1111-1111-1111.",
        reference="Refunds are sent to jane.doe@example.com.",
    )
    result = await make_evaluator().evaluate_with_reference(secret_trace)
    assert_well_formed(result)
    sent = "\n".join(r.text for r in server.requests)
    assert len(embeddings(server)) >= 1
    for leaked in ("jane.doe@example.com", "refunds@example.com", "090-1234-5678", "4111"):
        assert leaked not in sent
    assert "[REDACTED]" in sent


# ---------------------------------------------------------------------------------------------
# failures: unmeasured with a reason, never 0, never NaN


async def test_garbage_replies_are_unmeasured_malformed_after_one_retry(
    server: OpenAIServer, script: RagasScript, make_evaluator: Callable[..., Any]
) -> None:
    script.override = lambda r: None if r.embedding else Reply(content="Sure! Here you go: {{{")
    result = await make_evaluator().evaluate(EN)
    for name in ("faithfulness", "answer_relevancy", "context_precision", "context_utilization"):
        assert result.scores[name].value is None, name
        assert result.scores[name].reason == "malformed_output", name
    assert result.statements == []
    assert any("malformed_output" in e for e in result.errors)
    # the first call of each of the 3 metrics was asked twice (instructor max_retries=1)
    assert len(chat(server)) == 6
    assert all(API_KEY not in e and "Sure!" not in e for e in result.errors)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
async def test_nan_results_are_unmeasured(
    server: OpenAIServer, script: RagasScript, make_evaluator: Callable[..., Any]
) -> None:
    def nan_inducing(received: Received) -> Reply | None:
        if received.embedding:  # zero vectors: ragas's cosine is 0/0 = NaN
            return Reply(content=[[0.0] * 8 for _ in received.inputs])
        task = ragas_task(received)
        if task and task[0] == "StatementGeneratorOutput":
            return Reply(content={"statements": []})  # ragas: faithfulness NaN
        if task and task[0] == "ContextRecallOutput":
            return Reply(content={"classifications": []})  # ragas: context recall NaN
        return None

    script.override = nan_inducing
    result = await make_evaluator().evaluate_with_reference(EN)
    assert_well_formed(result)
    s = result.scores
    assert (s["faithfulness"].value, s["faithfulness"].reason) == (None, "no_claims")
    assert (s["answer_relevancy"].value, s["answer_relevancy"].reason) == (None, "nan_result")
    assert (s["context_recall"].value, s["context_recall"].reason) == (None, "nan_result")
    assert s["semantic_similarity"].reason == "nan_result"
    assert s["context_precision"].measured  # unaffected


async def test_a_metric_past_its_timeout_is_unmeasured(
    server: OpenAIServer, script: RagasScript, make_evaluator: Callable[..., Any]
) -> None:
    script.override = lambda r: Reply(delay=3.0) if not r.embedding else None
    evaluator = make_evaluator(metric_timeout_seconds=0.5)
    started = time.monotonic()
    result = await evaluator.evaluate(EN)
    assert time.monotonic() - started < 2.5
    for name in ("faithfulness", "answer_relevancy", "context_precision", "context_utilization"):
        assert (result.scores[name].value, result.scores[name].reason) == (None, "judge_timeout")
    assert any("within 0.5 s" in e for e in result.errors)


async def test_the_client_timeout_and_retry_count_come_from_the_config(
    server: OpenAIServer, script: RagasScript, make_evaluator: Callable[..., Any]
) -> None:
    script.override = lambda r: Reply(delay=2.0) if not r.embedding else None
    config = make_config(server, timeout_seconds=0.3, max_retries=1)
    evaluator = make_evaluator(config, enabled=["context_precision"])
    client = evaluator.client
    assert client.max_retries == 1
    assert client.timeout.read == pytest.approx(0.3)
    result = await evaluator.evaluate(EN)
    score = result.scores["context_precision"]
    assert (score.value, score.reason) == (None, "judge_timeout")
    assert "APITimeoutError" in result.errors[0]
    assert len(chat(server)) == 2  # the first chunk's call, retried once by the openai client


async def test_rate_limit_is_retried_and_still_measured(
    server: OpenAIServer, make_evaluator: Callable[..., Any]
) -> None:
    evaluator = make_evaluator(enabled=["context_precision"])
    server.push(Reply.error(429, retry_after=0))
    result = await evaluator.evaluate(EN)
    assert result.scores["context_precision"].value == pytest.approx(1.0)
    assert len(chat(server)) == 3  # 429, then the two chunks
    requests = evaluator.metrics.requests
    assert requests.labels(evaluator="ragas", outcome="rate_limited")._value.get() == 1
    assert requests.labels(evaluator="ragas", outcome="ok")._value.get() == 2


async def test_circuit_opens_while_the_endpoint_is_down_and_recovers(
    server: OpenAIServer, make_evaluator: Callable[..., Any]
) -> None:
    now = [1000.0]
    config = make_config(server, max_retries=0, circuit_failure_threshold=2)
    evaluator = make_evaluator(config, enabled=["faithfulness"], clock=lambda: now[0])
    await server.stop()
    for _ in range(2):
        down = await evaluator.evaluate(EN)
        assert down.scores["faithfulness"].reason == "judge_error"
        assert "APIConnectionError" in down.errors[0]
    assert evaluator.circuit_open
    blocked = await evaluator.evaluate(EN)
    assert blocked.scores["faithfulness"].reason == "circuit_open"
    await server.start()
    server.reset()
    assert (await evaluator.evaluate(EN)).scores["faithfulness"].reason == "circuit_open"
    assert server.requests == []  # nothing sent while open
    now[0] += 31.0
    assert not evaluator.circuit_open  # a probe may go
    recovered = await evaluator.evaluate(EN)
    assert recovered.scores["faithfulness"].value == pytest.approx(0.5)
    assert not evaluator.circuit_open


async def test_offline_evaluations_wait_out_an_open_circuit(
    server: OpenAIServer, make_evaluator: Callable[..., Any]
) -> None:
    """``score --evaluator ragas`` sheds nothing: an evaluation that finds the circuit open
    waits for the next probe (the server restarted meanwhile) instead of ending circuit_open,
    where the daemon's evaluation is refused at once."""
    config = make_config(
        server, max_retries=0, circuit_failure_threshold=2, circuit_reset_seconds=2.0
    )
    offline = make_evaluator(config, enabled=["faithfulness"], wait_for_circuit=True)
    daemon = make_evaluator(config, enabled=["faithfulness"])
    await server.stop()
    for evaluator in (offline, daemon):
        for _ in range(2):
            down = await evaluator.evaluate(EN)
            assert down.scores["faithfulness"].reason == "judge_error"
        assert evaluator.circuit_open
    await server.start()
    server.reset()
    refused = await daemon.evaluate(EN)
    assert refused.scores["faithfulness"].reason == "circuit_open"
    waited = await offline.evaluate(EN)
    assert waited.scores["faithfulness"].value == pytest.approx(0.5)
    assert not offline.circuit_open
    assert len(chat(server)) > 0, "the probe went out and was answered"


# ---------------------------------------------------------------------------------------------
# telemetry and packaging

_connections: list[tuple[str, Any]] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _connections is not None and event in ("socket.connect", "socket.getaddrinfo"):
        _connections.append((event, args[1] if event == "socket.connect" else args[:2]))


sys.addaudithook(_audit)


@pytest.fixture
def connections() -> Iterator[list[tuple[str, Any]]]:
    global _connections
    _connections = []
    try:
        yield _connections
    finally:
        _connections = None


async def test_telemetry_is_off_and_nothing_leaves_for_anywhere_else(
    server: OpenAIServer,
    make_evaluator: Callable[..., Any],
    connections: list[tuple[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "false")  # forced back on construction
    evaluator = make_evaluator()
    assert os.environ["RAGAS_DO_NOT_TRACK"] == "true"
    analytics = sys.modules["ragas._analytics"]
    assert analytics.do_not_track() is True

    result = await evaluator.evaluate_with_reference(EN)
    assert_well_formed(result)
    await asyncio.sleep(1.5)  # ragas's analytics batcher thread wakes every second
    assert server.port is not None
    assert connections, "the audit hook saw no connection at all"
    for event, address in connections:
        if event == "socket.connect":
            assert tuple(address[:2]) == ("127.0.0.1", server.port), address
        else:
            assert address[0] in ("127.0.0.1", "localhost"), address
    assert analytics._analytics_batcher.buffer == []


def test_without_ragas_construction_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['ragas'] = None  # as if the extra were not installed\n"
        "from monitor.config.judge import JudgeConfig\n"
        "from monitor.evaluators.ragas_adapter import RagasEvaluator\n"
        "from monitor.evaluators.ragas_runtime import RagasUnavailableError\n"
        "try:\n"
        "    RagasEvaluator(JudgeConfig(base_url='http://127.0.0.1:9/v1'))\n"
        "except RagasUnavailableError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('constructed without ragas')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "pip install 'rag-monitor[ragas]'" in out.stdout
