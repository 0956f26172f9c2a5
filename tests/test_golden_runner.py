"""The golden-set runner: pure pieces with fixed values, then end to end against real HTTP services.

The end-to-end tests start the fake services of tests/fixtures/golden/service.py on 127.0.0.1
(free port) over a fixed corpus with known rankings per mode: A is ideal, B deliberately worse
(relevant documents pushed down by 1-3 places), C ideal except for the order of the two best
documents of every other query unless alpha >= 0.5.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from monitor.config.golden import (
    DEFAULT_RETRIEVAL_TARGETS,
    GoldenConfig,
    ServiceConfig,
    SuiteConfig,
)
from monitor.config.golden.jsonpath import PathError, extract, parse_path
from monitor.config.golden.template import TemplateError, placeholders, query_parameters, render
from monitor.golden.answers import (
    AnswerJudge,
    JudgeScores,
    admits_not_knowing,
    answer_language,
    expected_language,
    forbidden_terms_found,
    topics_covered,
)
from monitor.golden.client import ServiceClient, ServiceError, read_doc_ids
from monitor.golden.dataset import GenerationCase, RetrievalQuery
from monitor.golden.evaluation import (
    Observation,
    best_mode,
    check_targets,
    compare_modes,
    query_length,
    score_generation_case,
    score_retrieval_query,
    summarise_mode,
)
from monitor.golden.metrics import GoldenMetrics
from monitor.golden.report import render_markdown, write_report
from monitor.golden.results import RunResult
from monitor.golden.runner import run_suite, sweep_variants
from monitor.golden.trec import GoldenDataError
from monitor.retry import RetryMetrics
from tests.fixtures.golden.service import (
    GENERATION_SUITE,
    LATENCY_S,
    RETRIEVAL_SUITE,
    RunningService,
    ServiceState,
    generation_app,
    retrieval_app,
)

LOG2_3 = math.log2(3)
IDCG5 = 7 + 3 / LOG2_3 + 1 / 2  # grades 3, 2, 1 in the ideal order


# --------------------------------------------------------------------------- jsonpath


def test_jsonpath_extracts() -> None:
    doc = {
        "results": [{"id": "a", "meta": {"x": 1}}, {"id": 7, "meta": {"x": 2}}],
        "choices": [{"message": {"content": "hi"}}],
        "key.with.dots": {"v": True},
    }
    assert extract("results[*].id", doc) == ["a", 7]
    assert extract("$.results[*].meta.x", doc) == [1, 2]
    assert extract("choices[0].message.content", doc) == "hi"
    assert extract("choices[-1].message.content", doc) == "hi"
    assert extract("['key.with.dots'].v", doc) is True
    assert extract("results.*.id", doc) == ["a", 7]
    assert parse_path("results[*].id").fans_out and not parse_path("a.b").fans_out


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing", "no key 'missing' at $"),
        ("results[5].id", "index 5 out of range at $.results (length 2)"),
        ("results.id", "$.results is list, not an object"),
        ("results[*].nope", "no key 'nope' at $.results[0]"),
        ("choices[0].message.content[*]", "is str, not a list or object"),
    ],
)
def test_jsonpath_errors_say_where(path: str, message: str) -> None:
    doc = {"results": [{"id": "a"}, {"id": "b"}], "choices": [{"message": {"content": "x"}}]}
    with pytest.raises(PathError) as info:
        extract(path, doc)
    assert message in str(info.value)


@pytest.mark.parametrize("bad", ["", "$", "a..b", "a[x]", "a[", "a b"])
def test_jsonpath_syntax_errors(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_path(bad)


# --------------------------------------------------------------------------- template


def test_template_keeps_types_of_whole_placeholders() -> None:
    template: dict[str, Any] = {
        "query": "{{query}}",
        "top_k": "{{top_k}}",
        "rerank": "{{ rerank }}",
        "contexts": "{{contexts}}",
        "text": "q={{query}} k={{top_k}} r={{rerank}} c={{contexts}}",
        "fixed": [1, None, {"nested": "{{alpha}}"}],
    }
    variables: dict[str, Any] = {
        "query": "日本語",
        "top_k": 10,
        "rerank": False,
        "contexts": ["a", "b"],
        "alpha": 0.3,
    }
    assert render(template, variables) == {
        "query": "日本語",
        "top_k": 10,
        "rerank": False,
        "contexts": ["a", "b"],
        "text": 'q=日本語 k=10 r=false c=["a", "b"]',
        "fixed": [1, None, {"nested": 0.3}],
    }
    assert placeholders(template) == {"query", "top_k", "rerank", "contexts", "alpha"}
    with pytest.raises(TemplateError, match="'missing'"):
        render({"a": "x {{missing}}"}, {})
    with pytest.raises(TemplateError, match="'missing'"):
        render("{{missing}}", {})


def test_query_parameters_for_get() -> None:
    assert query_parameters({"q": "x", "k": 10, "r": True, "n": None, "tags": ["a", "b"]}) == [
        ("q", "x"),
        ("k", "10"),
        ("r", "true"),
        ("tags", "a"),
        ("tags", "b"),
    ]
    with pytest.raises(TemplateError):
        query_parameters(["not", "an", "object"])


# --------------------------------------------------------------------------- answers


def test_forbidden_terms_and_topics() -> None:
    answer = "Ｊａｖａ IS BETTER than ﾊﾟｲｿﾝ; see Guido van Rossum."
    assert forbidden_terms_found(answer, ["java is better", "C++", "パイソン"]) == [
        "java is better",
        "パイソン",
    ]
    covered, missing = topics_covered(answer, ["guido VAN rossum", "high-level"])
    assert covered == ["guido VAN rossum"] and missing == ["high-level"]


@pytest.mark.parametrize(
    "answer",
    [
        "I don't know.",
        "I’m sorry, I can’t answer that from the documents.",
        "The provided context does not mention the capital of France.",
        "There is no information about that in the documents.",
        "This is not mentioned in the provided context.",
        "申し訳ありませんが、お答えできません。",
        "提供された情報には記載がありません。",
        "その点は不明です。",
        "資料からは判断できません。",
        "わかりません。",
    ],
)
def test_admits_not_knowing(answer: str) -> None:
    assert admits_not_knowing(answer)


@pytest.mark.parametrize(
    "answer",
    [
        # a list of indicator words would accept these ("context", "provided", "cannot")
        "Based on the provided context, the capital of France is Paris.",
        "The context says Python cannot be compiled ahead of time.",
        "Pythonは高水準のプログラミング言語です。",
        "原因不明のエラーはログを確認してください。",
        "",
    ],
)
def test_does_not_admit_not_knowing(answer: str) -> None:
    assert not admits_not_knowing(answer)


def test_answer_language() -> None:
    assert answer_language("Pythonは高水準の言語で、Guido van Rossumが作成しました。") == "ja"
    assert answer_language("Python is a language by Guido van Rossum.") == "en"
    assert answer_language("Python是一种高级编程语言。") == "other"
    assert answer_language("1234 !!") == "unknown"
    assert expected_language("ja-JP") == "ja" and expected_language("EN") == "en"
    assert expected_language("fr") is None and expected_language(None) is None


# --------------------------------------------------------------------------- evaluation (pure)


def _query(qid: str = "q1", text: str = "query") -> RetrievalQuery:
    return RetrievalQuery.model_validate(
        {
            "id": qid,
            "query": text,
            "category": "c",
            "expected_docs": [
                {"doc_id": "a", "relevance": 3},
                {"doc_id": "b", "relevance": 2},
                {"doc_id": "c", "relevance": 1},
            ],
            "metadata": {"language": "en", "difficulty": "easy"},
        }
    )


def test_score_retrieval_query_fixed_values() -> None:
    result = score_retrieval_query(
        _query(), Observation("q1", doc_ids=("x", "b", "a"), latency_ms=12.5), cutoffs=[2, 5]
    )
    m = result.metrics
    # first relevant (grade >= 2) is b at rank 2
    assert m["mrr"] == 0.5 and m["mrr_2"] == 0.5
    # top 2 = x, b: one of the two relevant (a, b)
    assert m["recall_2"] == 0.5 and m["precision_2"] == 0.5 and m["success_2"] == 1.0
    # DCG@5 = 3/log2(3) + 7/log2(4) (c not returned); IDCG@5 = 7 + 3/log2(3) + 1/2
    assert m["ndcg_5"] == pytest.approx((3 / LOG2_3 + 7 / 2) / IDCG5)
    assert m["precision_5"] == pytest.approx(2 / 5)
    assert result.latency_ms == 12.5 and result.language == "en"


def test_failed_request_scores_zero_and_has_no_latency() -> None:
    result = score_retrieval_query(
        _query(), Observation("q1", error="HTTP 500", attempts=3, latency_ms=None), cutoffs=[5]
    )
    assert all(value == 0.0 for value in result.metrics.values())
    assert result.error == "HTTP 500" and result.attempts == 3 and result.latency_ms is None


def test_linear_gain_and_threshold_are_passed_through() -> None:
    result = score_retrieval_query(
        _query(),
        Observation("q1", doc_ids=("c",)),
        cutoffs=[1],
        relevance_threshold=1,
        gain="linear",
    )
    # c (grade 1) relevant at threshold 1; linear gain: DCG@1 = 1, IDCG@1 = 3
    assert result.metrics["mrr"] == 1.0
    assert result.metrics["ndcg_1"] == pytest.approx(1 / 3)


def _case(**fields: Any) -> GenerationCase:
    return GenerationCase.model_validate({"id": "g", "question": "q", **fields})


def test_score_generation_case() -> None:
    case = _case(
        language="en",
        expected_topics=["alpha", "beta"],
        must_not_contain=["gamma"],
        reference="ref",
    )
    good = score_generation_case(case, Observation("g", answer="Alpha and beta."))
    assert good.metrics["topic_coverage"] == 1.0
    assert good.metrics["must_not_contain_rate"] == 0.0
    assert good.metrics["false_refusal_rate"] == 0.0
    assert good.metrics["language_pass_rate"] == 1.0
    assert good.metrics["no_context_pass_rate"] is None
    # no judge: unmeasured, never 0
    assert good.metrics["answer_correctness"] is None
    assert good.unmeasured["answer_correctness"] == "no_judge"

    bad = score_generation_case(case, Observation("g", answer="アルファとgammaです。"))
    assert bad.metrics["topic_coverage"] == 0.0 and bad.topics_missing == ["alpha", "beta"]
    assert bad.metrics["must_not_contain_rate"] == 1.0 and bad.forbidden_found == ["gamma"]
    assert bad.metrics["language_pass_rate"] == 0.0 and bad.answer_language == "ja"

    judged = score_generation_case(
        case,
        Observation(
            "g",
            answer="alpha",
            judge=JudgeScores(
                answer_correctness=0.8,
                semantic_similarity=1.5,
                context_recall=None,
                unmeasured={"context_recall": "judge_timeout"},
            ),
        ),
    )
    assert judged.metrics["answer_correctness"] == 0.8
    assert judged.metrics["semantic_similarity"] == 1.0  # clamped to [0, 1]
    assert judged.metrics["context_recall"] is None
    assert judged.unmeasured["context_recall"] == "judge_timeout"

    failed = score_generation_case(case, Observation("g", error="timed out"))
    assert failed.metrics["topic_coverage"] == 0.0 and failed.metrics["language_pass_rate"] == 0.0
    assert failed.metrics["must_not_contain_rate"] is None
    assert failed.unmeasured["answer_correctness"] == "request_failed"

    no_context = score_generation_case(
        _case(no_context=True, contexts=[]), Observation("g", answer="I don't know.")
    )
    assert no_context.metrics["no_context_pass_rate"] == 1.0
    assert no_context.metrics["false_refusal_rate"] is None
    assert no_context.unmeasured["answer_correctness"] == "no_reference"
    refused = score_generation_case(_case(), Observation("g", answer="I cannot answer that."))
    assert refused.metrics["false_refusal_rate"] == 1.0


def test_check_targets_directions() -> None:
    checks = check_targets(
        {"mrr": 0.7, "latency_p95_ms": 301.0, "must_not_contain_rate": 0.0, "ndcg_5": None},
        {"mrr": 0.70, "latency_p95_ms": 300.0, "must_not_contain_rate": 0.0, "ndcg_5": 0.7},
    )
    by_name = {c.metric: c for c in checks}
    assert by_name["mrr"].passed is True and by_name["mrr"].direction == "min"
    assert (
        by_name["latency_p95_ms"].passed is False and by_name["latency_p95_ms"].direction == "max"
    )
    assert by_name["must_not_contain_rate"].passed is True
    assert by_name["ndcg_5"].passed is None  # unmeasured


def _mode(label: str, values: Sequence[float | None], metric: str = "mrr") -> Any:
    queries = [
        score_retrieval_query(_query(f"q{i}"), Observation(f"q{i}", doc_ids=("a",)), cutoffs=[5])
        for i in range(len(values))
    ]
    for query, value in zip(queries, values, strict=True):
        query.metrics[metric] = value
    return summarise_mode(label, queries, kind="retrieval", params={}, targets={"mrr": 0.7})


def test_compare_modes_fixed_values() -> None:
    base = _mode("A", [0.5, 0.6, 0.7, 0.8])
    cand = _mode("B", [0.6, 0.8, 0.8, 1.0])
    (comparison,) = compare_modes(base, cand, ["mrr"], n_resamples=1000)
    # diffs 0.1 0.2 0.1 0.2: mean 0.15, sd 0.057735 -> t = 0.15 / (0.057735 / 2) = 5.196, d = 2.598
    assert comparison.mean_diff == pytest.approx(0.15)
    assert comparison.t_statistic == pytest.approx(5.196152, rel=1e-6)
    assert comparison.cohens_d == pytest.approx(2.598076, rel=1e-6)
    assert comparison.df == 3 and comparison.p_value is not None and comparison.p_value < 0.05
    assert comparison.verdict == "better" and comparison.significant is True
    assert comparison.ci_lower is not None and comparison.ci_upper is not None
    assert 0.1 <= comparison.ci_lower <= comparison.ci_upper
    (reverse,) = compare_modes(cand, base, ["mrr"], n_resamples=100)
    assert reverse.verdict == "worse"
    (same,) = compare_modes(base, base, ["mrr"], n_resamples=100)
    assert same.verdict == "no significant difference" and same.reason == "identical on every query"
    shifted = _mode("C", [0.6, 0.7, 0.8, 0.9])
    (constant,) = compare_modes(base, shifted, ["mrr"], n_resamples=100)
    assert constant.verdict == "undefined" and constant.reason == "differences have zero variance"


def test_compare_lower_is_better_and_unmeasured_pairs() -> None:
    base = _mode("A", [1.0, 1.0, 0.0, 1.0, None], "must_not_contain_rate")
    cand = _mode("B", [0.0, 0.0, 0.0, 0.0, 0.0], "must_not_contain_rate")
    (comparison,) = compare_modes(base, cand, ["must_not_contain_rate"], n_resamples=100)
    assert comparison.n == 4  # the pair with an unmeasured side is left out
    assert comparison.mean_diff == pytest.approx(-0.75)
    # fewer violations is better; t = -0.75 / (0.5 / 2) = -3.0, p = 0.0577 (not significant)
    assert comparison.p_value == pytest.approx(0.05767, abs=1e-4)
    assert comparison.verdict == "no significant difference"


def test_summarise_mode_groups_latency_and_length() -> None:
    texts = ["ab", "abcd", "abcdef", "ＡＢＣＤＥＦＧＨ"]
    queries = []
    for i, text in enumerate(texts):
        q = _query(f"q{i}", text)
        ranking = ("a",) if i % 2 == 0 else ("x", "y", "z", "w", "v", "a")
        queries.append(
            score_retrieval_query(
                q, Observation(f"q{i}", doc_ids=ranking, latency_ms=10.0 * (i + 1)), cutoffs=[5, 10]
            )
        )
    mode = summarise_mode(
        "A", queries, kind="retrieval", params={"k": 1}, targets={"mrr": 0.7}, length_metric="mrr"
    )
    # rr: 1, 1/6, 1, 1/6
    assert mode.metrics["mrr"] == pytest.approx((1 + 1 / 6) / 2)
    assert mode.metrics["coverage"] == 1.0
    # latencies 10 20 30 40: P50 = 25, P95 = 30 + 0.85 * 10 = 38.5
    assert mode.latency.p50_ms == 25.0 and mode.latency.p95_ms == pytest.approx(38.5)
    assert mode.metrics["latency_p50_ms"] == 25.0
    assert mode.groups["category"]["c"].n == 4
    assert set(mode.groups) == {"category", "language", "difficulty"}
    # NFKC: full-width letters count once each
    assert query_length("ＡＢＣＤＥＦＧＨ") == 8
    assert mode.length_correlation is not None and mode.length_correlation.n == 4
    assert mode.passed is False and mode.targets[0].value == pytest.approx(7 / 12)
    assert best_mode([mode, _mode("B", [1.0, 1.0, 1.0, 1.0])], "mrr").label == "B"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- configuration


def _suite(**overrides: Any) -> dict[str, Any]:
    suite: dict[str, Any] = {
        "name": "s",
        "dataset": "x.yaml",
        "service": {"url": "http://h/search", "response": {"doc_ids": "results[*].id"}},
    }
    suite.update(overrides)
    return suite


def test_config_defaults_follow_the_seed() -> None:
    suite = SuiteConfig.model_validate(_suite())
    assert suite.targets == DEFAULT_RETRIEVAL_TARGETS
    assert suite.cutoffs == [5, 10, 30] and suite.effective_top_k == 30
    assert list(suite.modes) == ["default"] and suite.effective_baseline == "default"
    assert suite.effective_primary_metric == "ndcg_5"
    assert suite.effective_compare_metrics == ["mrr", "recall_5", "ndcg_5"]
    assert suite.effective_length_metric == "ndcg_10"
    assert suite.relevance_threshold == 2 and suite.gain == "exponential"
    generation = SuiteConfig.model_validate(
        _suite(kind="generation", service={"url": "http://h/a", "response": {"answer": "answer"}})
    )
    assert generation.targets == {
        "must_not_contain_rate": 0.0,
        "no_context_pass_rate": 1.0,
        "language_pass_rate": 1.0,
    }
    assert generation.effective_length_metric is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"targets": {"recall_7": 0.5}}, "needs cutoff 7"),
        ({"targets": {"faithfulness": 0.8}}, "unknown retrieval measure"),
        ({"modes": {"A": {}}, "baseline_mode": "E"}, "baseline_mode 'E'"),
        ({"modes": {"A": {}}, "gate_modes": ["B"]}, "gate_modes"),
        ({"sweep_mode": "Z"}, "sweep_mode 'Z'"),
        ({"params": {"query": "x"}}, "built-in variable"),
        ({"sweeps": {"alpha": []}}, "no values"),
        ({"cutoffs": [5, 5]}, "repeat"),
        ({"name": "has space"}, "must match"),
        ({"schedule": {"cron": "0 3 * *"}}, "invalid cron"),
        ({"schedule": {"cron": "0 3 * * *", "interval_seconds": 60}}, "exactly one"),
        ({"schedule": {}}, "exactly one"),
        ({"compare_metrics": ["latency_p50_ms"]}, "not a per-query measure"),
        ({"kind": "generation"}, "service.response.answer is required"),
        ({"unknown": 1}, "Extra inputs"),
    ],
)
def test_config_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SuiteConfig.model_validate(_suite(**overrides))


def test_config_template_placeholders_must_be_defined_per_mode() -> None:
    service = {
        "url": "http://h/search",
        "response": {"doc_ids": "results[*].id"},
        "request_template": '{"q": "{{query}}", "mode": "{{mode}}", "a": "{{alpha}}"}',
    }
    with pytest.raises(ValidationError, match=r"uses \['mode'\] which mode 'B' does not define"):
        SuiteConfig.model_validate(
            _suite(
                service=service,
                params={"alpha": 0.3},
                modes={"A": {"params": {"mode": "x"}}, "B": {}},
            )
        )
    suite = SuiteConfig.model_validate(
        _suite(service=service, params={"alpha": 0.3, "mode": "x"}, modes={"A": {}, "B": {}})
    )
    assert suite.service.request_template == {
        "q": "{{query}}",
        "mode": "{{mode}}",
        "a": "{{alpha}}",
    }
    with pytest.raises(ValidationError, match="not valid JSON"):
        ServiceConfig.model_validate({"url": "http://h", "request_template": "{"})
    with pytest.raises(ValidationError, match="http"):
        ServiceConfig.model_validate({"url": "ftp://h"})
    with pytest.raises(ValidationError, match="bad bracket"):
        ServiceConfig.model_validate({"url": "http://h", "response": {"doc_ids": "a[x"}})


def test_golden_config_suite_names() -> None:
    with pytest.raises(ValidationError, match="suite name 's' repeats"):
        GoldenConfig.model_validate({"suites": [_suite(), _suite()]})
    config = GoldenConfig.model_validate({"suites": [_suite()]})
    assert config.suite("s").name == "s"
    with pytest.raises(KeyError, match="known: s"):
        config.suite("nope")
    secret = GoldenConfig.model_validate(
        {"suites": [_suite(service={**_suite()["service"], "secret_headers": {"X": "token"}})]}
    )
    assert "token" not in secret.model_dump_json()


def test_sweep_variants() -> None:
    suite = SuiteConfig.model_validate(
        _suite(
            params={"alpha": 0.3, "rrf_k": 60},
            modes={"C": {"params": {"mode": "hybrid"}}},
            sweeps={"rrf_k": [10, 30], "rerank": [True, False]},
        )
    )
    variants = sweep_variants(suite, "C")
    assert [v.label for v in variants] == [
        "C[rrf_k=10]",
        "C[rrf_k=30]",
        "C[rerank=true]",
        "C[rerank=false]",
    ]
    assert variants[0].params == {"alpha": 0.3, "rrf_k": 10, "mode": "hybrid"}
    assert all(v.variant_of == "C" and not v.gated for v in variants)
    grid = sweep_variants(suite.model_copy(update={"sweep_strategy": "grid"}), "C")
    assert len(grid) == 4 and grid[0].label == "C[rrf_k=10,rerank=true]"
    with pytest.raises(ValueError, match="max_sweep_variants"):
        sweep_variants(suite.model_copy(update={"max_sweep_variants": 3}), "C")


# --------------------------------------------------------------------------- HTTP client


def test_read_doc_ids() -> None:
    doc = {"hits": [{"chunks": [{"doc": "a"}, {"doc": "b"}]}, {"chunks": [{"doc": "a"}]}]}
    assert read_doc_ids(doc, "hits[*].chunks[*].doc", dedupe=True) == (("a", "b"), 1)
    with pytest.raises(PathError, match="repeats"):
        read_doc_ids(doc, "hits[*].chunks[*].doc", dedupe=False)
    with pytest.raises(PathError, match="not a list"):
        read_doc_ids({"hits": "a"}, "hits", dedupe=True)
    with pytest.raises(PathError, match="document id is dict"):
        read_doc_ids({"hits": [{}]}, "hits", dedupe=True)
    assert read_doc_ids({"hits": None}, "hits", dedupe=True) == ((), 0)


@pytest_asyncio.fixture(loop_scope="function")
async def flaky_service() -> AsyncIterator[tuple[RunningService, list[str]]]:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body["case"])
        count = seen.count(body["case"])
        if body["case"] == "retry-after" and count == 1:
            return web.json_response({}, status=429, headers={"Retry-After": "0.05"})
        if body["case"] == "always-503":
            return web.json_response({}, status=503)
        if body["case"] == "404":
            return web.Response(status=404, text="no such index")
        if body["case"] == "not-json":
            return web.Response(text="<html>")
        if body["case"] == "bad-mapping":
            return web.json_response({"other": []})
        return web.json_response({"results": [{"id": "a"}, {"id": "b"}]})

    app = web.Application()
    app.router.add_post("/", handler)
    service = RunningService(app)
    await service.start()
    yield service, seen
    await service.stop()


def flaky_config(service: RunningService) -> ServiceConfig:
    return ServiceConfig.model_validate(
        {
            "url": service.url + "/",
            "request_template": {"case": "{{query}}"},
            "response": {"doc_ids": "results[*].id"},
            "retries": 2,
            "backoff_seconds": 0.01,
        }
    )


class _LongestWaits(random.Random):
    """Draws the top of every range: each jittered wait is its backoff cap, so it can be named."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_client_retries_and_failures(flaky_service: tuple[RunningService, list[str]]) -> None:
    service, seen = flaky_service
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    config = flaky_config(service)
    async with aiohttp.ClientSession() as session:
        client = ServiceClient(config, session, kind="retrieval", sleep=sleep, rng=_LongestWaits())
        reply = await client.call({"query": "retry-after"})
        assert reply.doc_ids == ("a", "b") and reply.attempts == 2 and reply.latency_ms > 0
        assert sleeps == [0.05]  # Retry-After beats the smaller backoff

        sleeps.clear()
        with pytest.raises(ServiceError) as info:
            await client.call({"query": "always-503"})
        assert info.value.attempts == 3 and str(info.value) == "HTTP 503"
        assert sleeps == [0.01, 0.02]  # backoff doubles

        for case, message in [
            ("404", "HTTP 404: no such index"),
            ("not-json", "response is not JSON"),
            ("bad-mapping", "response mapping: path 'results[*].id': no key 'results'"),
        ]:
            with pytest.raises(ServiceError, match=re.escape(message)) as info:
                await client.call({"query": case})
            assert info.value.attempts == 1  # not retried
        with pytest.raises(ServiceError, match="request template"):
            await client.call({})
    assert seen.count("always-503") == 3 and seen.count("404") == 1


