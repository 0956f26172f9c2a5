"""The judge's reference-based task: answer correctness and context recall against a reference.

One chat call, ``ragmon_reference``, for a golden-set case with a reference answer. The data
block holds the question, the reference split into numbered sentences (``R1``, ``R2``, ...), the
answer and the contexts. The judge returns

- ``answer_statements``: the answer broken into atomic statements, each ``TP`` (supported by the
  reference) or ``FP`` (not supported by it, or contradicting it);
- ``reference_sentences``: per numbered reference sentence, ``in_answer`` (false = ``FN``) and
  ``in_contexts`` (the sentence can be attributed to the contexts).

From those verdicts (ragas's definitions; docs/metrics.md#reference-scores):

- statement F1 = TP / (TP + 0.5 * (FP + FN)), 0 when TP = 0;
- answer correctness = 0.75 * F1 + 0.25 * semantic similarity (the similarity is the cosine of
  the embeddings of answer and reference, computed by the caller);
- context recall = reference sentences attributable to the contexts / all reference sentences.

The reference is split here (not by the model) so context recall's denominator is fixed by the
text, not by how the model happens to decompose it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from monitor.evaluators.judge_prompts import (
    MalformedOutput,
    Prompt,
    PromptLanguage,
    compose_prompt,
    dump_data,
    expected_statements,
    norm_label,
    validate_reply,
)
from monitor.evaluators.text import split_sentences

CORRECTNESS_WEIGHTS = (0.75, 0.25)  # statement F1, semantic similarity

REFERENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer_statements": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "statement": {"type": "string"},
                    "verdict": {"type": "string", "enum": ["TP", "FP"]},
                    "reason": {"type": "string"},
                },
                "required": ["statement", "verdict", "reason"],
                "additionalProperties": False,
            },
        },
        "reference_sentences": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "in_answer": {"type": "boolean"},
                    "in_contexts": {"type": "boolean"},
                    "reason": {"type": "string"},
                },
                "required": ["id", "in_answer", "in_contexts", "reason"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["answer_statements", "reference_sentences"],
    "additionalProperties": False,
}

_EN_REFERENCE = """\
Task (schema "ragmon_reference"): the answer and the contexts against a reference answer.
The data has "question", "reference" (the correct answer, as numbered sentences "R1", "R2",
...), "answer" (the answer to grade) and "contexts" (retrieved passages; may be empty).
1. "answer_statements": break the answer into atomic, self-contained statements (one fact or
   claim each, pronouns replaced by what they refer to, in the answer's language; leave out
   greetings and filler). "verdict": "TP" when the reference directly supports the statement,
   "FP" when it does not or contradicts it. "reason": one short sentence.
2. "reference_sentences": one entry per reference sentence, same ids, same order:
   "in_answer": true when the answer conveys what the sentence says (false means the answer
   misses it); "in_contexts": true when the sentence can be attributed to the contexts (false
   when there are no contexts); "reason": one short sentence.
Reply with one JSON object and nothing else, in this shape:
{"answer_statements":[{"statement":"...","verdict":"TP","reason":"..."}],
"reference_sentences":[{"id":"R1","in_answer":true,"in_contexts":true,"reason":"..."}]}"""

_JA_REFERENCE = """\
タスク（スキーマ "ragmon_reference"）：正解（参照回答）に対する回答とコンテキストの評価。
データには "question"（質問）、"reference"（正解。"R1"、"R2" … と番号付きの文）、
"answer"（評価する回答）、"contexts"（検索結果。空のこともあります）があります。
1. "answer_statements"：回答を、それだけで意味が通る最小単位の文（ステートメント）に
   分解してください（1つに事実や主張は1つだけ、代名詞は指している語に置き換え、
   回答と同じ言語で。挨拶や前置きは含めません）。"verdict"：正解が直接裏付けていれば
   "TP"、裏付けていない・矛盾しているなら "FP"。"reason"：短い一文（日本語）。
2. "reference_sentences"：正解の文ごとに1件、同じ id・同じ順序で：
   "in_answer"：回答がその文の内容を伝えていれば true（false は回答が欠いていること）。
   "in_contexts"：その文がコンテキストに基づいていると言えれば true
   （コンテキストがなければ false）。"reason"：短い一文（日本語）。
