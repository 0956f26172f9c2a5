"""Redaction of a result's statements before it is stored or published, through the real store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.redaction import Redactor
from monitor.evaluators.sampler import Sampler
from monitor.metrics import AgentLabels
from monitor.models import EvaluationResult, Score, StatementVerdict
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.sinks.store import Store
from monitor.stages.scoring import ScoringProcessor, redact_result
from tests.support.traces import make_trace


def _result(*statements: StatementVerdict) -> EvaluationResult:
    return EvaluationResult(
        trace_id="t1",
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        evaluator="heuristic",
        scores={"faithfulness": Score(value=0.5)},
        statements=list(statements),
    )


def test_personal_data_in_statements_and_reasons_is_replaced() -> None:
    """Statement texts and reasons lose the e-mail address; verdict, evidence and support stay."""
    leaky = StatementVerdict(
        statement="Write to bob@example.com for refunds.",
        supported=False,
        evidence_context_id="c2",
        support=0.25,
        reason="bob@example.com is not in any context",
    )
    clean = StatementVerdict(statement="Refunds take 5 days.", supported=True, support=0.9)
    redacted = redact_result(_result(leaky, clean), Redactor())
    first, second = redacted.statements
    assert first.statement == "Write to [REDACTED] for refunds."
    assert first.reason == "[REDACTED] is not in any context"
    assert (first.supported, first.evidence_context_id, first.support) == (False, "c2", 0.25)
    assert second == clean
    assert redacted.scores == {"faithfulness": Score(value=0.5)}


def test_a_result_with_nothing_to_redact_is_returned_as_it_is() -> None:
    """No copy when nothing changed (the common case, on the scoring path of every trace), and
    the original result is never modified when something did."""
    clean = _result(StatementVerdict(statement="Refunds take 5 days.", supported=True))
    assert redact_result(clean, Redactor()) is clean
    leaky = _result(StatementVerdict(statement="Mail a@example.com", supported=True))
    assert redact_result(leaky, Redactor()) is not leaky
    assert leaky.statements[0].statement == "Mail a@example.com"


class CountingRedactor:
    """The real redactor, keeping every text it was given."""

    def __init__(self) -> None:
        self.inner = Redactor()
        self.seen: list[str] = []

    def redact(self, text: str) -> str:
        self.seen.append(text)
        return self.inner.redact(text)


class RecordingPublisher:
    """The results topic's boundary: keeps what would be produced."""

    def __init__(self) -> None:
        self.published: list[EvaluationResult] = []

    async def publish(self, result: EvaluationResult) -> None:
        self.published.append(result)


LEAKY_TRACE = make_trace(
    "How long is the warranty on the X200?",
    ["The X200 vacuum has a two-year limited warranty."],
    "The X200 has a 5-year warranty, mail bob@example.com.",
    trace_id="leaky",
    ranks=False,
)


async def _score(
    tmp_path: Path,
    store_redactor: CountingRedactor | None,
    results_redactor: CountingRedactor | None,
) -> tuple[EvaluationResult, EvaluationResult]:
    """The published and the stored result of one leaky trace scored through the real store."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    publisher = RecordingPublisher()
    try:
        processor = ScoringProcessor(
            tier0=HeuristicEvaluator(),
            metrics=ScoringMetrics(CollectorRegistry(), AgentLabels(10), 300.0),
            sampler=Sampler(SamplingConfig(rate=0.0)),
            store=store,
            publisher=publisher,  # type: ignore[arg-type]
            store_redactor=store_redactor,
            results_redactor=results_redactor,
        )
        await processor.process(LEAKY_TRACE)
        stored = await store.get_result("leaky", "heuristic")
    finally:
        await store.close()
    (published,) = publisher.published
    assert stored is not None
    return published, stored


def _statements(result: EvaluationResult) -> str:
    return " ".join(s.statement for s in result.statements)


async def test_one_redactor_for_store_and_results_topic_redacts_each_text_once(
    tmp_path: Path,
) -> None:
    """With `redact.store` and `redact.results_topic` both on (the default: one redactor), both
    sinks get the redacted result and no text is passed through the redactor a second time."""
    redactor = CountingRedactor()
    published, stored = await _score(tmp_path, redactor, redactor)
    assert "bob@example.com" in LEAKY_TRACE.answer and "[REDACTED]" in _statements(published)
    assert published == stored
    # once each: the statement, its reason, the question and the answer kept beside them
    assert len(redactor.seen) == 4, redactor.seen


async def test_each_sink_is_redacted_as_configured_on_its_own(tmp_path: Path) -> None:
    """Store only, results topic only, or separate redactors: each sink gets its own setting."""
    for sub in ("store", "results", "both"):
        (tmp_path / sub).mkdir()
    published, stored = await _score(tmp_path / "store", CountingRedactor(), None)
    assert "bob@example.com" in _statements(published)
    assert "[REDACTED]" in _statements(stored)
    published, stored = await _score(tmp_path / "results", None, CountingRedactor())
    assert "[REDACTED]" in _statements(published)
    assert "bob@example.com" in _statements(stored)
    store_side, results_side = CountingRedactor(), CountingRedactor()
    published, stored = await _score(tmp_path / "both", store_side, results_side)
    assert "[REDACTED]" in _statements(published) and "[REDACTED]" in _statements(stored)
    assert store_side.seen and results_side.seen