async def test_client_retries_are_counted(
    flaky_service: tuple[RunningService, list[str]],
) -> None:
    service, _ = flaky_service
    registry = CollectorRegistry()
    config = flaky_config(service)
    async with aiohttp.ClientSession() as session:
        client = ServiceClient(
            config, session, kind="retrieval", retry_metrics=RetryMetrics.of(registry)
        )
        with pytest.raises(ServiceError):
            await client.call({"query": "always-503"})
        with pytest.raises(ServiceError):
            await client.call({"query": "404"})  # final: not retried, not counted
    assert registry.get_sample_value("ragmon_retries_total", {"operation": "golden_service"}) == 2


async def test_client_connection_refused_is_retried() -> None:
    config = ServiceConfig.model_validate(
        {"url": "http://127.0.0.1:9/", "response": {"doc_ids": "r"}, "retries": 1}
    )

    async def no_sleep(_: float) -> None:
        return None

    async with aiohttp.ClientSession() as session:
        client = ServiceClient(config, session, kind="retrieval", sleep=no_sleep)
        with pytest.raises(ServiceError, match="ClientConnectorError") as info:
            await client.call({"query": "q", "top_k": 1, "params": {}})
    assert info.value.attempts == 2


# --------------------------------------------------------------------------- end to end: retrieval


