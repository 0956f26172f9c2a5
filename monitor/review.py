"""On-call review: the worst recent answers, for a terminal (`rag-monitor review`) and a browser.

From an alert to the answers behind it. :func:`worst_answers` reads the results store (worst
first by one metric) and joins, for each result, the violated constraints recorded on its
conversation turn. :func:`render_text` and :func:`render_json` format the list;
:func:`add_review_routes` serves it as ``GET /review`` (an HTML page, see
:mod:`monitor.review_page`) and ``GET /review.json`` on the daemon's HTTP server;
:func:`register` and :func:`run_cli` make the ``rag-monitor review`` command.

What is shown is untrusted trace text. It is redacted once more before display (the store keeps
the redacted question and answer when ``redact.store`` is on, but the claims and constraint
reasons on conversation turns are not redacted when written), escaped in HTML, and stripped of
terminal control characters in text. Neither output ever contains configuration or secrets.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import re
import sys
import textwrap
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from sqlalchemy import JSON, Float, and_, cast, or_, select, type_coerce
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import make_url
from sqlalchemy.sql.elements import ColumnElement

from monitor.agents_report import parse_since
from monitor.evaluate.redaction import Redactor
from monitor.models import EvaluationResult
from monitor.scoring import TextRedactor
from monitor.store import Store, results_table, sanitized_url, turns_table

if TYPE_CHECKING:
    from monitor.config import Settings

log = structlog.get_logger(__name__)

# Metrics with a column of their own in evaluation_results (ranked by an indexed column).
COLUMN_METRICS = ("faithfulness", "answer_relevancy", "context_precision")
# Every metric an evaluator writes; the others are read from the stored result document.
METRICS = (
    *COLUMN_METRICS,
    "context_relevancy",  # LLM judge
    "context_utilization",  # tier 0
    "support",  # tier 0
)
# Ranked by tier 0's headline by default: every trace has it, and it ranks answers better than
# tier 0's faithfulness ratio (README, Scoring). `faithfulness` ranks tier 0's and the judge's
# results together.
DEFAULT_METRIC = "support"
ANSWER_EXCERPT_CHARS = 300
QUESTION_CHARS = 1000
CLAIM_CHARS = 500
MAX_WORST = 200
MAX_AGENTS_LISTED = 200
DEFAULT_SINCE = "1h"
DEFAULT_WORST = 20
# Which time --since counts from: when the answer was scored (the default: a replay of old
# traces is found right after it ran), or the trace's own timestamp.
TIMES = ("scored", "trace")
DEFAULT_TIME = "scored"
# Near-identical answers (character 3-gram Jaccard at least this) are listed once, with a count.
SIMILARITY = 0.9
SCAN_PER_ITEM = 10  # grouping looks at this many of the worst answers per item listed ...
MAX_SCAN = 2000  # ... up to this many
MAX_SIMILAR_IDS = 10
EXIT_USAGE = 2
EXIT_STORE = 3

# Shown-constraint statuses: a rule broken, or dropped after a few turns.
_BROKEN = ("violated", "omitted")
# C0/C1 controls (terminal escapes) and bidirectional overrides (text that reads differently
# than it is stored); newlines and tabs become spaces in one-line text.
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_WHITESPACE = re.compile(r"\s+")

_DEFAULT_REDACTOR = Redactor()


# --------------------------------------------------------------------------------- the items


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
        }


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
    names = list(COLUMN_METRICS)
    names += sorted(n for n in result.scores if n not in names)
    out: dict[str, ScoreCell] = {}
    for name in names:
        score = result.scores.get(name)
        if score is None:
            out[name] = ScoreCell(None, f"not scored by {result.evaluator}")
        else:
            out[name] = ScoreCell(score.value, _shown(score.reason, redactor, CLAIM_CHARS))
    return out


def _broken(
    result: EvaluationResult, turn_detail: Mapping[str, Any] | None, redactor: TextRedactor | None
) -> list[BrokenConstraint]:
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
    redactor: TextRedactor | None = _DEFAULT_REDACTOR,
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
        violated_constraints=_broken(result, turn_detail, redactor),
        flags=list(result.flags),
        conversation_id=result.conversation_id,
        turn=result.turn,
        scored_at=scored_at,
    )


# ------------------------------------------------------------------------- near-identical


def _normalized(text: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _shingles(text: str) -> frozenset[str]:
    if len(text) < 3:
        return frozenset({text})
    return frozenset(text[i : i + 3] for i in range(len(text) - 2))


@dataclass
class _Group:
    first: int  # index of its worst answer in the worst-first scan
    shingles: frozenset[str]
    members: list[int] = field(default_factory=list)


def group_similar(answers: Sequence[str | None], evaluators: Sequence[str]) -> list[list[int]]:
    """Indices of `answers` (worst first) grouped by near-identical text, per evaluator.

    Two answers are near-identical when their normalised texts (NFKC, case-folded, whitespace
    collapsed) share at least SIMILARITY of their character 3-grams (Jaccard); each answer
    joins the first group it is that close to. Groups come in the order of their worst member;
    an answer not stored forms a group of its own.
    """
    groups: list[_Group] = []
    exact: dict[tuple[str, str], _Group] = {}
    for index, (answer, evaluator) in enumerate(zip(answers, evaluators, strict=True)):
        if answer is None:
            groups.append(_Group(index, frozenset(), [index]))
            continue
        text = _normalized(answer)
        group = exact.get((evaluator, text))
        if group is None:
            shingles = _shingles(text)
            size = len(shingles)
            for candidate in groups:
                other = len(candidate.shingles)
                # Jaccard <= min/max of the set sizes: most candidates need no intersection.
                if (
                    not other
                    or min(size, other) < SIMILARITY * max(size, other)
                    or answers[candidate.first] is None
                    or evaluators[candidate.first] != evaluator
                ):
                    continue
                common = len(shingles & candidate.shingles)
                if common >= SIMILARITY * (size + other - common):
                    group = candidate
                    break
            if group is None:
                group = _Group(index, shingles)
                groups.append(group)
            exact[(evaluator, text)] = group
        group.members.append(index)
    return [g.members for g in groups]


def _folded(items: Sequence[ReviewItem], members: list[int]) -> ReviewItem:
    head = items[members[0]]
    if len(members) == 1:
        return head
    values = [v for i in members if (v := items[i].score.value) is not None]
    similar = Similar(
        count=len(members),
        trace_ids=[items[i].trace_id for i in members[1 : 1 + MAX_SIMILAR_IDS]],
        agents=sorted({items[i].agent for i in members}),
        score_min=min(values),
        score_max=max(values),
    )
    return replace(head, similar=similar)


# ------------------------------------------------------------------------------ the store


def _metric_value(dialect: str, metric: str) -> ColumnElement[Any]:
    """SQL for a metric's value: its column, or the JSON path into the stored result."""
    if metric in COLUMN_METRICS:
        return results_table.c[metric]
    path = ("scores", metric, "value")
    value: ColumnElement[Any]
    if dialect == "postgresql":
        value = cast(results_table.c.result, JSONB)[path].astext.cast(Float)
    else:
        value = type_coerce(results_table.c.result, JSON)[path].as_float()
    return value


