"""What the instrumented test apps share: the plan they follow and the retrieval they do.

Each app in this folder is a small RAG service instrumented with one family of OpenTelemetry
instrumentation. It runs as its own process (instrumentations patch libraries globally, and one
family needs a venv of its own), reads a plan written by the test, answers every turn by
retrieving the plan's documents and asking an OpenAI-compatible server with the real `openai`
client, and exports its telemetry over OTLP/HTTP to a Collector. Standard library only here:
this module is imported by apps running in other environments.

Plan (JSON): {
  "service": service.name of the app,
  "otlp_endpoint": "http://127.0.0.1:PORT" (OTLP/HTTP base),
  "openai_base_url": the scripted server's /v1 URL,
  "model": model name to ask for,
  "turn_gap_seconds": pause between the turns of one conversation,
  "documents_with_text": whether retrieval spans carry document text (GenAI family),
  "stray_llm_calls": LLM calls outside any conversation or retrieval (one per conversation),
  "conversations": [{"id": ..., "turns": [{"question": ..., "documents": [{"id", "text"}]}]}]
}
Turns run in order within a conversation; conversations are interleaved turn by turn.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = "Answer the question from the context only. Be brief."


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    score: float


@dataclass(frozen=True)
class Turn:
    conversation: str
    index: int
    question: str
    documents: tuple[Document, ...]


def load_plan() -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("plan", type=Path)
    args = parser.parse_args()
    plan: dict[str, Any] = json.loads(args.plan.read_text())
    return plan


def turns(plan: dict[str, Any]) -> Iterator[Turn]:
    """Every turn of the plan, interleaved across conversations, pausing between rounds."""
    conversations = plan["conversations"]
    rounds = max(len(c["turns"]) for c in conversations)
    for index in range(rounds):
        if index:
            time.sleep(float(plan.get("turn_gap_seconds", 0)))
        for conversation in conversations:
            if index < len(conversation["turns"]):
                turn = conversation["turns"][index]
                yield Turn(
                    conversation=conversation["id"],
                    index=index + 1,
                    question=turn["question"],
                    documents=tuple(
                        Document(d["id"], d["text"], round(0.9 - 0.1 * rank, 2))
                        for rank, d in enumerate(turn["documents"])
                    ),
                )


def retriever(plan: dict[str, Any]) -> Callable[[str], list[Document]]:
    """The documents the plan gives for a question (a stand-in for a vector store)."""
    by_question = {
        t["question"]: [
            Document(d["id"], d["text"], round(0.9 - 0.1 * rank, 2))
            for rank, d in enumerate(t["documents"])
        ]
        for c in plan["conversations"]
        for t in c["turns"]
    }
    return lambda question: list(by_question.get(question, []))


def format_context(documents: list[Document]) -> str:
    return "\n\n".join(f"[{d.id}] {d.text}" for d in documents)