@pytest_asyncio.fixture(loop_scope="function")
async def retrieval_service() -> AsyncIterator[tuple[RunningService, ServiceState]]:
    state = ServiceState()
    service = RunningService(retrieval_app(state))
    await service.start()
    yield service, state
    await service.stop()


def e2e_suite(url: str, **overrides: Any) -> SuiteConfig:
    suite: dict[str, Any] = {
        "name": "e2e",
        "dataset": str(RETRIEVAL_SUITE),
        "service": {
            "url": url + "/search",
            "request_template": {
                "query": "{{query}}",
                "top_k": "{{top_k}}",
                "mode": "{{mode}}",
                "alpha": "{{alpha}}",
            },
            "response": {"doc_ids": "results[*].id"},
            "backoff_seconds": 0.01,
            "concurrency": 3,
        },
        "params": {"alpha": 0.3},
        "modes": {
            "A": {"description": "ideal", "params": {"mode": "ideal"}},
            "B": {"description": "deliberately worse", "params": {"mode": "shifted"}},
            "C": {"description": "hybrid", "params": {"mode": "hybrid"}},
        },
        "gate_modes": ["A", "C"],
        "bootstrap_resamples": 2000,
    }
    suite.update(overrides)
    return SuiteConfig.model_validate(suite)


def _ndcg5_shifted(shift: int) -> float:
    # grades 3, 2, 1 at ranks shift+1, shift+2, shift+3 (only those <= 5 count)
    gains = {shift + 1: 7, shift + 2: 3, shift + 3: 1}
    return sum(g / math.log2(r + 1) for r, g in gains.items() if r <= 5) / IDCG5


