"""Driving the instrumented RAG apps of tests/apps: their plan, their model, their process.

A test writes a plan (conversations, turns, documents, and the answer the scripted model gives
to each question), serves the answers from the scripted OpenAI-compatible server (judge
requests fall through to its default judge), and runs one app as a subprocess that exports to
a real Collector.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.openai_server import Received, Reply

REPO_ROOT = Path(__file__).resolve().parents[2]
APPS = REPO_ROOT / "tests" / "apps"
OLD_TRACELOOP_PYTHON = REPO_ROOT / ".cache" / "venvs" / "traceloop-old" / "bin" / "python"
# Written by scripts/setup-test-apps.sh into each venv: the hash of the requirements it holds.
VENV_MARKER = ".ragmon-requirements"
MODEL = "gpt-4o-mini"
TITLE_ANSWER = "Product questions"

CORPUS = {
    "kettle-capacity": "The Aurora kettle holds 1.7 litres of water. "
    "It boils a full kettle in four minutes.",
    "kettle-warranty": "The Aurora kettle has a two-year warranty. "
    "Repairs under warranty are free of charge.",
    "storage-price": "Standard storage costs 2 cents per gigabyte per month. "
    "Archive storage costs 0.4 cents per gigabyte per month.",
    "storage-retrieval": "Data in archive storage is retrieved within twelve hours.",
    "returns-window": "Orders can be returned within 30 days of delivery. "
    "Refunds reach the original payment method within five working days.",
    "returns-label": "A prepaid return label is printed from the order page.",
}


def app_venv_problem(python: Path) -> str | None:
    """Why the test-app venv of `python` (.cache/venvs/<name>/bin/python) cannot be used: it
    is missing, or was built from another version of tests/apps/requirements-<name>.txt."""
    venv = python.parent.parent
    hint = "; run scripts/setup-test-apps.sh"
    if not python.exists():
        return f"no {python}{hint}"
    requirements = APPS / f"requirements-{venv.name}.txt"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    marker = venv / VENV_MARKER
    built = marker.read_text().strip() if marker.exists() else None
    if built != wanted:
        return f"{venv} was not built from the current {requirements.name}{hint}"
    return None


@dataclass(frozen=True)
class PlannedTurn:
    conversation: str
    turn: int
    question: str
    document_ids: tuple[str, ...]
    answer: str
    grounded: bool

    @property
    def contexts(self) -> list[tuple[str, str]]:
        return [(doc_id, CORPUS[doc_id]) for doc_id in self.document_ids]


# (question, documents, grounded answer, invented answer) per conversation, in turn order.
_SCRIPT: dict[str, list[tuple[str, tuple[str, ...], str, str]]] = {
    "kettle": [
        (
            "How much water does the Aurora kettle hold?",
            ("kettle-capacity", "kettle-warranty"),
            "The Aurora kettle holds 1.7 litres of water.",
            "The Aurora kettle holds 3 litres and is made of Norwegian titanium.",
        ),
        (
            "How long is the warranty of the Aurora kettle?",
            ("kettle-warranty", "kettle-capacity"),
            "The Aurora kettle has a two-year warranty.",
            "The Aurora kettle has a lifetime warranty backed by Lloyd's of London.",
        ),
        (
            "How fast does the Aurora kettle boil?",
            ("kettle-capacity",),
            "It boils a full kettle in four minutes.",
            "It boils a full kettle in 45 seconds thanks to its 9 kilowatt heater.",
        ),
    ],
    "storage": [
        (
            "What does standard storage cost?",
            ("storage-price", "storage-retrieval"),
            "Standard storage costs 2 cents per gigabyte per month.",
            "Standard storage costs 15 dollars per terabyte per day in Frankfurt.",
        ),
        (
            "How quickly is archive data retrieved?",
            ("storage-retrieval", "storage-price"),
            "Data in archive storage is retrieved within twelve hours.",
            "Archive data is retrieved instantly by a fleet of 400 robots.",
        ),
    ],
    "returns": [
        (
            "How long do I have to return an order?",
            ("returns-window", "returns-label"),
            "Orders can be returned within 30 days of delivery.",
            "Orders can be returned within 365 days at any Paris branch.",
        ),
        (
            "How do I get a return label?",
            ("returns-label", "returns-window"),
            "A prepaid return label is printed from the order page.",
            "A courier named Bob brings the return label on Sundays.",
        ),
    ],
}


def plan_turns(prefix: str, invented: set[tuple[str, int]]) -> list[PlannedTurn]:
    """Every planned turn; `invented` holds the (conversation, turn) pairs answered with an
    invented fact. Conversation ids are `<prefix>-<name>` so runs never share state."""
    return [
        PlannedTurn(
            conversation=f"{prefix}-{name}",
            turn=index,
            question=question,
            document_ids=doc_ids,
            answer=bad if (name, index) in invented else good,
            grounded=(name, index) not in invented,
        )
        for name, script in _SCRIPT.items()
        for index, (question, doc_ids, good, bad) in enumerate(script, start=1)
    ]


@dataclass
class AppRun:
    """One run of an instrumented app: what it is told and what the model answers."""

    app: str
    service: str
    turns: list[PlannedTurn]
    otlp_endpoint: str
    openai_base_url: str
    workdir: Path
    turn_gap_seconds: float = 0.0
    documents_with_text: bool = True
    stray_llm_calls: bool = True
    env: dict[str, str] = field(default_factory=dict)
    python: Path | None = None

    def plan(self) -> dict[str, Any]:
        conversations: dict[str, list[dict[str, Any]]] = {}
        for t in self.turns:
            conversations.setdefault(t.conversation, []).append(
                {
                    "question": t.question,
                    "documents": [{"id": i, "text": text} for i, text in t.contexts],
                }
            )
        return {
            "service": self.service,
            "otlp_endpoint": self.otlp_endpoint,
            "openai_base_url": self.openai_base_url,
            "model": MODEL,
            "turn_gap_seconds": self.turn_gap_seconds,
            "documents_with_text": self.documents_with_text,
            "stray_llm_calls": self.stray_llm_calls,
            "conversations": [{"id": c, "turns": t} for c, t in conversations.items()],
        }

    def run(self, timeout: float = 180.0) -> None:
        """Run the app to its end (it flushes its exporters before exiting)."""
        plan_path = self.workdir / f"{self.app}-plan.json"
        plan_path.write_text(json.dumps(self.plan()))
        env = {
            **os.environ,
            "OTEL_BSP_SCHEDULE_DELAY": "500",
            "OTEL_BLRP_SCHEDULE_DELAY": "500",
            "TRACELOOP_TELEMETRY": "false",
            "TRACELOOP_METRICS_ENABLED": "false",
            "PYTHONPATH": str(APPS),
            **self.env,
        }
        python = str(self.python or sys.executable)
        result = subprocess.run(
            [python, str(APPS / f"{self.app}.py"), str(plan_path)],
            env=env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"{self.app} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
                f"{result.stderr[-5000:]}"
            )


def model_script(turns: list[PlannedTurn]) -> Callable[[Received], Reply | None]:
    """The scripted model: the planned answer to a question found in the request's last user
    message (or anywhere in its text), a fixed title for the title calls; judge requests fall
    through to the server's default judge."""
    by_question = {t.question: t.answer for t in turns}

    def answer(received: Received) -> Reply | None:
        if received.task is not None or received.embedding:
            return None
        user = received.user
        if user.startswith("A title for:"):
            return Reply(content=TITLE_ANSWER)
        for text in (user, received.text):
            for question, planned in by_question.items():
                if question in text:
                    return Reply(content=planned)
        return Reply(content="I don't know.")

    return answer
