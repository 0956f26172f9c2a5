"""What `review` leaves out is said and shown, and `review` and `agents` read `--since` the same
way: from scoring time by default, `--time trace` optional, with a hint when a window is empty.

Through the real parts: `rag-monitor score` and the reading commands as subprocesses on a real
SQLite store (the issue's session: traces of a past day scored now), the store's queries on
PostgreSQL too.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.models import EvaluationResult, Score
from monitor.review.items import ReviewQuery
from monitor.review.queries import review_for
from monitor.sinks.store import Store
from monitor.windows import empty_window_hint, since_covering
from tests.support.cli import rag_monitor

CONTEXT = "Refunds are issued within 14 days of the return. Store credit never expires."
DAY = "2026-03-01"


def _trace(n: int, answer: str, **extra: Any) -> dict[str, Any]:
    return {
        "trace_id": f"t-{n:02d}",
        "timestamp": f"{DAY}T12:{n:02d}:00Z",
        "agent": "refund-bot",
        "conversation_id": f"c-{n % 3}",
        "query": "How long do refunds take?",
        "contexts": [{"id": "kb-1", "text": CONTEXT}],
        "answer": answer,
        **extra,
    }


def traces() -> list[dict[str, Any]]:
    """Twenty answers: 16 measured (grounded or not), and one each that tier 0 cannot score:
    empty, a refusal, no contexts, German over English contexts (the issue's four)."""
    out = []
    for n in range(16):
        answer = (
            "Refunds are issued within 14 days of the return."
            if n % 2
            else f"Refunds take {30 + n} days and are paid in gold coins."
        )
        out.append(_trace(n, answer))
    out.append(_trace(16, ""))
    out.append(_trace(17, "I don't know, the documents do not say."))
    out.append(_trace(18, "Refunds are issued within 14 days.", contexts=[]))
    out.append(_trace(19, "Rückerstattungen erfolgen innerhalb von 14 Tagen nach der Rücksendung."))
    return out


def _cli(*argv: str, store: Path) -> subprocess.CompletedProcess[str]:
    done = rag_monitor(*argv, store=store)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_review_and_agents_after_scoring_a_past_day(tmp_path: Path) -> None:
    source = tmp_path / "traces.jsonl"
    source.write_text("".join(json.dumps(t) + "\n" for t in traces()), encoding="utf-8")
    store = tmp_path / "r.db"
    _cli("score", "--input", str(source), "--output", str(tmp_path / "out.jsonl"), store=store)

    # review --json: the worst 5 of 16 measured, 11 measured not shown, and the four
    # unmeasured answers by reason, whatever the metric ranks.
    document = json.loads(_cli("review", "--json", "--worst", "5", store=store).stdout)
    assert document["count"] == 5 and document["measured"] == 16
    assert document["not_shown"] == 16 - sum(item["count"] for item in document["items"])
    by_reason = {g["reason"]: g for g in document["unmeasured"]["by_reason"]}
    assert document["unmeasured"]["count"] == 4
    assert {r: g["count"] for r, g in by_reason.items()} == {
        "empty_answer": 1,
        "refusal": 1,
        "no_contexts": 1,
        "cross_language": 1,
    }
    assert [i["trace_id"] for i in by_reason["cross_language"]["items"]] == ["t-19"]
    assert by_reason["cross_language"]["explanation"].startswith("the answer is in another")
    ranked = {i["trace_id"] for i in document["items"]}
    assert not ranked & {"t-16", "t-17", "t-18", "t-19"}

    # The text listing says the same, in words.
    text = _cli("review", "--metric", "faithfulness", store=store).stdout
    assert "could not be measured and are not ranked: listed below by reason" in text
    assert "Unmeasured faithfulness: 4 answers need a human, by reason" in text
    assert "[cross_language] 1 answer" in text and "trace t-19" in text

    # The traces are from a past day: counted by scoring time (the default) both commands find
    # them; by trace time neither does, and both say where they are.
    table = _cli("agents", store=store).stdout
    assert "refund-bot" in table
    for command in ("agents", "review"):
        empty = _cli(command, "--time", "trace", store=store).stdout
        assert "with trace time since" in empty, (command, empty)
        assert "--time scored finds them" in empty, (command, empty)
        assert f"The latest (trace time {DAY} 12:19:00Z) is in --since " in empty, command
    agents_json = _cli("agents", "--json", "--time", "trace", "--since", "400d", store=store)
    assert "refund-bot" in json.loads(agents_json.stdout)["agents"]


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    assert empty_window_hint("answers", "scored", 0, None) == "The store holds no answers."


def test_the_hint_names_the_window_that_holds_the_latest() -> None:
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
    assert since_covering(now - timedelta(minutes=5), now) == "6m"
    assert since_covering(now - timedelta(hours=5), now) == "6h"
    assert since_covering(now - timedelta(days=9, hours=1), now) == "10d"
    hint = empty_window_hint("answers", "scored", 3, now - timedelta(hours=5), now)
    assert hint == (
        "3 answers have trace times in this window: --time trace finds them. "
        "The latest (scored 2026-03-10 07:00:00Z) is in --since 6h."
    )


async def _seed(store: Store) -> None:
    now = datetime.now(UTC)
    scores = [
        Score.of(0.2),
        Score.of(0.8),
        Score.unmeasured("refusal"),
        Score.unmeasured("refusal"),
        Score.unmeasured("unsupported_language"),
    ]
    for n, score in enumerate(scores):
        result = EvaluationResult(
            trace_id=f"t-{n}",
            timestamp=now - timedelta(days=3),  # an old trace, scored now
            evaluator="heuristic",
            scores={"support": score, "faithfulness": score},
        )
        await store.save(result, query=f"question {n}", answer=f"answer {n}")
    judged = EvaluationResult(
        trace_id="t-0",
        timestamp=now - timedelta(days=3),
        evaluator="llm",
        scores={"faithfulness": Score.of(0.5)},  # no `support`: not counted for it
    )
    await store.save(judged, query="question 0", answer="answer 0")


async def test_the_store_counts_measured_and_unmeasured_by_reason(tmp_path: Path) -> None:
    await _counts_and_review(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")


async def test_the_same_counts_on_postgresql(postgres_url: str) -> None:
    await _counts_and_review(postgres_url)


async def _counts_and_review(url: str) -> None:
    store = await Store.open(url)
    try:
        await _seed(store)
        since = datetime.now(UTC) - timedelta(hours=1)
        assert await store.score_counts(since, "support", counted_from="scored") == {
            None: 2,
            "refusal": 2,
            "unsupported_language": 1,
        }
        assert (await store.score_counts(since, "faithfulness", counted_from="scored"))[None] == 3
        assert await store.score_counts(since, "support", counted_from="trace") == {}
        refusals = await store.unmeasured(since, "support", "refusal", counted_from="scored")
        assert sorted(r.result.trace_id for r in refusals) == ["t-2", "t-3"]
        review = await review_for(store, ReviewQuery(since, worst=1), None)
        assert [i.trace_id for i in review.worst] == ["t-0"]
        assert (review.measured, review.not_shown, review.unmeasured_count) == (2, 1, 3)
        assert [(g.reason, g.count) for g in review.unmeasured] == [
            ("refusal", 2),
            ("unsupported_language", 1),
        ]
        assert review.empty_hint is None
        by_trace = await review_for(store, ReviewQuery(since, time="trace"), None)
        assert by_trace.worst == [] and by_trace.unmeasured == []
        assert by_trace.empty_hint is not None
        assert by_trace.empty_hint.startswith("6 answers were scored in this window")
    finally:
        await store.close()
