"""Answer metrics of generation suites against references: the formulas, both judge backends
over a real HTTP judge server (tests/support/openai_server.py, the real ``openai`` client), and
a whole suite run against a real answer service with the judge configured.

The ragas tests need the ``ragas`` extra (skip locally without it, fail under
RAGMON_TEST_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from prometheus_client import CollectorRegistry

from monitor.config.golden import SuiteConfig
from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.judge_prompts import MalformedOutput
from monitor.evaluators.judge_reference import (
    ReferenceInput,
    answer_correctness,
    parse_reference,
    reference_prompt,
)
from monitor.golden.answers import AnswerJudge, JudgeScores
from monitor.golden.dataset import GenerationCase
from monitor.golden.judges import (
    GOLDEN_EVALUATOR,
    LLMAnswerJudge,
    RagasAnswerJudge,
    open_answer_judge,
)
from monitor.golden.results import RunResult
from monitor.golden.runner import run_suite
from tests.fixtures.golden.service import (
    GENERATION_SUITE,
    RunningService,
    ServiceState,
    generation_app,
    service_in_thread,
)
from tests.support.openai_server import OpenAIServer, Reply, embed
from tests.support.ragas_script import RagasScript

API_KEY = "sk-test-golden-judge-0123456789abcdef"

PYTHON = GenerationCase(
    id="qa-001",
    language="en",
    question="What is Python?",
    contexts=[
        "Python is a high-level, general-purpose programming language.",
        "Python was created by Guido van Rossum in 1991.",
    ],
    reference="Python is a high-level, general-purpose programming language. "
    "It was created by Guido van Rossum.",
)
GOOD = "Python is a high-level programming language. It was created by Guido van Rossum."


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def make_config(server: OpenAIServer, **overrides: Any) -> JudgeConfig:
    values: dict[str, Any] = {
        "base_url": server.url,
        "api_key": API_KEY,
        "model": "judge-test",
        "embedding_model": "embed-test",
        "timeout_seconds": 5.0,
        "max_retries": 1,
        "backoff_base_seconds": 0.0,
        "input_price_per_million": 2.0,
        "output_price_per_million": 8.0,
    }
    values.update(overrides)
    return JudgeConfig.model_validate(values)


@pytest_asyncio.fixture(loop_scope="function")
async def server() -> AsyncIterator[OpenAIServer]:
    srv = OpenAIServer(script=RagasScript())
    await srv.start()
    yield srv
    await srv.stop()


# --------------------------------------------------------------------------- formulas


def sun_example_input() -> ReferenceInput:
    """The answer-correctness example of docs/metrics.md (the sun), with one context."""
    return ReferenceInput.build(
        "en",
        "What powers the sun and what is its primary function?",
        "The sun is powered by nuclear fission. Its primary function is to light the solar system.",
        "The sun is powered by nuclear fusion of hydrogen into helium. "
        "This fusion releases a lot of energy. The energy provides heat and light.",
        ("The sun fuses hydrogen into helium.",),
    )


def test_the_documented_answer_correctness_example() -> None:
    """TP 1, FP 1, FN 2: F1 = 1 / (1 + 0.5 * 3) = 0.4, and with similarity 0.6 the correctness
    is 0.75 * 0.4 + 0.25 * 0.6 = 0.45. (A write-up the project started from gives 1 / (1 + 1.5)
    as 0.5 and so reaches 0.525; its formula, which this follows, gives 0.4.)"""
    inp = sun_example_input()
    assert inp.reference_sentences == (
        "The sun is powered by nuclear fusion of hydrogen into helium.",
        "This fusion releases a lot of energy.",
        "The energy provides heat and light.",
    )
    verdicts = parse_reference(
        {
            "answer_statements": [
                {"statement": "The sun is powered by fission.", "verdict": "FP", "reason": "x"},
                {"statement": "Its function is to give light.", "verdict": "TP", "reason": "x"},
            ],
            "reference_sentences": [
                {"id": "R1", "in_answer": False, "in_contexts": True, "reason": "x"},
                {"id": "r2", "in_answer": False, "in_contexts": False, "reason": "x"},
                {"id": "R3", "in_answer": True, "in_contexts": False, "reason": "x"},
            ],
        },
        inp,
    )
    assert (verdicts.true_positives, verdicts.false_positives, verdicts.false_negatives) == (
        1,
        1,
        2,
    )
    f1 = verdicts.statement_f1()
    assert f1 == pytest.approx(0.4)
    assert f1 is not None and answer_correctness(f1, 0.6) == pytest.approx(0.45)
    assert answer_correctness(0.5, 0.6) == pytest.approx(0.525)  # that write-up's last step
    assert verdicts.context_recall() == pytest.approx(1 / 3)


def test_no_true_positive_scores_zero_and_no_contexts_is_unmeasured() -> None:
    inp = ReferenceInput.build("en", "q", "Nothing useful.", "One fact.", ())
    verdicts = parse_reference(
        {
            "answer_statements": [{"statement": "Nothing.", "verdict": "FP", "reason": "x"}],
            "reference_sentences": [
                {"id": "R1", "in_answer": False, "in_contexts": True, "reason": "x"}
            ],
        },
        inp,
    )
    assert verdicts.statement_f1() == 0.0
    assert verdicts.context_recall() is None  # nothing was retrieved: not 0, not 1


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"answer_statements": [], "reference_sentences": []}, "not judged: R1, R2, R3"),
        (
            {
                "answer_statements": [],
                "reference_sentences": [
                    {"id": "R1", "in_answer": True, "in_contexts": True, "reason": ""},
                    {"id": "R1", "in_answer": True, "in_contexts": True, "reason": ""},
                ],
            },
            "R1 judged twice",
        ),
        ({"answer_statements": [{"statement": "x", "verdict": "maybe"}]}, "schema mismatch"),
        (["not", "an", "object"], "not a JSON object"),
    ],
)
def test_malformed_verdicts_are_rejected(reply: object, message: str) -> None:
    with pytest.raises(MalformedOutput, match=message):
        parse_reference(reply, sun_example_input())


def test_prompt_numbers_the_reference_and_keeps_data_in_the_block() -> None:
    inp = ReferenceInput.build(
        "ja", "質問</data>", "回答です。", "一文目です。二文目です。", ("文脈",)
    )
    prompt = reference_prompt(inp)
    assert prompt.task == "ragmon_reference"
    assert "正解" in prompt.system and "</data>" not in prompt.user.split("\n", 2)[1]
    assert '"R1":"一文目です。"' in prompt.user and '"R2":"二文目です。"' in prompt.user


# --------------------------------------------------------------------------- the llm backend


async def judge_once(
    server: OpenAIServer,
    answer: str,
    contexts: list[str],
    case: GenerationCase = PYTHON,
    metrics: JudgeMetrics | None = None,
    **config: Any,
) -> JudgeScores:
    """One case through a fresh LLMAnswerJudge (closed afterwards)."""
    judge = LLMAnswerJudge(make_config(server, **config), metrics)
    try:
        return await judge.judge(case, answer, contexts)
    finally:
        await judge.aclose()


async def test_llm_judge_scores_against_the_reference(server: OpenAIServer) -> None:
    registry = CollectorRegistry()
    assert issubclass(LLMAnswerJudge, AnswerJudge) and issubclass(RagasAnswerJudge, AnswerJudge)
    scores = await judge_once(server, GOOD, PYTHON.contexts or [], metrics=JudgeMetrics(registry))
    assert scores.unmeasured == {}
    # the reference-free measures: the server's default judge supports every
    # statement and finds every context useful and relevant
    assert (scores.faithfulness, scores.answer_relevancy, scores.context_relevancy) == (1, 1, 1)
    # both answer statements are in the reference and both reference sentences in the answer:
    # F1 = 1; the similarity is the cosine of the server's embeddings of answer and reference
    similarity = cosine(embed(GOOD), embed(PYTHON.reference or ""))
    assert scores.semantic_similarity == pytest.approx(similarity)
    assert scores.answer_correctness == pytest.approx(0.75 + 0.25 * similarity)
    assert scores.context_recall == pytest.approx(1.0)
    assert scores.reason is not None and scores.reason.startswith("TP 2, FP 0, FN 0")
    # three chat calls (reference, faithfulness, relevance) and one embeddings request,
    # counted as the golden evaluator's spend
    chats = [r for r in server.requests if not r.embedding]
    assert sorted(str(r.task) for r in chats) == [
        "ragmon_faithfulness",
        "ragmon_reference",
        "ragmon_relevance",
    ]
    assert [r.inputs for r in server.requests if r.embedding] == [
        [GOOD, PYTHON.reference],
    ]
    sample = registry.get_sample_value
    labels = {"evaluator": GOLDEN_EVALUATOR}
    assert sample("ragmon_judge_input_tokens_total", labels) == sum(
        r.usage["prompt_tokens"] for r in server.requests if r.usage
    )
    assert (sample("ragmon_judge_cost_dollars_total", labels) or 0) > 0


async def test_llm_judge_wrong_answers_and_missing_context(server: OpenAIServer) -> None:
    wrong = "Python is a venomous snake from Asia. It was created by Guido van Rossum."
    scores = await judge_once(server, wrong, ["Python was created by Guido van Rossum."])
    # TP 1 (Guido), FP 1 (the snake), FN 1 (the first reference sentence)
    similarity = cosine(embed(wrong), embed(PYTHON.reference or ""))
    assert scores.answer_correctness == pytest.approx(0.75 * 0.5 + 0.25 * similarity)
    # only the second reference sentence can be attributed to the one context
    assert scores.context_recall == pytest.approx(0.5)
    assert scores.reason is not None and "FP 1" in scores.reason and "snake" in scores.reason


async def test_llm_judge_is_redacted_and_in_the_case_language(server: OpenAIServer) -> None:
    case = GenerationCase(
        id="ja-1",
        language="ja",
        question="田中さん（tanaka@example.com）の契約は？",
        contexts=["契約は年間プランです。"],
        reference="契約は年間プランです。",
    )
    scores = await judge_once(
        server, "年間プランです。連絡先 tanaka@example.com", ["契約は年間プランです。"], case=case
    )
    assert scores.semantic_similarity is not None
    sent = [r.text for r in server.requests if not r.embedding]
    sent += [" ".join(r.inputs) for r in server.requests if r.embedding]
    assert sent and not any("tanaka@example.com" in text for text in sent)
    chat = next(r for r in server.requests if not r.embedding)
    assert "正解" in chat.system  # the Japanese prompt


async def test_llm_judge_failures_are_unmeasured_never_zero(server: OpenAIServer) -> None:
    def chat_down(received: Any) -> Reply | None:
        return None if received.embedding else Reply.error(500)

    server.script = chat_down
    scores = await judge_once(server, GOOD, PYTHON.contexts or [])
    assert scores.answer_correctness is None and scores.context_recall is None
    assert scores.faithfulness is None
    assert scores.unmeasured == {
        "answer_correctness": "judge_error",
        "context_recall": "judge_error",
        "faithfulness": "judge_error",
        "answer_relevancy": "judge_error",
        "context_relevancy": "judge_error",
    }
    assert scores.semantic_similarity is not None  # the embeddings still answered

    def embeddings_down(received: Any) -> Reply | None:
        return Reply.error(503) if received.embedding else None

    server.script = embeddings_down
    server.reset()
    scores = await judge_once(server, GOOD, PYTHON.contexts or [])
    assert scores.semantic_similarity is None and scores.answer_correctness is None
    assert scores.unmeasured["semantic_similarity"] == "judge_error"
    assert scores.unmeasured["answer_correctness"] == "semantic_similarity_judge_error"
    assert scores.context_recall == pytest.approx(1.0)
    # 503 is retried (max_retries=1): two embeddings requests
    assert sum(1 for r in server.requests if r.embedding) == 2


async def test_without_an_embedding_model_similarity_and_correctness_are_unmeasured(
    server: OpenAIServer,
) -> None:
    scores = await judge_once(server, GOOD, PYTHON.contexts or [], embedding_model=None)
    assert scores.unmeasured["semantic_similarity"] == "no_embedding_model"
    assert scores.unmeasured["answer_correctness"] == "semantic_similarity_no_embedding_model"
    assert scores.context_recall == pytest.approx(1.0)
    assert not any(r.embedding for r in server.requests)


async def test_a_case_without_reference_still_gets_the_reference_free_measures(
    server: OpenAIServer,
) -> None:
    case = PYTHON.model_copy(update={"reference": None})
    answer = "Python is a high-level programming language. UNSUPPORTED It runs on the JVM only."
    scores = await judge_once(server, answer, PYTHON.contexts or [], case=case)
    for name in ("answer_correctness", "semantic_similarity", "context_recall"):
        assert scores.unmeasured[name] == "no_reference"
    assert scores.faithfulness == pytest.approx(0.5)  # one of two statements unsupported
    assert scores.answer_relevancy == 1.0
    assert not any(r.task == "ragmon_reference" for r in server.requests)
    assert not any(r.embedding for r in server.requests)


async def test_open_answer_judge_follows_the_configuration(server: OpenAIServer) -> None:
    async with open_answer_judge(None) as none:
        assert none is None
    async with open_answer_judge(JudgeConfig()) as inactive:
        assert inactive is None  # neither enabled nor an endpoint
    async with open_answer_judge(make_config(server)) as judge:
        assert isinstance(judge, LLMAnswerJudge)


# --------------------------------------------------------------------------- the ragas backend


async def test_ragas_backend_scores_only_the_reference_metrics(
    server: OpenAIServer, ragas_installed: None
) -> None:
    async with open_answer_judge(make_config(server, backend="ragas")) as judge:
        assert isinstance(judge, RagasAnswerJudge)
        wrong = "Python is a snake. UNSUPPORTED It was created by Guido van Rossum."
        good = await judge.judge(PYTHON, GOOD, PYTHON.contexts or [])
        bad = await judge.judge(PYTHON, wrong, PYTHON.contexts or [])
    assert good.unmeasured == bad.unmeasured == {"context_relevancy": "not_scored_by_ragas"}
    assert good.faithfulness == pytest.approx(1.0)
    assert bad.faithfulness is not None and bad.faithfulness < 1.0
    assert good.context_recall == pytest.approx(1.0)
    assert good.answer_correctness is not None and bad.answer_correctness is not None
    assert good.answer_correctness > bad.answer_correctness
    assert good.semantic_similarity is not None and 0 < good.semantic_similarity <= 1
    tasks = {r.task for r in server.requests if not r.embedding}
    assert "ragmon_faithfulness" not in tasks  # ragas's own prompts, not the llm judge's


# --------------------------------------------------------------------------- a whole suite


@pytest_asyncio.fixture(loop_scope="function")
async def answer_service() -> AsyncIterator[RunningService]:
    service = RunningService(generation_app(ServiceState()))
    await service.start()
    yield service
    await service.stop()


async def test_suite_run_with_the_llm_judge_ranks_the_worse_mode_lower(
    server: OpenAIServer, answer_service: RunningService
) -> None:
    suite = SuiteConfig.model_validate(
        {
            "name": "answers",
            "kind": "generation",
            "dataset": str(GENERATION_SUITE),
            "service": {
                "url": answer_service.url + "/answer",
                "response": {"answer": "answer", "contexts": "contexts[*].text"},
            },
            "modes": {"good": {"params": {"mode": "good"}}, "bad": {"params": {"mode": "bad"}}},
            "gate_modes": ["good"],
            "targets": {"answer_correctness": 0.8},
            "bootstrap_resamples": 200,
        }
    )
    async with open_answer_judge(make_config(server)) as judge:
        result = await run_suite(suite, judge=judge, progress=False)
    good, bad = result.modes
    assert result.judge
    # qa-001 and qa-002 have references; qa-003 / qa-004 do not
    assert good.measured["answer_correctness"] == 2 and bad.measured["answer_correctness"] == 2
    assert good.metrics["answer_correctness"] is not None
    assert bad.metrics["answer_correctness"] is not None
    assert good.metrics["answer_correctness"] > 0.8 > bad.metrics["answer_correctness"]
    assert good.metrics["context_recall"] == pytest.approx(1.0)
    assert good.passed and result.outcome == "passed"
    assert (
        bad.queries[0].judge_reason is not None and "Java is better" in bad.queries[0].judge_reason
    )


# --------------------------------------------------------------------------- the real command

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMON_", "OPENAI_"))}
    env["RAGMON_LOG__FORMAT"] = "json"
    return env


@pytest.mark.slow
def test_golden_run_command_scores_answers_with_the_configured_judge(tmp_path: Path) -> None:
    """`rag-monitor golden run` (a real process) reads the judge from the configuration."""
    judge = OpenAIServer()
    with judge, service_in_thread(generation_app(ServiceState())) as service:
        config = tmp_path / "rag-monitor.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "judge": {
                        "base_url": judge.url,
                        "api_key": API_KEY,
                        "embedding_model": "embed-test",
                        "max_retries": 0,
                    },
                    "golden": {
                        "suites": [
                            {
                                "name": "answers",
                                "kind": "generation",
                                "dataset": str(GENERATION_SUITE),
                                "service": {
                                    "url": service.url + "/answer",
                                    "response": {
                                        "answer": "answer",
                                        "contexts": "contexts[*].text",
                                    },
                                },
                                "modes": {"good": {"params": {"mode": "good"}}},
                                "targets": {"answer_correctness": 0.8},
                            }
                        ]
                    },
                }
            ),
            encoding="utf-8",
        )

        def run(*extra: str) -> tuple[subprocess.CompletedProcess[str], RunResult]:
            report = tmp_path / f"report{len(extra)}.md"
            done = subprocess.run(
                [sys.executable, "-m", "monitor.cli", "golden", "run", "answers",
                 "--config", str(config), "--report", str(report), "--no-progress", *extra],
                cwd=REPO, capture_output=True, text=True, timeout=120, env=_env(),
            )  # fmt: skip
            result = RunResult.model_validate_json(report.with_suffix(".json").read_text())
            return done, result

        done, result = run()
        assert done.returncode == 0, done.stderr
        (good,) = result.modes
        assert result.judge and good.measured["answer_correctness"] == 2
        assert good.metrics["answer_correctness"] is not None
        assert good.metrics["answer_correctness"] > 0.8
        assert API_KEY not in done.stdout + done.stderr
        assert any(r.task == "ragmon_reference" for r in judge.requests)
        # --no-judge: the target cannot be checked, so the gate fails (exit 1), never passes on 0
        done, result = run("--no-judge")
        assert done.returncode == 1, done.stderr
        (good,) = result.modes
        assert good.metrics["answer_correctness"] is None and not result.judge
        assert good.queries[0].unmeasured["answer_correctness"] == "no_judge"


@pytest.mark.slow
def test_example_golden_configuration_is_valid() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "check-config",
         "--config", str(REPO / "examples" / "golden" / "config.yaml")],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "embedding_model: text-embedding-3-small" in done.stdout
    assert "judge_answers: true" in done.stdout
