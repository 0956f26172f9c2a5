"""Realistic demo traffic: multi-turn conversations in English and Japanese.

Most answers are grounded in what the demo RAG service retrieved; some invent facts; some drop
a constraint the user set after a couple of turns; a few messages are malformed. Two agents
answer: `support-bot` and a `support-bot-canary` that invents facts much more often, so the
dashboards, the alerts and `rag-monitor agents` have a difference to show.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from monitor.demo.service import RagService


@dataclass(frozen=True)
class Turn:
    query: str
    invent: str | None = None  # appended to the grounded answer: a fact no context holds
    replace: str | None = None  # replaces the answer (to break a constraint)


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[Turn, ...]
    constraints: tuple[dict[str, Any], ...] = field(default=())


SCENARIOS = (
    Scenario(
        "kettle",
        (
            Turn("How big is the Aurora kettle?"),
            Turn("How long is the Aurora kettle warranty?"),
            Turn("How often should I descale the Aurora kettle?"),
        ),
    ),
    Scenario(
        "shibuya-store",
        (
            Turn("When does the Shibuya store open?"),
            Turn("Does the Shibuya store have parking?"),
            Turn(
                "Is the Shibuya store open on Wednesdays?",
                replace="No, it closes on Wednesdays, but the Umeda store is open then.",
            ),
        ),
        constraints=(
            {
                "id": "no-other-stores",
                "text": "Only talk about the Shibuya store.",
                "kind": "forbidden_terms",
                "value": ["Umeda"],
            },
        ),
    ),
    Scenario(
        "shipping-invented",
        (
            Turn(
                "How fast do orders ship?",
                invent="Express delivery arrives the next morning for 300 yen.",
            ),
            Turn("Can I return an unused item?"),
        ),
    ),
    Scenario(
        "ja-kettle",
        (
            Turn("オーロラ電気ケトルの容量は？"),
            Turn("ケトルのお手入れ方法は？"),
            Turn(
                "保証期間はどのくらいですか？", replace="The warranty period is two years."
            ),  # answers in English: drift
        ),
        constraints=(
            {
                "id": "answer-in-japanese",
                "text": "日本語で答えてください",
                "kind": "language",
                "value": "ja",
            },
        ),
    ),
    Scenario(
        "ja-parking-invented",
        (
            Turn("梅田店の営業時間は？"),
            Turn("梅田店の駐車場は？", invent="駐車場は500台分あり、24時間無料です。"),
        ),
    ),
    Scenario("out-of-scope", (Turn("What is the meaning of life?"),)),
)

# Share of the canary's grounded answers that get an invented sentence. High enough that its
# multi-turn hallucination rate H_u (about 0.35) clears the chart's alert threshold (0.2) while
# support-bot's (about 0.14) stays under it: the demo's Prometheus fires
# RagmonHallucinationRateHigh for the canary only.
CANARY_INVENTS = 0.7

MALFORMED = (
    b'{"trace_id": "broken", "query": "missing the answer"',
    b'{"schema_version": 9, "trace_id": "from-the-future"}',
    b"\xff\xfe not even text",
)


class TrafficGenerator:
    """Yields (key, value) messages for the traces topic, one conversation after another."""

    def __init__(self, service: RagService, seed: int = 7, malformed_every: int = 40) -> None:
        self._service = service
        self._rng = random.Random(seed)
        self._malformed_every = malformed_every
        self._count = 0

    def conversation(self) -> Iterator[tuple[bytes, bytes]]:
        scenario = self._rng.choice(SCENARIOS)
        canary = self._rng.random() < 0.4
        agent = "support-bot-canary" if canary else "support-bot"
        conversation_id = f"demo-{uuid.UUID(int=self._rng.getrandbits(128)).hex[:12]}"
        memory = 0
        for number, turn in enumerate(scenario.turns, start=1):
            self._count += 1
            if self._count % self._malformed_every == 0:
                yield conversation_id.encode(), self._rng.choice(MALFORMED)
            answer, docs = self._service.answer(turn.query)
            invent = turn.invent or (
                "It also comes with a lifetime guarantee on every part."
                if canary and self._rng.random() < CANARY_INVENTS and docs
                else None
            )
            if turn.replace is not None:
                answer = turn.replace
            elif invent is not None:
                answer = f"{answer} {invent}"
            memory += 180 + len(answer)
            trace = {
                "schema_version": 1,
                "trace_id": uuid.UUID(int=self._rng.getrandbits(128)).hex,
                "timestamp": datetime.now(UTC).isoformat(),
                "agent": agent,
                "conversation_id": conversation_id,
                "turn": number,
                "query": turn.query,
                "contexts": [
                    {"id": d.id, "text": d.text, "rank": r + 1} for r, d in enumerate(docs)
                ],
                "answer": answer,
                "constraints": list(scenario.constraints),
                "memory_tokens": memory,
                "model": "demo-extractive",
                "latency_ms": round(self._rng.uniform(120, 900), 1),
            }
            yield conversation_id.encode(), json.dumps(trace, ensure_ascii=False).encode()
