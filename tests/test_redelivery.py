"""A trace read again (after a crash or a rebalance) costs nothing it already cost (issue 21).

Through the real scoring stage (tier 0, the LLM judge against the scripted OpenAI-compatible
server, the conversation stage, a real SQLite store), restarted between deliveries like a new
process: a re-delivered judged turn is not judged again (faithfulness, relevance and the turn
call counted separately), a verdict obtained by a process that never stored its result is taken
from the store, and a result that comes out the same is neither stored nor counted as written.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.config.judge import JudgeConfig
from monitor.daemon import ScoringStage, build_scoring_stage
from monitor.evaluators.llm import LLMJudge
from monitor.metrics import Metrics
from monitor.models import EvaluationResult, Trace
from monitor.sinks.store import Store
from monitor.sinks.verdicts import StoredVerdicts
from tests.support.openai_server import OpenAIServer
from tests.support.traces import judge_trace


@asynccontextmanager
async def scoring(
    db: Path, judge_url: str, registry: CollectorRegistry
) -> AsyncIterator[ScoringStage]:
    """The scoring stage of one process: every conversation judged."""
    settings = Settings.model_validate(
        {
            "store": {"url": f"sqlite+aiosqlite:///{db}"},
            "results": {"topic": None},
            "judge": {"base_url": judge_url, "api_key": "sk-test", "max_retries": 0},
            "sampling": {"rate": 1.0},
        }
    )
    async with AsyncExitStack() as stack:
        yield await build_scoring_stage(settings, Metrics(registry), stack, None)


def _turn(n: int) -> Trace:
    return judge_trace(n, conversation_id="conv-1", turn=None)


def _calls(server: OpenAIServer) -> Counter[str]:
    return Counter(r.task or "?" for r in server.requests if not r.embedding)


def _stored(db: Path) -> dict[tuple[str, str], str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT trace_id, evaluator, result FROM evaluation_results")
        return {(t, e): r for t, e, r in rows}


async def test_a_redelivered_judged_turn_is_neither_judged_nor_written_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    turns = [_turn(1), _turn(2)]
    async with OpenAIServer() as server:
        async with scoring(db, server.url, CollectorRegistry()) as first:
            for trace in turns:
                await first.processor.process(trace)
        asked = _calls(server)
        assert asked == {"ragmon_faithfulness": 2, "ragmon_relevance": 2, "ragmon_turn": 2}
        before = _stored(db)

        registry = CollectorRegistry()  # a new process: nothing in memory
        async with scoring(db, server.url, registry) as second:
            for trace in reversed(turns):
                await second.processor.process(trace)
        assert _calls(server) == asked, "no call for a verdict the store has"
    assert _stored(db) == before, "the same results, tokens and all"
    value = registry.get_sample_value
    assert value("ragmon_store_writes_total", {"outcome": "unchanged"}) == 4.0
    assert value("ragmon_store_writes_total", {"outcome": "ok"}) == 0.0


async def test_a_verdict_whose_result_was_never_stored_is_not_asked_again(tmp_path: Path) -> None:
    """The judge answered, then the process died (or lost the partition) before the result
    was stored: the verdict was kept as it arrived, and the next owner uses it."""
    db = tmp_path / "r.db"
    trace = _turn(1)
    async with OpenAIServer() as server:
        store = await Store.open(f"sqlite+aiosqlite:///{db}")
        try:
            config = JudgeConfig(base_url=server.url, api_key="sk-test", max_retries=0)
            judge = LLMJudge(config, verdicts=StoredVerdicts(store))
            numbered = trace.model_copy(update={"turn": 1})
            first = await judge.evaluate(numbered)
            turn = await judge.judge_turn(numbered, [], [])
            await judge.aclose()
        finally:
            await store.close()
        asked = _calls(server)
        assert _stored(db) == {}, "nothing of the trace was stored"
        async with scoring(db, server.url, CollectorRegistry()) as next_owner:
            await next_owner.processor.process(trace)
        assert _calls(server) == asked
    stored = _stored(db)
    llm = EvaluationResult.model_validate_json(stored[(trace.trace_id, "llm")])
    assert llm.scores == first.scores and llm.statements == first.statements
    assert turn.tokens is not None and first.tokens is not None and llm.tokens is not None
    assert llm.tokens.input_tokens == (first.tokens.input_tokens or 0) + (
        turn.tokens.input_tokens or 0
    ), "the tokens the trace cost, once"
