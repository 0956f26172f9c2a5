"""A context is read once and its reading shared by every trace that retrieves it, within a
bound on the characters the cache holds; so is the merge of a trace's contexts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from monitor.evaluators import context_text, support
from monitor.evaluators.context_text import read_context
from monitor.evaluators.support import ContextIndex

CONTEXT = (
    "The Bureau of Labor Statistics (BLS) counted 1,200 workers in 2023. "
    'Its office opens at 9 a.m. {"OutdoorSeating": false, "WiFi": "no"}'
)


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    context_text._read_cached.cache_clear()
    support._merge_cached.cache_clear()
    support._read_question.cache_clear()
    yield
    context_text._read_cached.cache_clear()
    support._merge_cached.cache_clear()
    support._read_question.cache_clear()


def test_a_context_is_read_once_and_its_reading_shared() -> None:
    first = read_context(CONTEXT, 2, 1)
    assert read_context(CONTEXT, 2, 1) is first
    assert read_context(CONTEXT, 3, 1) is not first  # other parameters, another reading
    assert {"1200", "2023", "9"} <= first.numbers
    assert {"bls", "labor", "bureau"} <= first.tokens
    assert (("outdoor", "seat"), False) in first.fields


def test_an_index_of_cached_readings_is_the_index_of_fresh_ones() -> None:
    contexts = [("a", CONTEXT), ("b", "BLS data is published monthly. Workers earn more.")]
    cached = ContextIndex.build(contexts, "How many workers?", window=2, pair_span=1)
    again = ContextIndex.build(contexts, "How many workers?", window=2, pair_span=1)
    context_text._read_cached.cache_clear()
    support._merge_cached.cache_clear()
    fresh = ContextIndex.build(contexts, "How many workers?", window=2, pair_span=1)
    assert cached == again == fresh


def test_traces_retrieving_the_same_contexts_share_their_merge_not_their_ids_or_question() -> None:
    contexts = [("a", CONTEXT), ("b", "BLS data is published monthly. Workers earn more.")]
    first = ContextIndex.build(contexts, "How many workers?", window=2, pair_span=1)
    other = [("x", CONTEXT), ("y", contexts[1][1])]
    second = ContextIndex.build(other, "When does the office open?", window=2, pair_span=1)
    assert second.windows is first.windows and second.idf is first.idf  # merged once
    assert (first.ids, second.ids) == (["a", "b"], ["x", "y"])
    assert "work" in first.question_tokens and "work" not in second.question_tokens
    assert "open" in second.question_tokens
    support._merge_cached.cache_clear()
    context_text._read_cached.cache_clear()
    assert second == ContextIndex.build(other, "When does the office open?", 2, 1)


def test_the_merges_kept_hold_at_most_the_budget_of_characters() -> None:
    texts = [f"Context number {i} says the branch opens at {i}:00. " * 200 for i in range(80)]
    for i in range(0, len(texts), 2):
        ContextIndex.build([("a", texts[i]), ("b", texts[i + 1])], "", window=2, pair_span=1)
    assert support._MERGED.currsize <= context_text.CACHE_CHARS
    assert len(support._MERGED) < len(texts) // 2  # the oldest merges were dropped


def test_the_cache_holds_at_most_its_budget_of_characters() -> None:
    size = 9_000
    texts = [f"Context number {i} says the branch opens at {i}:00. " * 200 for i in range(80)]
    assert all(size <= len(t) <= context_text.CACHE_MAX_CHARS for t in texts)
    for text in texts:
        read_context(text, 2, 1)
    cache = context_text._CACHE
    assert cache.currsize <= context_text.CACHE_CHARS
    assert len(cache) < len(texts)  # the oldest readings were dropped
    last = read_context(texts[-1], 2, 1)
    assert read_context(texts[-1], 2, 1) is last  # the newest is still held


def test_a_context_too_long_to_cache_is_read_every_time() -> None:
    long_text = "A sentence about the harbour. " * (context_text.CACHE_MAX_CHARS // 20)
    first = read_context(long_text, 2, 1)
    second = read_context(long_text, 2, 1)
    assert first is not second and first == second
    assert context_text._CACHE.currsize == 0


def test_a_question_asked_again_is_read_once_within_a_bound_of_characters() -> None:
    contexts = [("a", CONTEXT)]
    first = ContextIndex.build(contexts, "How many workers in 2023?", window=2, pair_span=1)
    again = ContextIndex.build([("b", CONTEXT)], "How many workers in 2023?", 2, 1)
    assert again.question_tokens is first.question_tokens  # read once
    assert first.question_numbers == {"2023"} and "work" in first.question_tokens
    assert first.question_text == "how many workers in 2023?"
    questions = [f"Question {i}: " + "what opens when? " * 500 for i in range(30)]
    for question in questions:
        ContextIndex.build(contexts, question, window=2, pair_span=1)
    assert support._QUESTIONS.currsize <= support.QUESTION_CACHE_CHARS
    assert len(support._QUESTIONS) < len(questions)  # the oldest were dropped
    huge = "Why? " * support.QUESTION_CACHE_CHARS  # too long to keep: read every time
    assert ContextIndex.build(contexts, huge, 2, 1).question_text == huge.lower()
