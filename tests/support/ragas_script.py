"""Answers ragas 0.4's metric prompts like a judge model would, for the scripted OpenAI server.

:class:`RagasScript` is a ``script`` for :class:`tests.support.openai_server.OpenAIServer`: it
recognises each ragas prompt by the response model ragas asks for and answers it from the
prompt's input; anything else (the LLM judge's own prompts, embeddings) falls through to the
server's default judge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.support.openai_server import Received, Reply, split_sentences

UNSUPPORTED = "UNSUPPORTED"
IRRELEVANT = "IRRELEVANT"
NONCOMMITTAL = ("I don't know", "わかりません", "分かりません")


_SCHEMA_AT = "as specified in JSON Schema:"
_INPUT_AT = "Now perform the same with the following input"
_DECODER = json.JSONDecoder()


def _decode_after(text: str, marker: str) -> dict[str, Any] | None:
    at = text.rfind(marker)
    brace = text.find("{", at) if at >= 0 else -1
    if brace < 0:
        return None
    try:
        value, _ = _DECODER.raw_decode(text, brace)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def ragas_task(received: Received) -> tuple[str, dict[str, Any]] | None:
    """(response model name, prompt input) of a ragas 0.4 prompt, or None for anything else.

    ragas renders each prompt as instruction + "...as specified in JSON Schema: {schema}" +
    examples + "Now perform the same with the following input\\ninput: {json}\\nOutput: ";
    instructor re-asks append messages, so the first user message is the prompt.
    """
    first = next(
        (str(m.get("content") or "") for m in received.messages if m.get("role") == "user"), ""
    )
    schema = _decode_after(first, _SCHEMA_AT)
    data = _decode_after(first, _INPUT_AT)
    if schema is None or data is None or "title" not in schema:
        return None
    return str(schema["title"]), data


def _words(text: str) -> set[str]:
    words = {w for w in re.findall(r"\w+", text.lower()) if len(w) > 2}
    for run in re.findall("[\u3040-\u30ff\u3400-\u9fff]+", text):
        words.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return words


def _as_question(response: str) -> str:
    text = response.strip().rstrip(".。!！")
    return f"{text}ですか？" if re.search("[\u3040-\u30ff\u3400-\u9fff]", text) else f"{text}?"


class RagasScript:
    """A script for :class:`OpenAIServer` answering ragas 0.4's metric prompts.

    Like the server's default judge: statements are the answer's sentences, a statement holding
    `unsupported_marker` is not supported (not attributed, a false positive), a chunk holding
    `irrelevant_marker` is not useful; "I don't know" answers are noncommittal. Requests that are
    not ragas prompts fall through (None) to the default judge, so the same server serves the
    LLM judge too. `override` (if set) answers first: return a Reply, or None to fall through.
    """

    def __init__(
        self,
        *,
        unsupported_marker: str = UNSUPPORTED,
        irrelevant_marker: str = IRRELEVANT,
        override: Callable[[Received], Reply | None] | None = None,
    ) -> None:
        self.unsupported_marker = unsupported_marker
        self.irrelevant_marker = irrelevant_marker
        self.override = override
        self.tasks: list[str] = []

    def __call__(self, received: Received) -> Reply | None:
        if self.override is not None:
            out = self.override(received)
            if out is not None:
                return out
        if received.embedding:
            return None  # the server's deterministic embeddings
        task = ragas_task(received)
        if task is None:
            return None
        name, data = task
        self.tasks.append(name)
        content = self.answer(name, data)
        return Reply(content=content) if content is not None else None

    def answer(self, name: str, data: dict[str, Any]) -> dict[str, Any] | None:
        mark = self.unsupported_marker
        if name == "StatementGeneratorOutput":
            return {"statements": split_sentences(str(data.get("answer") or ""))}
        if name == "NLIStatementOutput":
            return {
                "statements": [
                    {
                        "statement": s,
                        "reason": "not in the context" if mark in s else "stated in the context",
                        "verdict": 0 if mark in s else 1,
                    }
                    for s in (str(x) for x in data.get("statements") or [])
                ]
            }
        if name == "AnswerRelevanceOutput":
            response = str(data.get("response") or "")
            noncommittal = any(p in response for p in NONCOMMITTAL)
            return {"question": _as_question(response), "noncommittal": int(noncommittal)}
        if name == "ContextPrecisionOutput":
            useful = self.irrelevant_marker not in str(data.get("context") or "")
            return {"reason": "scripted", "verdict": int(useful)}
        if name == "ContextRecallOutput":
            return {
                "classifications": [
                    {"statement": s, "reason": "scripted", "attributed": int(mark not in s)}
                    for s in split_sentences(str(data.get("answer") or ""))
                ]
            }
        if name == "ClassificationWithReason":
            answer = [str(s) for s in data.get("answer") or []]
            truth = [str(s) for s in data.get("ground_truth") or []]

            def overlaps(a: str, b: str) -> bool:
                return len(_words(a) & _words(b)) >= 2

            tp = [s for s in answer if mark not in s and any(overlaps(s, t) for t in truth)]
            fp = [s for s in answer if s not in tp]
            fn = [t for t in truth if not any(overlaps(s, t) for s in tp)]
            return {
                "TP": [{"statement": s, "reason": "in the ground truth"} for s in tp],
                "FP": [{"statement": s, "reason": "not in the ground truth"} for s in fp],
                "FN": [{"statement": s, "reason": "missing from the answer"} for s in fn],
            }
        return None
