"""User-stated constraints: extracted by the real LLM judge, carried forward, then withdrawn."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from monitor.config.conversation import ConversationConfig
from monitor.config.judge import JudgeConfig
from monitor.evaluators.llm import LLMJudge
from monitor.metrics import AgentLabels
from monitor.models import Trace
from monitor.stages.conversation import ConversationMetrics, ConversationTracker
from tests.support.openai_server import OpenAIServer
from tests.support.traces import make_trace

CONTEXT = "The Umeda store opens at 9:00 and closes at 21:00."
LONG = "The Umeda store opens at 9:00 in the morning and it closes at 21:00 every evening."


def _trace(turn: int, query: str, answer: str) -> Trace:
    """Turn `turn` of conversation "c"."""
    return make_trace(
        query, [CONTEXT], answer, trace_id=f"t{turn}", agent="a", conversation_id="c", turn=turn
    )


async def test_a_stated_constraint_is_carried_forward_until_withdrawn() -> None:
    async with OpenAIServer() as server:
        judge = LLMJudge(JudgeConfig(base_url=server.url, api_key="sk-x", max_retries=0))
        registry = CollectorRegistry()
        tracker = ConversationTracker(
            ConversationConfig(), ConversationMetrics(registry, AgentLabels(10)), judge=judge
        )
        turns = [
            _trace(1, "When does Umeda open? Answer in at most 40 characters.", "At 9:00."),
            _trace(2, "And when does it close?", LONG),  # breaks the carried rule
            _trace(3, "WITHDRAW K1 - long answers are fine now. Opening hours?", LONG),
        ]
        for trace in turns:
            result = await judge.evaluate(trace)
            await tracker.observe(trace, result)
        await judge.aclose()
    value = registry.get_sample_value
    drift = {"agent": "a", "turn_bucket": "2"}
    assert value("ragmon_turn_drift_ratio_sum", drift) == 1.0, "turn 2 violates max_chars 40"
    assert value("ragmon_turn_drift_ratio_sum", {"agent": "a", "turn_bucket": "3"}) == 0.0, (
        "withdrawn at turn 3: nothing left to violate"
    )
    assert value("ragmon_constraint_checks_total", {"agent": "a", "outcome": "violated"}) == 1.0
    assert value("ragmon_turn_outcome_score_count", {"agent": "a", "metric": "coherence"}) == 3.0
    turn_calls = server.requests_for("ragmon_turn")
    assert len(turn_calls) == 3, "one turn judgement per judged turn"
