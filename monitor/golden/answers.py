"""Answer checks for generation suites (docs/metrics.md#answer-checks), and the hook for an
LLM judge.

Pure functions, no I/O, English and Japanese. Text is compared after NFKC normalisation and
case folding, so full-width letters, half-width katakana and case do not matter.

- :func:`forbidden_terms_found` -- the ``must_not_contain`` terms the answer contains
  (substring match; a crude hallucination check).
- :func:`topics_covered` -- which ``expected_topics`` the answer mentions (substring match).
  Whether a topic is covered *semantically* needs a model; this lexical check is the
  deterministic lower bound, and the judge's metrics (below) carry the semantic side.
- :func:`admits_not_knowing` -- whether the answer says it cannot answer / the information is
  not available (EN + JA phrases). Deliberately stricter than a list of indicator words, which would
  also accepts bare "context" and "provided": "Based on the provided context, Paris is the
  capital" mentions both and admits nothing.
- :func:`answer_language` -- ``"ja"``, ``"en"``, ``"other"`` or ``"unknown"`` from the script of
  the letters: any kana with CJK at least a fifth of the letters is Japanese (Japanese answers
  quote Latin names freely), mostly Latin letters is English; ideographs without kana are
  ``"other"`` (Chinese).

Answer correctness (0.75 statement F1 + 0.25 semantic similarity), semantic similarity and
context recall (against the case's reference), and the reference-free faithfulness,
answer relevancy and context relevancy need a judge: an object with the :class:`AnswerJudge`
protocol, supplied by the caller. Without one those metrics are *unmeasured* (``None``), never 0.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, runtime_checkable

from monitor.golden.dataset import GenerationCase

AnswerLanguage = Literal["ja", "en", "other", "unknown"]
CHECKABLE_LANGUAGES: Final = ("ja", "en")


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def forbidden_terms_found(answer: str, must_not_contain: Sequence[str]) -> list[str]:
    """The terms of ``must_not_contain`` that occur in ``answer``, in the given order."""
    haystack = _norm(answer)
    return [term for term in must_not_contain if _norm(term).strip() in haystack]


def topics_covered(answer: str, expected_topics: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(covered, missing)`` expected topics, each in the given order."""
    haystack = _norm(answer)
    covered = [topic for topic in expected_topics if _norm(topic).strip() in haystack]
    missing = [topic for topic in expected_topics if topic not in covered]
    return covered, missing


_NOT_KNOWING_EN = re.compile(
    r"\b(?:i|we)\s+(?:do\s+not|don't|don\u2019t|cannot|can't|can\u2019t|am\s+unable\s+to|are\s+unable\s+to"
    r"|am\s+not\s+able\s+to|was\s+unable\s+to|could\s+not|couldn't)\s+"
    r"(?:know|find|answer|provide|say|determine|tell|confirm|locate|see)"
    r"|\b(?:i|we)\s+(?:do\s+not|don't|don\u2019t)\s+have\s+(?:enough\s+|any\s+|sufficient\s+)?"
    r"(?:information|data|details|context|knowledge)"
    r"|\bno\s+(?:relevant\s+|specific\s+|such\s+)?information\b"
    r"|\b(?:insufficient|not\s+enough)\s+(?:information|context|data)\b"
    r"|\bnot\s+(?:mentioned|found|provided|included|available|specified|covered|addressed)\s+"
    r"in\s+(?:the\s+)?(?:provided\s+|given\s+|available\s+|supplied\s+)?"
    r"(?:context|contexts|documents?|sources?|information|passages?|text)"
    r"|\b(?:the\s+)?(?:provided\s+|given\s+)?(?:context|contexts|documents?|sources?|passages?|text)"
    r"\s+(?:does|do)\s+not\s+(?:contain|mention|include|provide|say|specify|cover|address)"
    r"|\bunable\s+to\s+(?:answer|find|determine|provide)"
    r"|\bcannot\s+be\s+(?:determined|answered|found)"
    r"|\b(?:i'm|i\s+am)\s+not\s+sure\b"
    r"|\b(?:unknown|not\s+known)\s+(?:from|based\s+on)\b",
    re.IGNORECASE,
)
_NOT_KNOWING_JA = re.compile(
    r"(?:は|が)不明|不明(?:です|でした|であり)|わかりません|分かりません|わからない|分からない|存じません|知りません"
    r"|(?:情報|記載|記述|資料|データ|根拠)(?:が|は)(?:ありません|ない|ございません"
    r"|含まれていません|見つかりません|見当たりません|不足して)"
    r"|(?:記載|記述|言及)(?:されていません|されておりません|がありません|はありません)"
    r"|(?:お答え|回答|返答|判断|特定|確認)(?:することが)?(?:でき(?:ません|かねます)|できない)"
    r"|答えられません|見つかりませんでした|見当たりませんでした"
)