def _since_clause(since: datetime, time: str) -> ColumnElement[bool]:
    """Rows at or after `since` by scoring time (rows stored before scored_at existed count by
    their trace time) or by trace time."""
    table = results_table
    if time == "trace":
        return table.c.timestamp >= since
    return or_(
        table.c.scored_at >= since,
        and_(table.c.scored_at.is_(None), table.c.timestamp >= since),
    )


@dataclass(frozen=True)
class _Row:
    result: EvaluationResult
    query: str | None
    answer: str | None
    scored_at: datetime | None


async def _worst_rows(
    store: Store, since: datetime, metric: str, agent: str | None, limit: int, time: str
) -> list[_Row]:
    engine = store._engine
    value = _metric_value(engine.dialect.name, metric)
    table = results_table
    query = (
        select(table.c.result, table.c.query, table.c.answer, table.c.scored_at)
        .where(_since_clause(since, time), value.is_not(None))
        .order_by(value.asc(), table.c.timestamp.desc())
        .limit(limit)
    )
    if agent is not None:
        query = query.where(table.c.agent == agent)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [_Row(EvaluationResult.model_validate_json(r[0]), r[1], r[2], r[3]) for r in rows]


async def _turn_details(
    store: Store, results: Sequence[EvaluationResult]
) -> dict[str, dict[str, Any]]:
    """The parsed `detail` of the conversation turn of each result's trace, by trace id."""
    conversations = sorted({r.conversation_id for r in results if r.conversation_id})
    if not conversations:
        return {}
    wanted = {r.trace_id for r in results}
    details: dict[str, dict[str, Any]] = {}
    for row in await store.select_rows(turns_table, conversation_id=conversations):
        if row.get("trace_id") not in wanted:
            continue
        try:
            detail = json.loads(row.get("detail") or "{}")
        except ValueError:
            continue
        if isinstance(detail, dict):
            details[row["trace_id"]] = detail
    return details


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of: {', '.join(METRICS)}")
    return metric


