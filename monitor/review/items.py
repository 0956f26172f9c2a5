"""What the review lists: one item per reviewed answer, built from a stored result.

An item holds only what an on-call needs to judge the answer, its text already redacted and cut
to excerpts. The constants here bound what a listing may ask for (metrics, window, size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.config import Settings
from monitor.evaluators.redaction import Redactor
from monitor.models import EvaluationResult, Selection
from monitor.review import options
from monitor.sinks.store import SCORE_COLUMNS
from monitor.typing import TextRedactor
from monitor.windows import TimeBasis

# What a listing may ask for (defined without the store, for the command line's choices).
METRICS = options.METRICS
DEFAULT_METRIC = options.DEFAULT_METRIC
MAX_WORST = options.MAX_WORST
DEFAULT_SINCE = options.DEFAULT_SINCE
DEFAULT_WORST = options.DEFAULT_WORST
TIMES = options.TIMES
DEFAULT_TIME = options.DEFAULT_TIME
ANSWER_EXCERPT_CHARS = 300
QUESTION_CHARS = 1000
CLAIM_CHARS = 500
MAX_SIMILAR_IDS = 10

# Shown-constraint statuses: a rule broken, or dropped after a few turns.
_BROKEN = ("violated", "omitted")

DEFAULT_REDACTOR = Redactor()


def review_redactor(settings: Settings) -> TextRedactor | None:
    """The redactor for what the review shows: the judge's patterns (`judge.redaction`), unless
    `redact.review` is false (the stored text is then shown as it is)."""
    if not settings.redact.review:
        return None
    redactor = Redactor(settings.judge.redaction)
    return redactor if redactor.enabled else None


@dataclass(frozen=True)
class ReviewQuery:
    """What a listing asks for: the worst `worst` answers by `metric` since `since`."""

    since: datetime
    metric: str = DEFAULT_METRIC
    agent: str | None = None
    worst: int = DEFAULT_WORST
    time: TimeBasis = DEFAULT_TIME
    group: bool = True  # near-identical answers listed once, with a count


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of: {', '.join(METRICS)}")
    return metric


@dataclass(frozen=True)
class ScoreCell:
    """One metric of one result: a value in [0, 1], or None with why it is unmeasured."""

    value: float | None
    reason: str | None = None

    def render(self, digits: int = 2) -> str:
        if self.value is None:
            return f"unmeasured ({self.reason})" if self.reason else "unmeasured"
        return f"{self.value:.{digits}f}"


@dataclass(frozen=True)
class BrokenConstraint:
    """A constraint the answer violated (or omitted, after the user had set it)."""

    constraint_id: str
    status: str
    reason: str | None = None


@dataclass(frozen=True)
class Similar:
    """Near-identical answers folded into one listed answer (which is the worst of them)."""

    count: int
    trace_ids: list[str]  # the others, worst first, at most MAX_SIMILAR_IDS
    agents: list[str]
    score_min: float
    score_max: float

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "trace_ids": list(self.trace_ids),
            "agents": list(self.agents),
            "score_min": self.score_min,
            "score_max": self.score_max,
        }

    def describe(self) -> str:
        scores = (
            f"{self.score_min:.2f}"
            if self.score_min == self.score_max
            else f"{self.score_min:.2f}-{self.score_max:.2f}"
        )
        agents = ", ".join(self.agents)
        return f"{self.count} near-identical answers (scores {scores}; agents {agents})"


@dataclass(frozen=True)
class ReviewItem:
    """One reviewed answer: what the on-call needs to judge it, all text already redacted."""

    trace_id: str
    agent: str
    evaluator: str
    timestamp: datetime
    metric: str
    question: str | None
    answer_excerpt: str | None
    answer_truncated: bool
    scores: dict[str, ScoreCell]
    unsupported_claims: list[str] = field(default_factory=list)
    violated_constraints: list[BrokenConstraint] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    conversation_id: str | None = None
    turn: int | None = None
    scored_at: datetime | None = None
    similar: Similar | None = None
    selection: Selection | None = None  # why the judge saw it (judged results only)

    @property
    def judged_because(self) -> str | None:
        """Why the judge saw this answer, in words; None for a result of every trace."""
        return selection_text(self.selection)

    @property
    def count(self) -> int:
        """Answers this entry stands for: itself and the near-identical ones folded into it."""
        return self.similar.count if self.similar is not None else 1

    @property
    def score(self) -> ScoreCell:
        """The value of the metric the list is ranked by."""
        return self.scores.get(self.metric, ScoreCell(None, "not scored"))

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "agent": self.agent,
            "evaluator": self.evaluator,
            "timestamp": self.timestamp.isoformat(),
            "scored_at": self.scored_at.isoformat() if self.scored_at is not None else None,
            "count": self.count,
            "similar": self.similar.to_json() if self.similar is not None else None,
            "conversation_id": self.conversation_id,
            "turn": self.turn,
            "metric": self.metric,
            "score": self.score.value,
            "question": self.question,
            "answer_excerpt": self.answer_excerpt,
            "answer_truncated": self.answer_truncated,
            "scores": {
                name: {"value": cell.value, "reason": cell.reason}
                for name, cell in self.scores.items()
            },
            "unsupported_claims": list(self.unsupported_claims),
            "violated_constraints": [
                {"constraint_id": c.constraint_id, "status": c.status, "reason": c.reason}
                for c in self.violated_constraints
            ],
            "flags": list(self.flags),
            "selection": self.selection.model_dump() if self.selection is not None else None,
        }


UNMEASURED_EXAMPLES = 5  # answers shown per reason a metric is unmeasured
MAX_REASONS = 20  # reasons listed; the rest are counted together
# What an unmeasured reason means for whoever reviews it (the evaluators' reasons; any other is
# shown as it is).
REASONS = {
    "empty_answer": "the answer is empty",
    "refusal": 'the answer declines ("I don\'t know"): neither faithful nor unfaithful',
    "no_contexts": "nothing was retrieved for the question",
    "contexts_without_text": "the trace names retrieved documents but not their text",
    "no_claims": "the answer states nothing that can be checked",
    "cross_language": "the answer is in another language than its contexts (or than the"
    " question): tier 0 cannot compare the words, the LLM judge can",
    "unsupported_language": "a language tier 0 has no analyser for (it reads English and Japanese)",
    "no_question": "the trace has no question",
    "judge_error": "the LLM judge failed",
    "judge_timeout": "the LLM judge did not answer in time",
    "malformed_output": "the LLM judge's reply could not be read",
    "context_too_long": "the prompt was longer than the judge model's context",
    "circuit_open": "the judge endpoint was failing: work shed",
}


@dataclass(frozen=True)
class UnmeasuredGroup:
    """The answers of a listing's window whose metric is unmeasured for one reason: how many,
    and the latest few."""

    reason: str
    count: int
    items: list[ReviewItem]

    @property
    def explanation(self) -> str | None:
        return REASONS.get(self.reason)

    @property
    def not_shown(self) -> int:
        return self.count - len(self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "explanation": self.explanation,
            "count": self.count,
            "not_shown": self.not_shown,
            "items": [item.to_json() for item in self.items],
        }


@dataclass(frozen=True)
class Review:
    """One listing: the worst measured answers, how many measured ones it left out, and the
    answers it cannot rank because their metric is unmeasured, by reason. `empty_hint` says
    where answers are when the window holds none."""

    worst: list[ReviewItem]
    metric: str
    measured: int
    unmeasured: list[UnmeasuredGroup] = field(default_factory=list)
    empty_hint: str | None = None

    @property
    def shown(self) -> int:
        """Measured answers the worst list stands for (near-identical ones folded in)."""
        return sum(item.count for item in self.worst)

    @property
    def not_shown(self) -> int:
        """Measured answers of the window beyond the worst list."""
        return max(0, self.measured - self.shown)

    @property
    def unmeasured_count(self) -> int:
        return sum(group.count for group in self.unmeasured)


def selection_text(selection: Selection | None) -> str | None:
    """Why the judge saw an answer, in words: the uniform draw, a priority rule, or both, and
    how much it counts in the population estimates."""
    if selection is None:
        return None
    parts = []
    if selection.uniform:
        parts.append(f"uniform draw (inclusion probability {selection.inclusion_probability:.3g})")
    if selection.priority is not None:
        rule = f"priority rule {selection.priority}"
        if selection.priority_probability is not None and not selection.uniform:
            rule += f" (judged with chance {selection.priority_probability:.3g} beyond the draw)"
        parts.append(rule)
    if not parts:
        return None
    chance = selection.judged_probability
    if chance is not None and chance > 0.0:
        weight = f"counts as {1.0 / chance:.3g} traces in the population estimates"
    elif selection.uniform:
        weight = "counts in the uniform-only estimate"
    else:
        weight = "not in the population estimates (its chance of being judged is not recorded)"
    return "; ".join(parts) + ": " + weight


def excerpt(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters (ending in an ellipsis, at a word boundary when
    one is near), and whether it was cut."""
    if len(text) <= limit:
        return text, False
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space >= limit * 0.8:
        head = head[:space]
    return head.rstrip() + "…", True