def admits_not_knowing(answer: str) -> bool:
    """True when the answer says it does not know / the information is not available."""
    text = unicodedata.normalize("NFKC", answer)
    return bool(_NOT_KNOWING_EN.search(text) or _NOT_KNOWING_JA.search(text))


def _is_kana(char: str) -> bool:
    return (
        "\u3040" <= char <= "\u30ff" or "\u31f0" <= char <= "\u31ff" or "\uff66" <= char <= "\uff9f"
    )


def _is_cjk(char: str) -> bool:
    return (
        _is_kana(char)
        or "\u3400" <= char <= "\u4dbf"
        or "\u4e00" <= char <= "\u9fff"
        or "\uf900" <= char <= "\ufaff"
        or char in "\u3005\u3006\u3007"
    )


def answer_language(text: str) -> AnswerLanguage:
    """The language of ``text`` from its letters (see the module docstring)."""
    letters = [char for char in text if char.isalpha()]
    if not letters:
        return "unknown"
    cjk = sum(1 for char in letters if _is_cjk(char))
    kana = sum(1 for char in letters if _is_kana(char))
    latin = sum(1 for char in letters if char.isascii() or "\u00c0" <= char <= "\u024f")
    if kana > 0 and cjk * 5 >= len(letters):
        return "ja"
    if latin * 2 > len(letters):
        return "en" if cjk == 0 or latin * 5 >= len(letters) * 4 else "other"
    return "other"


def expected_language(case_language: str | None) -> str | None:
    """The primary subtag of a case's BCP 47 language when it is one we can check, else None."""
    if not case_language:
        return None
    primary = case_language.split("-")[0].split("_")[0].lower()
    return primary if primary in CHECKABLE_LANGUAGES else None


# --------------------------------------------------------------------------- judge


@dataclass(frozen=True)
class JudgeScores:
    """What a judge measured for one answer; ``None`` is unmeasured (never a 0 stand-in).

    ``answer_correctness`` is ``0.75 * statement F1 + 0.25 * semantic_similarity``
    against the reference; ``context_recall`` is the share of the reference's statements the
    contexts support. ``faithfulness``, ``answer_relevancy`` and ``context_relevancy`` need no
    reference (usual targets: 0.8, 0.7, 0.6). All in [0, 1].
    """

    answer_correctness: float | None = None
    semantic_similarity: float | None = None
    context_recall: float | None = None
    faithfulness: float | None = None
    answer_relevancy: float | None = None
    context_relevancy: float | None = None
    reason: str | None = None
    unmeasured: Mapping[str, str] = field(default_factory=dict)
    """Why a measure is ``None`` (``judge_timeout``, ``malformed_output``, ...), by name."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    """Tokens the judge's responses reported for this answer (every call); None: none did."""


@runtime_checkable
class AnswerJudge(Protocol):
    """Scores an answer against the case's reference (an LLM judge or a ragas adapter).

    Called for every case with an answer; without a ``reference`` the reference measures are
    unmeasured (``no_reference``) and the reference-free ones are still scored. ``contexts`` are
    the contexts the service reported using (or the case's own when the service returns none).
    Raising marks the case's judge metrics unmeasured (``judge_error``); the run goes on.
    """

    async def judge(
        self, case: GenerationCase, answer: str, contexts: Sequence[str]
    ) -> JudgeScores: ...


REFERENCE_METRICS: Final = ("answer_correctness", "semantic_similarity", "context_recall")
REFERENCE_FREE_METRICS: Final = ("faithfulness", "answer_relevancy", "context_relevancy")
JUDGE_METRICS: Final = REFERENCE_METRICS + REFERENCE_FREE_METRICS


__all__ = [
    "CHECKABLE_LANGUAGES",
    "JUDGE_METRICS",
    "REFERENCE_FREE_METRICS",
    "REFERENCE_METRICS",
    "AnswerJudge",
    "AnswerLanguage",
    "JudgeScores",
    "admits_not_knowing",
    "answer_language",
    "expected_language",
    "forbidden_terms_found",
    "topics_covered",
]