def check_time(time: str) -> str:
    if time not in TIMES:
        raise ValueError(f"time must be one of: {', '.join(TIMES)}")
    return time


async def worst_answers(
    store: Store,
    since: datetime,
    metric: str = "faithfulness",
    agent: str | None = None,
    limit: int = DEFAULT_WORST,
    *,
    redactor: TextRedactor | None = _DEFAULT_REDACTOR,
    time: str = DEFAULT_TIME,
    group: bool = True,
) -> list[ReviewItem]:
    """The `limit` lowest-scoring answers by `metric` since `since`, worst first.

    `since` counts from when answers were scored (`time="scored"`) or from the traces' own
    timestamps (`time="trace"`). Results whose metric is unmeasured are left out (unmeasured is
    not bad). A trace scored by two evaluators can appear twice, once per evaluator. With
    `group`, near-identical answers (see group_similar) among the worst SCAN_PER_ITEM x `limit`
    (more while copies leave groups missing, up to MAX_SCAN) are listed once, as their worst
    member with a `similar` count (of the answers scanned). Every
    text is passed through `redactor` (the default patterns when not given; None shows the
    stored text as it is).
    """
    check_metric(metric)
    check_time(time)
    if limit < 1:
        return []
    scan = min(MAX_SCAN, limit * SCAN_PER_ITEM) if group else limit
    while True:
        rows = await _worst_rows(store, since, metric, agent, scan, time)
        clusters = (
            group_similar([r.answer for r in rows], [r.result.evaluator for r in rows])
            if group
            else [[i] for i in range(len(rows))]
        )
        # Copies of one answer can fill the scan: look further while groups are missing.
        if len(clusters) >= limit or len(rows) < scan or scan >= MAX_SCAN:
            break
        scan = min(MAX_SCAN, scan * 4)
    items = [
        build_item(row.result, row.query, row.answer, metric, None, redactor, row.scored_at)
        for row in rows
    ]
    chosen = [(members[0], _folded(items, members)) for members in clusters[:limit]]
    details = await _turn_details(store, [rows[i].result for i, _ in chosen])
    return [
        replace(
            item,
            violated_constraints=_broken(rows[i].result, details.get(item.trace_id), redactor),
        )
        for i, item in chosen
    ]