def _shown(text: str | None, redactor: TextRedactor | None, limit: int) -> str | None:
    if text is None:
        return None
    clean = redactor.redact(text) if redactor is not None else text
    return excerpt(clean, limit)[0]


def _scores(result: EvaluationResult, redactor: TextRedactor | None) -> dict[str, ScoreCell]:
    names = list(SCORE_COLUMNS)
    names += sorted(n for n in result.scores if n not in names)
    out: dict[str, ScoreCell] = {}
    for name in names:
        score = result.scores.get(name)
        if score is None:
            out[name] = ScoreCell(None, f"not scored by {result.evaluator}")
        else:
            out[name] = ScoreCell(score.value, _shown(score.reason, redactor, CLAIM_CHARS))
    return out


def broken_constraints(
    result: EvaluationResult, turn_detail: Mapping[str, Any] | None, redactor: TextRedactor | None
) -> list[BrokenConstraint]:
    """The constraints violated or omitted, from the result's own verdicts and its
    conversation turn's detail (each constraint once)."""
    found: dict[str, BrokenConstraint] = {}
    entries: list[Mapping[str, Any]] = [v.model_dump() for v in result.constraints]
    if turn_detail is not None:
        raw = turn_detail.get("constraints")
        if isinstance(raw, list):
            entries += [e for e in raw if isinstance(e, Mapping)]
    for entry in entries:
        status, cid = entry.get("status"), entry.get("constraint_id")
        if status not in _BROKEN or not isinstance(cid, str) or cid in found:
            continue
        reason = entry.get("reason")
        found[cid] = BrokenConstraint(
            constraint_id=_shown(cid, redactor, 200) or "",
            status=str(status),
            reason=_shown(reason, redactor, CLAIM_CHARS) if isinstance(reason, str) else None,
        )
    return list(found.values())


