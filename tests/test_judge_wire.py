"""What the judge puts on the wire, and how it reads refusals (issue 17), against the scripted
OpenAI-compatible server: exact requests and replies, so exact assertions.

Real model servers (llama.cpp's llama-server and llama_cpp.server) are in
tests/test_judge_real_servers.py; they answer the same requests with a real model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_client import CallFailure
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.judge_prompts import (
    FAITHFULNESS_SCHEMA,
    MAX_REPLY_TOKENS,
    MIN_REPLY_TOKENS,
    RELEVANCE_SCHEMA,
    reply_tokens,
)
from monitor.evaluators.llm import METRICS, LLMJudge
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenTally
from monitor.golden.dataset import GenerationCase
from monitor.golden.judges import LLMAnswerJudge
from monitor.models import Constraint
from tests.support.openai_server import OpenAIServer, Received, Reply
from tests.support.traces import judge_trace
from tests.test_llm_judge import API_KEY, FAITH, REL, make_config, sample

EMBEDDING_KEY = "sk-embeddings-only-key-4242"


@pytest_asyncio.fixture(loop_scope="function")
async def server() -> AsyncIterator[OpenAIServer]:
    srv = OpenAIServer()
    await srv.start()
    yield srv
    await srv.stop()


@pytest_asyncio.fixture(loop_scope="function")
async def judges(server: OpenAIServer) -> AsyncIterator[Any]:
    made: list[LLMJudge] = []

    def make(budget: TokenBudget | None = None, **overrides: Any) -> LLMJudge:
        judge = LLMJudge(
            make_config(server, **overrides), JudgeMetrics(CollectorRegistry()), budget=budget
        )
        made.append(judge)
        return judge

    yield make
    for judge in made:
        await judge.aclose()


def _error(status: int, message: str, **fields: Any) -> Reply:
    return Reply.error(status, body={"error": {"message": message, **fields}})


# ---------------------------------------------------------------------------------------------
# max_tokens


def test_reply_budget_is_sized_from_the_schema_and_bounded() -> None:
    one = reply_tokens(FAITHFULNESS_SCHEMA, {"statements": 1})
    six = reply_tokens(FAITHFULNESS_SCHEMA, {"statements": 6})
    assert MIN_REPLY_TOKENS <= one < six <= MAX_REPLY_TOKENS
    assert reply_tokens(FAITHFULNESS_SCHEMA, {"statements": 10_000}) == MAX_REPLY_TOKENS
    two_contexts = reply_tokens(RELEVANCE_SCHEMA, {"contexts": 2, "aspects": 2})
    five_contexts = reply_tokens(RELEVANCE_SCHEMA, {"contexts": 5, "aspects": 2})
    assert two_contexts < five_contexts


async def test_every_call_is_bounded_by_max_tokens(server: OpenAIServer, judges: Any) -> None:
    judge: LLMJudge = judges()
    await judge.evaluate(judge_trace(1))
    await judge.judge_turn(judge_trace(1), [Constraint(id="k1", text="answer in English")], [])
    bounds = {r.task: r.body.get("max_tokens") for r in server.requests}
    assert set(bounds) == {FAITH, REL, "ragmon_turn"}
    for task, bound in bounds.items():
        assert isinstance(bound, int) and MIN_REPLY_TOKENS <= bound <= MAX_REPLY_TOKENS, task

    server.reset()
    fixed: LLMJudge = judges(max_tokens=300)
    await fixed.evaluate(judge_trace(2))
    assert [r.body.get("max_tokens") for r in server.requests] == [300, 300]


async def test_golden_reference_calls_are_bounded_too(server: OpenAIServer) -> None:
    judge = LLMAnswerJudge(make_config(server))
    try:
        case = GenerationCase(
            id="q1", question="When does branch 1 open?", reference="Branch 1 opens at 9:00."
        )
        await judge.judge(case, "Branch 1 opens at 9:00.", ["Branch 1 opens at 9:00."])
    finally:
        await judge.aclose()
    chat = [r for r in server.requests if not r.embedding]
    assert {r.task for r in chat} == {FAITH, REL, "ragmon_reference"}
    assert all(isinstance(r.body.get("max_tokens"), int) for r in chat)


async def test_max_completion_tokens_when_the_server_asks_for_it(
    server: OpenAIServer, judges: Any
) -> None:
    def script(r: Received) -> Reply | None:
        if "max_tokens" in r.body:
            return _error(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                param="max_tokens",
            )
        return None

    server.script = script
    judge: LLMJudge = judges()
    first = await judge.evaluate(judge_trace(1))
    assert first.errors == []
    assert judge.client.token_parameter == "max_completion_tokens"
    server.reset()
    await judge.evaluate(judge_trace(2))
    assert all("max_completion_tokens" in r.body for r in server.requests)
    assert len(server.requests) == 2  # remembered: no rejected attempt any more


# ---------------------------------------------------------------------------------------------
# response_format


async def test_json_object_mode_carries_the_schema(server: OpenAIServer, judges: Any) -> None:
    judge: LLMJudge = judges(response_format="json_object")
    result = await judge.evaluate(judge_trace(1))
    assert result.errors == []
    for r in server.requests:
        fmt = r.body["response_format"]
        assert fmt["type"] == "json_object"
        assert fmt["schema"]["required"], "the task's schema rides along"


async def test_response_format_rejected_with_500_falls_back_once_and_remembers(
    server: OpenAIServer, judges: Any
) -> None:
    # llama_cpp.server's answer to json_schema, verbatim in substance
    def script(r: Received) -> Reply | None:
        if r.response_format == "json_schema":
            return _error(
                500,
                "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
                "  Input should be 'text' or 'json_object'",
            )
        return None

    server.script = script
    judge: LLMJudge = judges(circuit_failure_threshold=1)
    first = await judge.evaluate(judge_trace(1))
    assert first.errors == []
    assert all(first.scores[m].measured for m in METRICS)
    # one request at a time at first: the call that waited is sent in the mode learnt meanwhile
    formats = [r.response_format for r in server.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert judge.client.circuit.state == "closed"  # a refusal of the format is no outage
    assert judge.client.response_mode == "json_object"

    server.reset()
    await judge.evaluate(judge_trace(2))
    assert [r.response_format for r in server.requests] == ["json_object", "json_object"]
    assert all("schema" in r.body["response_format"] for r in server.requests)


async def test_schema_in_json_object_refused_then_plain_json_object(
    server: OpenAIServer, judges: Any
) -> None:
    def script(r: Received) -> Reply | None:
        fmt = r.body.get("response_format") or {}
        if fmt.get("type") == "json_schema" or "schema" in fmt:
            return _error(400, "Unknown parameter: 'response_format.schema'.")
        return None

    server.script = script
    judge: LLMJudge = judges()
    result = await judge.evaluate(judge_trace(1))
    assert result.errors == []
    assert judge.client.response_mode == "json_object_without_schema"


async def test_json_schema_asked_for_is_not_stepped_down(server: OpenAIServer, judges: Any) -> None:
    server.reject_json_schema = True
    judge: LLMJudge = judges(response_format="json_schema")
    result = await judge.evaluate(judge_trace(1))
    assert result.scores["faithfulness"].reason == "judge_error"
    assert any("response_format" in e for e in result.errors)  # the server's words kept
    assert len(server.requests) == 2  # one call each, no fallback, no retry


async def test_other_400s_are_final_and_not_taken_for_a_format_refusal(
    server: OpenAIServer, judges: Any
) -> None:
    server.script = lambda r: (
        _error(400, "temperature must be at most 2") if r.task == FAITH else None
    )
    judge: LLMJudge = judges()
    result = await judge.evaluate(judge_trace(1))
    assert len(server.requests_for(FAITH)) == 1
    assert result.scores["faithfulness"].reason == "judge_error"
    assert any("temperature must be at most 2" in e for e in result.errors)
    assert judge.client.response_mode == "json_schema"


# ---------------------------------------------------------------------------------------------
# Errors by kind


@pytest.mark.parametrize(
    ("status", "message", "fields"),
    [
        (  # llama.cpp llama-server
            400,
            "the request exceeds the available context size, try increasing it",
            {"type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096},
        ),
        (  # OpenAI, vLLM, llama_cpp.server
            400,
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4800 in the messages, 200 in the completion).",
            {"type": "invalid_request_error", "code": "context_length_exceeded"},
        ),
        (500, "Requested tokens (5000) exceed context window of 4096", {}),
    ],
    ids=["llama-server", "openai", "500"],
)
async def test_context_too_long_is_final_for_the_trace_with_its_cause(
    server: OpenAIServer, judges: Any, status: int, message: str, fields: dict[str, Any]
) -> None:
    server.script = lambda r: _error(status, message, **fields) if r.task == FAITH else None
    judge: LLMJudge = judges(circuit_failure_threshold=1)
    result = await judge.evaluate(judge_trace(1))
    assert len(server.requests_for(FAITH)) == 1  # no retry, no response_format fallback
    assert result.scores["faithfulness"].reason == "context_too_long"
    assert any("context" in e and str(status) in e for e in result.errors)
    assert result.scores["answer_relevancy"].measured
    assert judge.client.circuit.state == "closed"


async def test_unsupported_embeddings_do_not_open_the_chat_circuit(server: OpenAIServer) -> None:
    def script(r: Received) -> Reply | None:
        if r.embedding:
            return _error(
                501, "This server does not support embeddings. Start it with `--embeddings`"
            )
        return None

    server.script = script
    config = make_config(server, circuit_failure_threshold=1, max_retries=3)
    judge = LLMAnswerJudge(config)
    case = GenerationCase(id="q1", question="When does it open?", reference="It opens at 9:00.")
    try:
        for _ in range(3):
            scores = await judge.judge(case, "It opens at 9:00.", ["It opens at 9:00."])
            assert scores.unmeasured["semantic_similarity"] == "judge_error"
            assert scores.faithfulness is not None  # chat goes on
    finally:
        await judge.aclose()
    assert len([r for r in server.requests if r.embedding]) == 3  # once per case, no retry
    assert judge.client.circuit.state == "closed"
    assert judge.client.embeddings_circuit.state == "closed"


async def test_embeddings_have_their_own_endpoint_and_key(server: OpenAIServer) -> None:
    async with OpenAIServer() as embeddings:
        config = make_config(
            server, embedding_base_url=embeddings.url, embedding_api_key=EMBEDDING_KEY
        )
        judge = LLMAnswerJudge(config)
        case = GenerationCase(id="q1", question="When?", reference="It opens at 9:00.")
        try:
            scores = await judge.judge(case, "It opens at 9:00.", ["It opens at 9:00."])
        finally:
            await judge.aclose()
        assert scores.semantic_similarity is not None
        assert not any(r.embedding for r in server.requests)
        assert [r.embedding for r in embeddings.requests] == [True]
        auth = embeddings.requests[0].headers["authorization"]
        assert EMBEDDING_KEY in auth and API_KEY not in auth  # the chat key stays with chat


async def test_embeddings_outage_opens_only_the_embeddings_circuit(
    server: OpenAIServer,
) -> None:
    embeddings = OpenAIServer()
    await embeddings.start()
    url = embeddings.url
    await embeddings.stop()  # refuses connections
    config = make_config(server, embedding_base_url=url, circuit_failure_threshold=2, max_retries=1)
    judge = LLMAnswerJudge(config)
    case = GenerationCase(id="q1", question="When?", reference="It opens at 9:00.")
    try:
        scores = await judge.judge(case, "It opens at 9:00.", ["It opens at 9:00."])
        assert scores.unmeasured["semantic_similarity"] == "judge_error"
        assert judge.client.embeddings_circuit.state == "open"
        assert judge.client.circuit.state == "closed"
        assert scores.context_recall is not None
        gauge = judge.metrics.registry.get_sample_value
        labels = {"evaluator": "golden", "endpoint": "embeddings"}
        assert gauge("ragmon_judge_circuit_open", labels) == 1
        assert gauge("ragmon_judge_circuit_open", {**labels, "endpoint": "chat"}) == 0
    finally:
        await judge.aclose()


# ---------------------------------------------------------------------------------------------
# Half-open: traces wait for the probe


async def test_traces_arriving_during_the_probe_wait_for_it(
    server: OpenAIServer, judges: Any
) -> None:
    down = True
    server.script = lambda r: Reply.error(503) if down else Reply(delay=0.3)
    judge: LLMJudge = judges(circuit_failure_threshold=2, circuit_reset_seconds=0.2, max_retries=0)
    await judge.evaluate(judge_trace(1))
    assert judge.client.circuit.state == "open"
    down = False  # the server restarted
    await asyncio.sleep(0.25)
    assert not judge.circuit_open  # a probe may go: the scoring stage does not shed
    results = await asyncio.gather(*(judge.evaluate(judge_trace(n)) for n in range(2, 17)))
    assert [r.errors for r in results] == [[]] * 15
    assert all(r.scores[m].measured for r in results for m in METRICS)
    assert judge.client.circuit.state == "closed"


async def test_waiting_traces_fail_circuit_open_when_the_probe_fails(
    server: OpenAIServer, judges: Any
) -> None:
    server.script = lambda r: Reply.error(503, delay=0.2)
    judge: LLMJudge = judges(circuit_failure_threshold=1, circuit_reset_seconds=0.2, max_retries=0)
    await judge.evaluate(judge_trace(1))
    await asyncio.sleep(0.25)
    seen = len(server.requests)
    results = await asyncio.gather(*(judge.evaluate(judge_trace(n)) for n in range(2, 6)))
    assert len(server.requests) == seen + 1  # only the probe went out
    reasons = sorted(r.scores["faithfulness"].reason or "" for r in results)
    assert reasons.count("circuit_open") >= 3
    assert judge.client.circuit.state == "open"


# ---------------------------------------------------------------------------------------------
# Tokens: every call counts, against the shared budget


async def test_every_token_is_charged_to_the_budget(server: OpenAIServer, judges: Any) -> None:
    budget = TokenBudget(per_hour=10**9)
    judge: LLMJudge = judges(budget=budget)
    result = await judge.evaluate(judge_trace(1))
    turn = await judge.judge_turn(judge_trace(1), [Constraint(id="k1", text="be brief")], [])
    assert result.tokens is not None and turn.tokens is not None
    spent = sum(sum(r.usage.values()) for r in server.requests if r.usage)
    assert budget.used == spent
    assert spent == sum(
        (u.input_tokens or 0) + (u.output_tokens or 0) for u in (result.tokens, turn.tokens)
    )
    counted = sample(judge, "ragmon_judge_input_tokens_total", evaluator="llm") + sample(
        judge, "ragmon_judge_output_tokens_total", evaluator="llm"
    )
    assert counted == spent


async def test_golden_judge_tokens_are_in_the_case_result_and_the_budget(
    server: OpenAIServer,
) -> None:
    budget = TokenBudget(per_hour=10**9)
    judge = LLMAnswerJudge(make_config(server), budget=budget)
    case = GenerationCase(id="q1", question="When?", reference="It opens at 9:00.")
    try:
        scores = await judge.judge(case, "It opens at 9:00.", ["It opens at 9:00."])
    finally:
        await judge.aclose()
    spent = sum(sum(r.usage.values()) for r in server.requests if r.usage)
    assert spent > 0
    assert (scores.input_tokens or 0) + (scores.output_tokens or 0) == spent
    assert budget.used == spent
    assert budget.totals["golden"] == spent


def test_budget_window_and_limit() -> None:
    now = [0.0]
    budget = TokenBudget(per_hour=100, clock=lambda: now[0])
    assert budget.allows()
    budget.spend(60, "llm")
    budget.spend(40, "golden")
    assert not budget.allows()
    assert budget.totals == {"llm": 60, "golden": 40}
    now[0] = 3600.0
    assert budget.allows() and budget.used == 0


def test_config_rejects_a_bad_response_format_and_a_tiny_bound() -> None:
    with pytest.raises(ValueError, match="response_format"):
        JudgeConfig.model_validate({"response_format": "yaml"})
    with pytest.raises(ValueError, match="max_tokens"):
        JudgeConfig.model_validate({"max_tokens": 3})
    with pytest.raises(ValueError, match="http"):
        JudgeConfig.model_validate({"embedding_base_url": "ftp://x"})
    assert (
        EMBEDDING_KEY in JudgeConfig.model_validate({"embedding_api_key": EMBEDDING_KEY}).secrets()
    )


async def test_per_token_embeddings_are_mean_pooled_and_garbage_is_malformed(
    server: OpenAIServer, judges: Any
) -> None:
    # llama_cpp.server without pooling for the model: one vector per token
    per_token = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [[1.0, 0.0], [0.0, 1.0]]}],
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }
    garbage = {**per_token, "data": [{"object": "embedding", "index": 0, "embedding": ["x"]}]}
    replies = [Reply(body=per_token), Reply(body=garbage)]
    server.script = lambda r: replies.pop(0) if r.embedding else None
    judge: LLMJudge = judges()
    tally = TokenTally()
    assert await judge.client.embed(["two tokens"], "m", tally) == [[0.5, 0.5]]
    with pytest.raises(CallFailure) as failed:
        await judge.client.embed(["x"], "m", tally)
    assert failed.value.reason == "malformed_output"


async def test_turn_tokens_charged_to_the_trace_result(server: OpenAIServer, judges: Any) -> None:
    judge: LLMJudge = judges()
    result = await judge.evaluate(judge_trace(1))
    turn = await judge.judge_turn(judge_trace(1), [Constraint(id="k1", text="be brief")], [])
    charged = turn.charged_to(result)
    assert result.tokens is not None and turn.tokens is not None and charged.tokens is not None
    spent = sum(sum(r.usage.values()) for r in server.requests if r.usage)
    assert (charged.tokens.input_tokens or 0) + (charged.tokens.output_tokens or 0) == spent
    assert charged.scores == result.scores