async def agents_seen(store: Store, since: datetime, time: str = DEFAULT_TIME) -> list[str]:
    """Agent names with results since a time (for the page's agent filter)."""
    engine = store._engine
    query = (
        select(results_table.c.agent)
        .where(_since_clause(since, time), results_table.c.agent.is_not(None))
        .distinct()
        .order_by(results_table.c.agent)
        .limit(MAX_AGENTS_LISTED)
    )
    async with engine.connect() as conn:
        return [str(r[0]) for r in (await conn.execute(query)).all()]


# -------------------------------------------------------------------------------- text, JSON


def one_line(text: str) -> str:
    """Untrusted text made safe for a terminal: no escapes, no bidi overrides, one line."""
    return _WHITESPACE.sub(" ", CONTROLS.sub("\N{REPLACEMENT CHARACTER}", text)).strip()


def utc_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def scope_text(since: datetime, time: str) -> str:
    """How the listing's window reads: 'scored since ...' or 'with trace time since ...'."""
    return f"{'scored' if time == 'scored' else 'with trace time'} since {utc_text(since)}"


def render_text(
    items: Sequence[ReviewItem],
    *,
    since: datetime | None = None,
    agent: str | None = None,
    width: int = 100,
    time: str = DEFAULT_TIME,
) -> str:
    """A readable terminal listing, worst first."""
    metric = items[0].metric if items else None
    scope = f" {scope_text(since, time)}" if since is not None else ""
    who = f"agent {one_line(agent)}" if agent else "all agents"
    if not items:
        hint = ""
        if since is not None:
            other = "trace" if time == "scored" else "scored"
            hint = f" A longer --since, or --time {other}, may find some."
        return f"No scored answers{scope} ({who}).{hint}\n"
    folded = sum(item.count for item in items) - len(items)
    lines = [f"{len(items)} worst answers by {metric}{scope} ({who}), worst first"]
    if folded:
        lines[0] += f"; {folded} near-identical answers folded into them"
    lines.append("")

    def block(label: str, text: str) -> None:
        lines.extend(
            textwrap.wrap(
                one_line(text),
                width=width,
                initial_indent=f"    {label}",
                subsequent_indent=" " * (4 + len(label)),
                break_on_hyphens=False,
            )
            or [f"    {label}".rstrip()]
        )

    def pieces(label: str, parts: list[str]) -> None:
        # Wrapped between the parts, never inside one ("context_precision unmeasured (...)").
        line = f"    {label}"
        indent = " " * (4 + len(label))
        for i, part in enumerate(parts):
            text = part + ("," if i < len(parts) - 1 else "")
            if line.strip() != label.strip() and len(line) + 1 + len(text) > width:
                lines.append(line)
                line = indent + text
            else:
                line += ("" if line.endswith(label) else " ") + text
        lines.append(line)

    for rank, item in enumerate(items, start=1):
        lines.append(
            f"#{rank}  {item.metric} {item.score.render()}  |  agent {one_line(item.agent)}"
            f"  |  {one_line(item.evaluator)}  |  {utc_text(item.timestamp)}"
        )
        if item.similar is not None:
            block("x ", item.similar.describe())
            block("  also: ", ", ".join(item.similar.trace_ids))
        where = f"    trace {one_line(item.trace_id)}"
        if item.conversation_id:
            where += f"  (conversation {one_line(item.conversation_id)}"
            where += f", turn {item.turn})" if item.turn is not None else ")"
        lines.append(where)
        block("Q: ", item.question if item.question is not None else "(not stored)")
        block("A: ", item.answer_excerpt if item.answer_excerpt is not None else "(not stored)")
        if item.unsupported_claims:
            lines.append("    Unsupported claims:")
            for claim in item.unsupported_claims:
                block("  - ", claim)
        if item.violated_constraints:
            lines.append("    Violated constraints:")
            for c in item.violated_constraints:
                block(
                    "  - ",
                    f"{c.constraint_id} [{c.status}]" + (f": {c.reason}" if c.reason else ""),
                )
        pieces("Scores: ", [f"{n} {cell.render()}" for n, cell in item.scores.items()])
        if item.flags:
            pieces("Flags: ", [one_line(f) for f in item.flags])
        lines.append("")
    return "\n".join(lines)