def build_item(
    result: EvaluationResult,
    query: str | None,
    answer: str | None,
    metric: str,
    turn_detail: Mapping[str, Any] | None = None,
    redactor: TextRedactor | None = DEFAULT_REDACTOR,
    scored_at: datetime | None = None,
) -> ReviewItem:
    """A review item from a stored result, its stored question and answer and its turn's detail."""
    answer_text: str | None = None
    truncated = False
    if answer is not None:
        clean = redactor.redact(answer) if redactor is not None else answer
        answer_text, truncated = excerpt(clean, ANSWER_EXCERPT_CHARS)
    return ReviewItem(
        trace_id=result.trace_id,
        agent=result.agent,
        evaluator=result.evaluator,
        timestamp=result.timestamp,
        metric=metric,
        question=_shown(query, redactor, QUESTION_CHARS),
        answer_excerpt=answer_text,
        answer_truncated=truncated,
        scores=_scores(result, redactor),
        unsupported_claims=[
            _shown(c, redactor, CLAIM_CHARS) or "" for c in result.unsupported_claims
        ],
        violated_constraints=broken_constraints(result, turn_detail, redactor),
        flags=list(result.flags),
        conversation_id=result.conversation_id,
        turn=result.turn,
        scored_at=scored_at,
        selection=result.selection,
    )
