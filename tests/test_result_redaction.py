"""Redaction of a result's statements before it is stored or published."""

from __future__ import annotations

from datetime import UTC, datetime

from monitor.evaluators.redaction import Redactor
from monitor.models import EvaluationResult, Score, StatementVerdict
from monitor.stages.scoring import redact_result


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
