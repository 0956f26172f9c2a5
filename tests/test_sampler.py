"""The sampler: deterministic per conversation, priority traces always, and what load sheds."""

from __future__ import annotations

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.sampler import Sampler
from monitor.models import Context, EvaluationResult, Score, Trace
from tests.support.traces import FIXED_TIME, make_trace


def trace(conversation: str) -> Trace:
    return make_trace(
        "q", ["text"], "a", trace_id=f"t-{conversation}", conversation_id=conversation
    )


def tier0(support: float = 0.9) -> EvaluationResult:
    return EvaluationResult(
        trace_id="t",
        timestamp=FIXED_TIME,
        evaluator="heuristic",
        scores={"support": Score.of(support)},
    )


def test_a_conversation_is_judged_whole_or_not_at_all() -> None:
    sampler = Sampler(SamplingConfig(rate=0.5))
    decisions = {sampler.decide(trace(f"conv-{i}"), tier0()) for i in range(3)}
    assert decisions <= {"sampled", "skipped"}
    for i in range(50):
        first = sampler.decide(trace(f"conv-{i}"), tier0())
        assert all(sampler.decide(trace(f"conv-{i}"), tier0()) == first for _ in range(3))
    share = sum(sampler.decide(trace(f"c{i}"), tier0()) == "sampled" for i in range(4000)) / 4000
    assert 0.45 < share < 0.55


def test_traces_the_lowered_rate_drops_are_told_apart_from_ordinary_skips() -> None:
    """Under load the effective rate falls below the configured one. A trace the configured
    rate would have judged is `rate_lowered` (shed, counted), not `skipped`."""
    sampler = Sampler(SamplingConfig(rate=0.5, queue_size=100))
    before = {f"c{i}": sampler.decide(trace(f"c{i}"), tier0()) for i in range(2000)}
    sampler.observe_queue(90, now=10.0)  # over 3/4 full: halve the rate
    assert sampler.effective_rate("default") == 0.25
    after = {c: sampler.decide(trace(c), tier0()) for c in before}
    lowered = [c for c in before if after[c] == "rate_lowered"]
    assert lowered and all(before[c] == "sampled" for c in lowered)
    assert all(after[c] == "skipped" for c in before if before[c] == "skipped")
    assert 0.2 < sum(v == "sampled" for v in after.values()) / 2000 < 0.3
    # priority traces are judged whatever the load
    assert sampler.decide(trace(lowered[0]), tier0(support=0.1)) == "priority"
    sampler.observe_queue(10, now=20.0)  # under 1/4: recover step by step
    assert sampler.effective_rate("default") == 0.25 * 1.25


def test_documents_without_text_are_no_priority_for_the_judge() -> None:
    """A trace without contexts is judged first (retrieval may have failed); one whose
    documents merely carry no text is not: the judge could not check them either."""
    sampler = Sampler(SamplingConfig(rate=0.0))
    bare = trace("c-1").model_copy(update={"contexts": []})
    assert sampler.decide(bare, tier0()) == "priority"
    textless = bare.model_copy(update={"contexts_without_text": 3})
    assert sampler.decide(textless, tier0()) == "skipped"


def test_answers_tier_zero_cannot_compare_across_languages_always_go_to_the_judge() -> None:
    """Tier 0 leaves an English answer over Japanese contexts (or one in another language
    than its question) unmeasured: only the judge can score it, so it is always judged."""
    from monitor.evaluators.heuristic import HeuristicEvaluator

    sampler = Sampler(SamplingConfig(rate=0.0))
    tier0_evaluator = HeuristicEvaluator()
    across = trace("c-1").model_copy(
        update={
            "query": "保証期間はどのくらいですか？",
            "contexts": [Context(id="kb-1", text="保証期間は2年です")],
            "answer": "The warranty period is two years.",
        }
    )
    result = tier0_evaluator.evaluate(across)
    assert "cross_language" in result.flags
    assert sampler.decide(across, result) == "priority"
    # an answer in the question's language but not the contexts' (relevancy measured) too
    mixed = across.model_copy(update={"query": "How long is the warranty?"})
    result = tier0_evaluator.evaluate(mixed)
    assert result.scores["faithfulness"].reason == "cross_language"
    assert sampler.decide(mixed, result) == "priority"
    # the same in one language is left to the rate
    same = across.model_copy(update={"answer": "保証期間は2年です。"})
    result = tier0_evaluator.evaluate(same)
    assert "cross_language" not in result.flags
    assert sampler.decide(same, result) == "skipped"
    # and only the answer's language against the question's: relevancy unmeasured
    asked_in_english = same.model_copy(update={"query": "How long is the warranty?"})
    result = tier0_evaluator.evaluate(asked_in_english)
    assert result.scores["answer_relevancy"].reason == "cross_language"
    assert sampler.decide(asked_in_english, result) == "priority"