def review_json(
    items: Sequence[ReviewItem],
    *,
    since: datetime,
    metric: str,
    agent: str | None,
    worst: int,
    time: str = DEFAULT_TIME,
    group: bool = True,
) -> dict[str, Any]:
    """The listing as a JSON document: the query, then the items worst first."""
    return {
        "since": since.isoformat(),
        "time": time,
        "metric": metric,
        "agent": agent,
        "worst": worst,
        "group": group,
        "count": len(items),
        "items": [item.to_json() for item in items],
    }


def render_json(
    items: Sequence[ReviewItem],
    *,
    since: datetime,
    metric: str,
    agent: str | None,
    worst: int,
    time: str = DEFAULT_TIME,
    group: bool = True,
) -> str:
    document = review_json(
        items, since=since, metric=metric, agent=agent, worst=worst, time=time, group=group
    )
    return json.dumps(document, ensure_ascii=False, indent=2)


# ------------------------------------------------------------------------------ HTTP routes


@dataclass(frozen=True)
class ReviewQuery:
    """The page's query parameters, as given (for the form) and parsed."""

    since_text: str
    since: datetime
    metric: str
    agent: str | None
    worst: int
    time: str = DEFAULT_TIME
    group: bool = True


class QueryError(ValueError):
    pass


QUERY_PARAMETERS = ("since", "metric", "agent", "worst", "time", "group")


def parse_query(params: Mapping[str, str], now: datetime | None = None) -> ReviewQuery:
    """since (24h, 90m, 7d or ISO), metric, agent (empty = all), worst (1..200)."""
    since_text = (params.get("since") or DEFAULT_SINCE).strip()[:64]
    try:
        since = parse_since(since_text, now)
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    metric = (params.get("metric") or DEFAULT_METRIC).strip()
    try:
        check_metric(metric)
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    agent = (params.get("agent") or "").strip() or None
    if agent is not None and len(agent) > 128:
        raise QueryError("agent names are at most 128 characters")
    worst_text = (params.get("worst") or str(DEFAULT_WORST)).strip()
    if not worst_text.isdigit() or not 1 <= int(worst_text) <= MAX_WORST:
        raise QueryError(f"worst must be a whole number from 1 to {MAX_WORST}")
    time = (params.get("time") or DEFAULT_TIME).strip()
    try:
        check_time(time)
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    group_text = (params.get("group") or "1").strip()
    if group_text not in ("0", "1"):
        raise QueryError("group must be 1 (fold near-identical answers) or 0")
    return ReviewQuery(since_text, since, metric, agent, int(worst_text), time, group_text == "1")


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


def _presented_token(header: str, allow_basic: bool) -> str | None:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if allow_basic and scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2]
    return None


def token_matches(header: str | None, expected: bytes, allow_basic: bool = False) -> bool:
    """Whether an Authorization header carries the token (compared in constant time).

    `expected` is the SHA-256 of the token: comparing digests hides even the token's length.
    With `allow_basic`, HTTP Basic with the token as password (any user name) is accepted too:
    the credentials a browser asks for, so that a link from Grafana opens the page.
    """
    if not header:
        return False
    presented = _presented_token(header, allow_basic)
    if presented is None:
        return False
    return hmac.compare_digest(_digest(presented), expected)