SWAPPED_NDCG5 = (3 + 7 / LOG2_3 + 1 / 2) / IDCG5  # grades 2, 3, 1


async def test_end_to_end_retrieval(
    retrieval_service: tuple[RunningService, ServiceState], tmp_path: Path
) -> None:
    service, state = retrieval_service
    suite = e2e_suite(service.url, sweeps={"alpha": [0.1, 0.7]}, sweep_mode="C")
    result = await run_suite(suite, progress=False)

    assert result.outcome == "passed" and result.error is None
    assert [m.label for m in result.modes] == ["A", "B", "C"]
    a, b, c = result.modes

    # A: the ideal ranking
    assert a.metrics["mrr"] == 1.0 and a.metrics["ndcg_5"] == pytest.approx(1.0)
    assert a.metrics["recall_5"] == 1.0 and a.metrics["precision_5"] == pytest.approx(0.4)
    assert a.metrics["coverage"] == 1.0 and a.n_failed == 0
    # B: shifts 1, 2, 3 four times each -> RR 1/2, 1/3, 1/4
    assert b.metrics["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert b.metrics["ndcg_5"] == pytest.approx(sum(_ndcg5_shifted(s) for s in (1, 2, 3)) / 3)
    assert b.metrics["recall_5"] == 1.0
    # C with alpha 0.3: six of twelve queries have their two best documents swapped
    assert c.metrics["mrr"] == 1.0
    assert c.metrics["ndcg_5"] == pytest.approx((6 + 6 * SWAPPED_NDCG5) / 12)
    assert [(q.metrics["ndcg_5"] or 0.0) < 1 for q in c.queries] == [i % 2 == 0 for i in range(12)]

    # latency is measured per request: B's server sleeps 30 ms
    assert a.latency.n == b.latency.n == 12
    assert b.latency.p50_ms is not None and b.latency.p50_ms >= LATENCY_S["shifted"] * 1000
    assert a.latency.p50_ms is not None and a.latency.p50_ms < b.latency.p50_ms
    assert all(q.latency_ms is not None and q.latency_ms > 0 for q in a.queries)

    # q03 got a 503 first in mode A and was retried
    q03 = next(q for q in a.queries if q.query_id == "q03")
    assert q03.attempts == 2 and q03.metrics["mrr"] == 1.0
    assert state.requests[("ideal", "q03")] == 2
    # never more requests in flight than the concurrency bound
    assert state.max_in_flight == 3
    # the template was rendered with typed values
    assert {"query", "top_k", "mode", "alpha"} == set(state.bodies[0])
    assert state.bodies[0]["top_k"] == 30 and state.bodies[0]["alpha"] == 0.3

    # the deliberately worse mode is found significantly worse
    by_key = {(c.candidate, c.metric): c for c in result.comparisons}
    mrr_b = by_key[("B", "mrr")]
    assert mrr_b.significant is True and mrr_b.verdict == "worse"
    assert mrr_b.p_value is not None and mrr_b.p_value < 1e-6 and mrr_b.cohens_d is not None
    assert mrr_b.cohens_d < -0.3 and mrr_b.ci_upper is not None and mrr_b.ci_upper < 0
    assert by_key[("B", "ndcg_5")].verdict == "worse"
    # C differs from A on nDCG only: diffs 0 x 6 and (x - 1) x 6 -> t = -3.317, p = 0.0069
    ndcg_c = by_key[("C", "ndcg_5")]
    assert ndcg_c.p_value == pytest.approx(0.00687, abs=2e-4) and ndcg_c.verdict == "worse"
    assert by_key[("C", "mrr")].verdict == "no significant difference"
    assert ("A", "mrr") not in by_key

    # targets: A and C pass; B misses MRR and NDCG@5 but is not gated
    assert a.passed and c.passed and b.passed is False and not b.gated
    missed = {t.metric for t in b.targets if t.passed is False}
    assert missed == {"mrr", "ndcg_5"}

    # sweeps over alpha on mode C: 0.7 restores the ideal order, 0.1 changes nothing
    assert [s.label for s in result.sweeps] == ["C[alpha=0.1]", "C[alpha=0.7]"]
    assert result.sweeps[1].metrics["ndcg_5"] == pytest.approx(1.0)
    sweep = {c.candidate: c for c in result.sweep_comparisons if c.metric == "ndcg_5"}
    assert sweep["C[alpha=0.7]"].verdict == "better"
    assert sweep["C[alpha=0.1]"].reason == "identical on every query"
    assert any("alpha=0.7" in r.problem for r in result.recommendations)

    # the report and the JSON result
    md_path, json_path = write_report(result, tmp_path / "report.md")
    report = md_path.read_text(encoding="utf-8")
    assert "**B** is significantly worse than **A** on MRR" in report
    assert "| [B] deliberately worse | 0.361 ✗ |" in report
    assert "**C[alpha=0.7]** is significantly better than **C** on NDCG@5" in report
    for heading in (
        "概要",
        "メトリクス比較",
        "有意差検定",
        "カテゴリ別分析",
        "失敗分析",
        "推奨事項",
    ):
        assert f"## {heading}" in report
    back = RunResult.model_validate_json(json_path.read_text(encoding="utf-8"))
    assert back.mode("B").metrics == b.metrics
    assert json.loads(json_path.read_text(encoding="utf-8"))["outcome"] == "passed"

    # Prometheus
    registry = CollectorRegistry()
    metrics = GoldenMetrics(registry)
    metrics.record(result)
    sample = registry.get_sample_value
    assert sample("ragmon_golden_metric_ratio", {"suite": "e2e", "mode": "B", "metric": "mrr"}) == (
        pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    )
    assert (
        sample("ragmon_golden_metric_ratio", {"suite": "e2e", "mode": "A", "metric": "coverage"})
        == 1.0
    )
    p50 = sample("ragmon_golden_latency_seconds", {"suite": "e2e", "mode": "B", "metric": "p50"})
    assert b.latency.p50_ms is not None and p50 == pytest.approx(b.latency.p50_ms / 1000)
    assert sample("ragmon_golden_target_ratio", {"suite": "e2e", "metric": "recall_5"}) == 0.8
    assert sample("ragmon_golden_runs_total", {"suite": "e2e", "outcome": "passed"}) == 1.0
    assert sample("ragmon_golden_last_success_timestamp_seconds", {"suite": "e2e"}) == (
        result.finished_at.timestamp()
    )
    assert sample("ragmon_golden_run_duration_seconds", {"suite": "e2e"}) == result.duration_seconds
    # sweep variants are not exported
    assert (
        sample(
            "ragmon_golden_metric_ratio", {"suite": "e2e", "mode": "C[alpha=0.7]", "metric": "mrr"}
        )
        is None
    )


async def test_end_to_end_gating_the_worse_mode_fails(
    retrieval_service: tuple[RunningService, ServiceState],
) -> None:
    service, _ = retrieval_service
    result = await run_suite(e2e_suite(service.url, gate_modes=None), progress=False)
    assert result.outcome == "failed"
    assert {(mode, check.metric) for mode, check in result.failed_targets()} == {
        ("B", "mrr"),
        ("B", "ndcg_5"),
    }
    assert "Outcome: **FAILED**" in render_markdown(result)


async def test_end_to_end_timeouts_and_query_failures(
    retrieval_service: tuple[RunningService, ServiceState],
) -> None:
    service, state = retrieval_service
    state.slow.add("q05")
    base = e2e_suite(
        service.url,
        modes={"A": {"params": {"mode": "ideal"}}, "C": {"params": {"mode": "hybrid"}}},
        gate_modes=None,
    )
    tight = {**base.service.model_dump(), "timeout_seconds": 0.2, "retries": 1}

    tolerant = base.model_copy(
        update={"service": ServiceConfig.model_validate(tight), "max_query_failures": 1}
    )
    result = await run_suite(tolerant, progress=False)
    a = result.modes[0]
    q05 = next(q for q in a.queries if q.query_id == "q05")
    assert q05.error == "timed out after 0.2 s" and q05.attempts == 2
    assert q05.metrics["mrr"] == 0.0 and q05.latency_ms is None
    assert a.n_failed == 1 and a.metrics["mrr"] == pytest.approx(11 / 12)
    assert a.latency.n == 11
    # the failed query scores 0 (C: NDCG@5 (6 + 5 x 0.843) / 12) but both still meet the targets
    assert result.modes[1].metrics["ndcg_5"] == pytest.approx((6 + 5 * SWAPPED_NDCG5) / 12)
    assert result.outcome == "passed"
    strict = base.model_copy(update={"service": ServiceConfig.model_validate(tight)})
    result = await run_suite(strict, progress=False)
    assert result.outcome == "error"
    assert result.error is not None and result.error.startswith(
        "mode A: 1 of 12 queries failed (max_query_failures 0); first: q05: timed out"
    )
    assert [m.label for m in result.modes] == ["A"]  # the run stopped there


async def test_dataset_errors_propagate(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "queries:\n  - id: a\n    query: q\n    expected_docs: [{doc_id: d, relevance: 4}]\n"
    )
    suite = e2e_suite("http://127.0.0.1:9", dataset=str(bad))
    with pytest.raises(GoldenDataError) as info:
        await run_suite(suite, progress=False)
    assert info.value.line == 4


# --------------------------------------------------------------------------- end to end: generation


class FakeJudge:
    """Against a reference: 0.9 when the answer names Guido van Rossum, else 0.4; faithfulness
    0.7 for every answer (reference or not)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def judge(
        self, case: GenerationCase, answer: str, contexts: Sequence[str]
    ) -> JudgeScores:
        self.calls.append(case.id)
        if case.reference is None:
            return JudgeScores(faithfulness=0.7, unmeasured={"answer_correctness": "no_reference"})
        assert contexts, "the judge gets the contexts"
        return JudgeScores(
            answer_correctness=0.9 if "Guido" in answer else 0.4,
            semantic_similarity=0.8,
            faithfulness=0.7,
            reason="fake",
        )


@pytest_asyncio.fixture(loop_scope="function")
async def generation_service() -> AsyncIterator[tuple[RunningService, ServiceState]]:
    state = ServiceState()
    service = RunningService(generation_app(state))
    await service.start()
    yield service, state
    await service.stop()


def generation_suite(url: str) -> SuiteConfig:
    return SuiteConfig.model_validate(
        {
            "name": "answers",
            "kind": "generation",
            "dataset": str(GENERATION_SUITE),
            "service": {
                "url": url + "/answer",
                "response": {"answer": "answer", "contexts": "contexts[*].text"},
            },
            "modes": {"good": {"params": {"mode": "good"}}, "bad": {"params": {"mode": "bad"}}},
            "gate_modes": ["good"],
            "bootstrap_resamples": 500,
        }
    )


async def test_end_to_end_generation_without_judge(
    generation_service: tuple[RunningService, ServiceState],
) -> None:
    service, state = generation_service
    result = await run_suite(generation_suite(service.url), progress=False)
    good, bad = result.modes
    assert good.metrics["topic_coverage"] == 1.0
    assert good.metrics["must_not_contain_rate"] == 0.0
    assert good.metrics["no_context_pass_rate"] == 1.0
    assert good.metrics["false_refusal_rate"] == 0.0
    assert good.metrics["language_pass_rate"] == 1.0
    assert good.metrics["coverage"] == 1.0 and good.passed
    # bad: topics 1/3, 1/3, 1; forbidden in qa-001 and qa-004 of three cases with terms
    assert bad.metrics["topic_coverage"] == pytest.approx(5 / 9)
    assert bad.metrics["must_not_contain_rate"] == pytest.approx(2 / 3)
    assert bad.metrics["no_context_pass_rate"] == 0.0
    assert bad.metrics["language_pass_rate"] == pytest.approx(3 / 4)
    assert bad.passed is False
    # without a judge the judge's measures are unmeasured -- never 0
    for mode in (good, bad):
        assert mode.metrics["answer_correctness"] is None
        assert mode.measured["answer_correctness"] == 0
    assert good.queries[0].unmeasured["answer_correctness"] == "no_judge"
    assert good.queries[2].unmeasured["answer_correctness"] == "no_reference"
    assert result.outcome == "passed" and not result.judge
    # the contexts and the mode went to the service (default body: query, contexts, params)
    body = state.bodies[0]
    assert body["query"] == "What is Python?" and body["mode"] == "good"
    assert body["contexts"][1] == "Python was created by Guido van Rossum in 1991."
    report = render_markdown(result)
    assert "# 回答品質評価レポート" in report
    assert "| [good] | n/m | n/m | n/m | n/m | n/m | n/m | 1.000 |" in report
    assert "contains 'Java is better'" in report
    assert "answer language en, expected ja" in report
    assert "does not admit it does not know" in report
    assert any(
        r.metric == "must_not_contain_rate" and r.modes == ["bad"] for r in result.recommendations
    )


async def test_end_to_end_generation_with_judge(
    generation_service: tuple[RunningService, ServiceState],
) -> None:
    service, _ = generation_service
    judge = FakeJudge()
    assert isinstance(judge, AnswerJudge)
    result = await run_suite(generation_suite(service.url), judge=judge, progress=False)
    good, bad = result.modes
    # every answered case is judged, in both modes; correctness only where there is a reference
    assert sorted(judge.calls) == [f"qa-00{n}" for n in (1, 1, 2, 2, 3, 3, 4, 4)]
    assert good.measured["faithfulness"] == 4 and good.metrics["faithfulness"] == 0.7
    assert good.queries[3].unmeasured["answer_correctness"] == "no_reference"
    assert good.metrics["answer_correctness"] == pytest.approx(0.9)
    assert bad.metrics["answer_correctness"] == pytest.approx((0.4 + 0.9) / 2)
    assert good.metrics["semantic_similarity"] == pytest.approx(0.8)
    assert good.metrics["context_recall"] is None  # the judge did not report it
    assert good.measured["answer_correctness"] == 2 and result.judge


async def test_judge_errors_leave_measures_unmeasured(
    generation_service: tuple[RunningService, ServiceState],
) -> None:
    class BrokenJudge:
        async def judge(
            self, case: GenerationCase, answer: str, contexts: Sequence[str]
        ) -> JudgeScores:
            raise RuntimeError("judge down")

    service, _ = generation_service
    result = await run_suite(generation_suite(service.url), judge=BrokenJudge(), progress=False)
    first = result.modes[0].queries[0]
    assert first.metrics["answer_correctness"] is None
    assert first.unmeasured["answer_correctness"] == "judge_error"
    assert result.modes[0].metrics["topic_coverage"] == 1.0  # the run goes on


async def test_progress_bar_only_on_a_terminal(
    retrieval_service: tuple[RunningService, ServiceState], capsys: pytest.CaptureFixture[str]
) -> None:
    service, _ = retrieval_service
    suite = e2e_suite(service.url, modes={"A": {"params": {"mode": "ideal"}}}, gate_modes=None)
    await run_suite(suite)  # progress=None: stderr is not a terminal under pytest
    assert "[####" not in capsys.readouterr().err
    await run_suite(suite, progress=True)
    assert "e2e A  12/12 [########################] 100%" in capsys.readouterr().err


async def test_a_given_session_is_used_and_left_open(
    retrieval_service: tuple[RunningService, ServiceState],
) -> None:
    service, state = retrieval_service
    suite = e2e_suite(service.url, modes={"A": {"params": {"mode": "ideal"}}}, gate_modes=None)
    async with aiohttp.ClientSession(headers={"X-Test": "1"}) as session:
        result = await run_suite(suite, session=session, progress=False)
        assert not session.closed
    assert result.outcome == "passed" and len(state.bodies) == 13  # q03 twice