次の形の JSON オブジェクトを1つだけ返し、それ以外は何も書かないでください：
{"answer_statements":[{"statement":"...","verdict":"TP","reason":"..."}],
"reference_sentences":[{"id":"R1","in_answer":true,"in_contexts":true,"reason":"..."}]}"""


@dataclass(frozen=True)
class ReferenceInput:
    """What the judge sees of a golden case: already redacted and truncated by the caller."""

    language: PromptLanguage
    question: str
    answer: str
    reference_sentences: tuple[str, ...]
    contexts: tuple[str, ...]

    @classmethod
    def build(
        cls,
        language: PromptLanguage,
        question: str,
        answer: str,
        reference: str,
        contexts: tuple[str, ...],
    ) -> ReferenceInput:
        sentences = tuple(s for s in split_sentences(reference) if s.strip())
        if not sentences and reference.strip():
            sentences = (reference.strip(),)
        return cls(language, question.strip(), answer.strip(), sentences, contexts)

    def data(self) -> str:
        return dump_data(
            {
                "question": self.question,
                "reference": {f"R{i}": s for i, s in enumerate(self.reference_sentences, 1)},
                "answer": self.answer,
                "contexts": {f"C{i}": c for i, c in enumerate(self.contexts, 1)},
            }
        )


def reference_prompt(inp: ReferenceInput) -> Prompt:
    items = {
        "answer_statements": expected_statements(inp.answer),
        "reference_sentences": len(inp.reference_sentences),
    }
    return compose_prompt(
        "ragmon_reference",
        inp.language,
        (_EN_REFERENCE, _JA_REFERENCE),
        REFERENCE_SCHEMA,
        inp.data(),
        items,
    )


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _AnswerStatementOut(_Out):
    statement: str
    verdict: Literal["TP", "FP", "tp", "fp"]
    reason: str | None = None


class _ReferenceSentenceOut(_Out):
    id: str
    in_answer: bool
    in_contexts: bool
    reason: str | None = None


class _ReferenceOut(_Out):
    answer_statements: list[_AnswerStatementOut]
    reference_sentences: list[_ReferenceSentenceOut]


@dataclass(frozen=True)
class AnswerStatement:
    statement: str
    true_positive: bool
    reason: str | None


@dataclass(frozen=True)
class ReferenceVerdicts:
    """The judge's verdicts for one case, and the counts the scores come from."""

    answer_statements: tuple[AnswerStatement, ...]
    in_answer: tuple[bool, ...]  # per reference sentence, in order
    in_contexts: tuple[bool, ...]  # empty when there were no contexts

    @property
    def true_positives(self) -> int:
        return sum(1 for s in self.answer_statements if s.true_positive)

    @property
    def false_positives(self) -> int:
        return sum(1 for s in self.answer_statements if not s.true_positive)

    @property
    def false_negatives(self) -> int:
        return sum(1 for hit in self.in_answer if not hit)

    def statement_f1(self) -> float | None:
        """TP / (TP + 0.5 (FP + FN)); None when there is nothing to count."""
        tp, fp, fn = self.true_positives, self.false_positives, self.false_negatives
        if tp + fp + fn == 0:
            return None
        return tp / (tp + 0.5 * (fp + fn)) if tp else 0.0

    def context_recall(self) -> float | None:
        if not self.in_contexts:
            return None
        return sum(self.in_contexts) / len(self.in_contexts)


def answer_correctness(statement_f1: float, semantic_similarity: float) -> float:
    """Answer correctness: 0.75 * F1 + 0.25 * similarity (docs/metrics.md)."""
    w_f1, w_sim = CORRECTNESS_WEIGHTS
    return w_f1 * statement_f1 + w_sim * semantic_similarity


def parse_reference(data: object, inp: ReferenceInput) -> ReferenceVerdicts:
    out: _ReferenceOut = validate_reply(_ReferenceOut, data)
    by_id: dict[str, _ReferenceSentenceOut] = {}
    for sentence in out.reference_sentences:
        label = norm_label(sentence.id) or ""
        if label in by_id:
            raise MalformedOutput(f"reference sentence {label} judged twice")
        by_id[label] = sentence
    labels = [f"R{i}" for i in range(1, len(inp.reference_sentences) + 1)]
    missing = [label for label in labels if label not in by_id]
    if missing:
        raise MalformedOutput(f"reference sentences not judged: {', '.join(missing)}")
    statements = tuple(
        AnswerStatement(
            statement=s.statement.strip(),
            true_positive=s.verdict.upper() == "TP",
            reason=(s.reason or "").strip() or None,
        )
        for s in out.answer_statements
        if s.statement.strip()
    )
    return ReferenceVerdicts(
        answer_statements=statements,
        in_answer=tuple(by_id[label].in_answer for label in labels),
        in_contexts=tuple(by_id[label].in_contexts for label in labels) if inp.contexts else (),
    )


__all__ = [
    "CORRECTNESS_WEIGHTS",
    "REFERENCE_SCHEMA",
    "AnswerStatement",
    "ReferenceInput",
    "ReferenceVerdicts",
    "answer_correctness",
    "parse_reference",
    "reference_prompt",
]