REALM = "rag-monitor review"
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _unauthorized(browser: bool) -> web.Response:
    response = web.Response(status=401, text="401: the review needs a bearer token\n")
    response.headers.add("WWW-Authenticate", f'Bearer realm="{REALM}"')
    if browser:
        response.headers.add("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')
    response.headers.update(SECURITY_HEADERS)
    return response


def add_review_routes(
    app: web.Application,
    store_getter: Callable[[], Store | None],
    token: str | None,
    *,
    redactor: TextRedactor | None = _DEFAULT_REDACTOR,
    trace_url_template: str | None = None,
    allow_basic: bool = True,
    bound_host: str | None = None,
) -> None:
    """Add ``GET /review`` (HTML) and ``GET /review.json`` to the daemon's app.

    `store_getter` is called per request (the store opens after the server starts: None means
    not yet, answered 503). With `token`, both routes require ``Authorization: Bearer <token>``;
    the HTML page also accepts HTTP Basic with the token as password (`allow_basic`), which a
    browser prompts for. `bound_host` is the address the server listens on: without a token,
    a warning is logged unless it is a loopback address. `redactor` is applied to every text
    shown (None: the store's text as is). `trace_url_template`, e.g.
    ``https://grafana.example/explore?traceId={trace_id}``, makes each trace id a link to a
    trace viewer; otherwise it links to its own anchor.
    """
    from monitor.review_page import render_page

    if token is not None and not token.strip():
        raise ValueError("the review token is empty: set a token, or none to disable auth")
    if trace_url_template is not None and not trace_url_template.startswith(
        ("http://", "https://")
    ):
        raise ValueError("trace_url_template must start with http:// or https://")
    if trace_url_template is not None:
        try:
            trace_url_template.format(trace_id="x")
        except (KeyError, IndexError, ValueError):
            raise ValueError("trace_url_template may hold only the field {trace_id}") from None
    expected = _digest(token) if token is not None else None
    if expected is None and not _loopback(bound_host):
        log.warning(
            "review pages served without a token; bind the HTTP server to a private address"
        )

    def authorized(request: web.Request, browser: bool) -> bool:
        if expected is None:
            return True
        header = request.headers.get("Authorization")
        return token_matches(header, expected, allow_basic=browser and allow_basic)

    async def load(query: ReviewQuery) -> tuple[list[ReviewItem], list[str]] | str:
        store = store_getter()
        if store is None:
            return "the results store is not open (store.enabled false, or still starting)"
        try:
            items = await worst_answers(
                store,
                query.since,
                query.metric,
                query.agent,
                query.worst,
                redactor=redactor,
                time=query.time,
                group=query.group,
            )
            agents = await agents_seen(store, query.since, query.time)
        except Exception as exc:
            # The message of a database error may quote the URL: log the type only.
            log.warning("review query failed", error=type(exc).__name__)
            return "the results store could not be read; see the daemon's log"
        return items, agents

    async def page(request: web.Request) -> web.Response:
        if not authorized(request, browser=True):
            return _unauthorized(browser=allow_basic)
        params = {k: request.query.get(k, "") for k in QUERY_PARAMETERS}
        try:
            query = parse_query(params)
        except QueryError as exc:
            body = render_page([], params, [], error=str(exc), trace_url=trace_url_template)
            return _html(body, 400)
        loaded = await load(query)
        if isinstance(loaded, str):
            body = render_page([], params, [], error=loaded, trace_url=trace_url_template)
            return _html(body, 503)
        items, agents = loaded
        body = render_page(
            items, params, agents, since=query.since, trace_url=trace_url_template, time=query.time
        )
        return _html(body, 200)

    async def as_json(request: web.Request) -> web.Response:
        if not authorized(request, browser=False):
            return _unauthorized(browser=False)
        try:
            query = parse_query(request.query)
        except QueryError as exc:
            return _json({"error": str(exc)}, 400)
        loaded = await load(query)
        if isinstance(loaded, str):
            return _json({"error": loaded}, 503)
        items, _agents = loaded
        document = review_json(
            items,
            since=query.since,
            metric=query.metric,
            agent=query.agent,
            worst=query.worst,
            time=query.time,
            group=query.group,
        )
        return _json(document, 200)

    app.router.add_get("/review", page)
    app.router.add_get("/review.json", as_json)


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _html(body: str, status: int) -> web.Response:
    from monitor.review_page import CONTENT_SECURITY_POLICY

    response = web.Response(status=status, text=body, content_type="text/html", charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response


def _json(document: dict[str, Any], status: int) -> web.Response:
    response = web.json_response(
        document, status=status, dumps=lambda v: json.dumps(v, ensure_ascii=False)
    )
    response.headers.update(SECURITY_HEADERS)
    return response


# ------------------------------------------------------------------------------------- CLI


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `review` command to the `rag-monitor` subparsers."""
    review = subparsers.add_parser(
        "review",
        help="the worst recent answers: question, answer, unsupported claims, constraints",
    )
    review.add_argument(
        "--since",
        default=DEFAULT_SINCE,
        help="1h (default), 90m, 7d or ISO time; counted from when answers were scored"
        " (see --time)",
    )
    review.add_argument(
        "--time",
        choices=TIMES,
        default=DEFAULT_TIME,
        help="what --since counts from: 'scored' (default; finds a replay of old traces right"
        " after it ran) or 'trace' (the traces' own timestamps)",
    )
    review.add_argument(
        "--no-group",
        dest="group",
        action="store_false",
        help="list near-identical answers one by one instead of once with a count",
    )
    review.add_argument("--agent", help="only this agent (default: all)")
    review.add_argument(
        "--metric",
        default=DEFAULT_METRIC,
        choices=METRICS,
        help=f"ranked by (default {DEFAULT_METRIC})",
    )
    review.add_argument(
        "--worst", type=_worst_count, default=DEFAULT_WORST, help="how many (default 20)"
    )
    review.add_argument("--json", action="store_true", help="print JSON instead of a listing")
    review.add_argument("--config", type=Path, help="YAML configuration file")
    return review  # type: ignore[no-any-return]


def _worst_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORST:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_WORST}")
    return int(text)


def review_redactor(settings: Settings) -> TextRedactor | None:
    """The redactor for what the review shows: the judge's patterns (`judge.redaction`), unless
    `redact.review` is false (the stored text is then shown as it is)."""
    if not getattr(settings.redact, "review", True):
        return None
    redactor = Redactor(settings.judge.redaction)
    return redactor if redactor.enabled else None


async def run_cli(args: argparse.Namespace, settings: Settings) -> int:
    """`rag-monitor review`: print the worst answers; 0, or 2 (usage) or 3 (store unreadable).

    The caller configures logging first (``configure_logging(settings.log.format, "warning")``,
    as for `rag-monitor agents`), so that the store's start-up log stays quiet.
    """
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    url = settings.store.url.get_secret_value()
    try:
        store = await Store.open(url)
    except Exception as exc:
        print(
            f"rag-monitor: cannot open the results store {sanitized_url(url)}: "
            f"{_scrubbed(exc, url)}",
            file=sys.stderr,
        )
        return EXIT_STORE
    try:
        items = await worst_answers(
            store,
            since,
            args.metric,
            args.agent,
            args.worst,
            redactor=review_redactor(settings),
            time=args.time,
            group=args.group,
        )
    except Exception as exc:
        print(f"rag-monitor: cannot read the results store: {_scrubbed(exc, url)}", file=sys.stderr)
        return EXIT_STORE
    finally:
        await store.close()
    if args.json:
        print(
            render_json(
                items,
                since=since,
                metric=args.metric,
                agent=args.agent,
                worst=args.worst,
                time=args.time,
                group=args.group,
            )
        )
    else:
        print(render_text(items, since=since, agent=args.agent, time=args.time), end="")
    return 0


def _scrubbed(exc: BaseException, url: str) -> str:
    """An exception's message without the store URL or its password."""
    message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    secrets = [url]
    try:
        password = make_url(url).password
    except Exception:
        password = None
    if password:
        secrets.append(str(password))
    for secret in secrets:
        message = message.replace(secret, "***")
    return message
