"""The listing for a terminal (text), for a program (JSON) and for a browser (HTML).

What is shown is untrusted trace text, already redacted by the items. Text output strips
terminal control characters and bidirectional overrides and keeps each field on its lines.

The HTML page (``templates/review.html.j2``, Jinja2 with autoescaping) is self-contained: no
script, no external asset. Every value the template prints is escaped (control characters
replaced first), so an answer holding ``<script>`` shows as text. The Content-Security-Policy
allows nothing but the page's own style sheet (by hash) and a form submitted to the same
origin, so even a mistake in escaping could not run a script or load anything. Links are
relative (``review``, ``review.json``): the page works behind a reverse proxy that serves the
daemon under a path prefix.

Each answer is an ``<article id="trace-ID">`` (the first occurrence of a trace id; a second
evaluator's row of the same trace gets ``trace-ID-EVALUATOR``), with ID percent-encoded the way
Grafana's ``${__value.raw:percentencode}`` does: a dashboard links straight to the answer with
``/review?since=1h#trace-${__data.fields.trace_id:percentencode}``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from markupsafe import Markup

from monitor.review.items import (
    DEFAULT_METRIC,
    DEFAULT_SINCE,
    DEFAULT_WORST,
    MAX_WORST,
    METRICS,
    Review,
    ReviewItem,
    ReviewQuery,
    ScoreCell,
)
from monitor.windows import DEFAULT_TIME, TIMES

if TYPE_CHECKING:
    import jinja2

# C0/C1 controls (terminal escapes) and bidirectional overrides (text that reads differently
# than it is stored); newlines and tabs become spaces in one-line text.
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_WHITESPACE = re.compile(r"\s+")
_TIME_LABELS = {"scored": "when scored", "trace": "trace time"}

# ------------------------------------------------------------------------------------- text


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


class _Lines:
    """A terminal listing being written: labelled, wrapped blocks of untrusted text."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[str] = []

    def block(self, label: str, text: str) -> None:
        self.lines.extend(
            textwrap.wrap(
                one_line(text),
                width=self.width,
                initial_indent=f"    {label}",
                subsequent_indent=" " * (4 + len(label)),
                break_on_hyphens=False,
            )
            or [f"    {label}".rstrip()]
        )

    def pieces(self, label: str, parts: list[str]) -> None:
        # Wrapped between the parts, never inside one ("context_precision unmeasured (...)").
        line = f"    {label}"
        indent = " " * (4 + len(label))
        for i, part in enumerate(parts):
            text = part + ("," if i < len(parts) - 1 else "")
            if line.strip() != label.strip() and len(line) + 1 + len(text) > self.width:
                self.lines.append(line)
                line = indent + text
            else:
                line += ("" if line.endswith(label) else " ") + text
        self.lines.append(line)

    def item(self, rank: int | None, item: ReviewItem) -> None:
        head = (
            f"#{rank}  {item.metric} {item.score.render()}" if rank is not None else "  unmeasured"
        )
        self.lines.append(
            f"{head}  |  agent {one_line(item.agent)}"
            f"  |  {one_line(item.evaluator)}  |  {utc_text(item.timestamp)}"
        )
        if item.similar is not None:
            self.block("x ", item.similar.describe())
            self.block("  also: ", ", ".join(item.similar.trace_ids))
        where = f"    trace {one_line(item.trace_id)}"
        if item.conversation_id:
            where += f"  (conversation {one_line(item.conversation_id)}"
            where += f", turn {item.turn})" if item.turn is not None else ")"
        self.lines.append(where)
        for label, text in (("Q: ", item.question), ("A: ", item.answer_excerpt)):
            self.block(label, text if text is not None else "(not stored)")
        if item.unsupported_claims:
            self.lines.append("    Unsupported claims:")
            for claim in item.unsupported_claims:
                self.block("  - ", claim)
        if item.violated_constraints:
            self.lines.append("    Violated constraints:")
            for c in item.violated_constraints:
                reason = f": {c.reason}" if c.reason else ""
                self.block("  - ", f"{c.constraint_id} [{c.status}]{reason}")
        self.pieces("Scores: ", [f"{n} {cell.render()}" for n, cell in item.scores.items()])
        if item.flags:
            self.pieces("Flags: ", [one_line(f) for f in item.flags])
        if item.judged_because is not None:
            self.block("Judged: ", item.judged_because)
        self.lines.append("")


def render_text(
    items: Sequence[ReviewItem],
    *,
    since: datetime | None = None,
    agent: str | None = None,
    width: int = 100,
    time: str = DEFAULT_TIME,
    review: Review | None = None,
) -> str:
    """A readable terminal listing, worst first; with `review`, its worst answers (`items` are
    ignored), what the list left out, and then the unmeasured answers by reason."""
    if review is not None:
        items = review.worst
    metric = items[0].metric if items else None
    scope = f" {scope_text(since, time)}" if since is not None else ""
    who = f"agent {one_line(agent)}" if agent else "all agents"
    if review is not None and review.empty_hint is not None:
        return f"No scored answers{scope} ({who}). {review.empty_hint}\n"
    listing = _Lines(width)
    if not items and review is None:
        hint = ""
        if since is not None:
            other = "trace" if time == "scored" else "scored"
            hint = f" A longer --since, or --time {other}, may find some."
        return f"No scored answers{scope} ({who}).{hint}\n"
    if items:
        folded = sum(item.count for item in items) - len(items)
        heading = f"{len(items)} worst answers by {metric}{scope} ({who}), worst first"
        if folded:
            heading += f"; {folded} near-identical answers folded into them"
        listing.lines.append(heading)
    if review is not None:
        listing.lines.append(_left_out(review, scope, who))
    listing.lines.append("")
    for rank, item in enumerate(items, start=1):
        listing.item(rank, item)
    if review is not None and review.unmeasured:
        _unmeasured_text(listing, review)
    return "\n".join(listing.lines)


def _left_out(review: Review, scope: str, who: str) -> str:
    """What the worst list does not show: measured answers past it, and unmeasured ones."""
    if not review.worst:
        line = f"No measured answers{scope} ({who})"
    elif review.not_shown:
        more = review.not_shown
        line = f"{more} more measured {_noun(more)} not shown (raise --worst)"
    else:
        line = "Every measured answer is shown"
    if review.unmeasured_count:
        line += (
            f"; {_answers(review.unmeasured_count)} could not be measured and are not ranked:"
            " listed below by reason"
        )
    return line + "."


def _noun(count: int) -> str:
    return "answer" if count == 1 else "answers"


def _answers(count: int) -> str:
    return f"{count} {_noun(count)}"


def _unmeasured_text(listing: _Lines, review: Review) -> None:
    listing.lines += [
        f"Unmeasured {review.metric}: {_answers(review.unmeasured_count)} need a human, by reason",
        "",
    ]
    for group in review.unmeasured:
        head = f"[{one_line(group.reason)}] {_answers(group.count)}"
        if group.not_shown:
            head += f", latest {len(group.items)} shown ({group.not_shown} not shown)"
        listing.lines.append(head)
        if group.explanation:
            listing.block("", group.explanation)
        listing.lines.append("")
        for item in group.items:
            listing.item(None, item)


# ------------------------------------------------------------------------------------- JSON


def review_json(
    items: Sequence[ReviewItem], query: ReviewQuery, review: Review | None = None
) -> dict[str, Any]:
    """The listing as a JSON document: the query, then the items worst first; with `review`,
    its items, what they leave out and the unmeasured answers by reason."""
    if review is not None:
        items = review.worst
    document: dict[str, Any] = {
        "since": query.since.isoformat(),
        "time": query.time,
        "metric": query.metric,
        "agent": query.agent,
        "worst": query.worst,
        "group": query.group,
        "count": len(items),
        "items": [item.to_json() for item in items],
    }
    if review is not None:
        document["measured"] = review.measured
        document["not_shown"] = review.not_shown
        document["unmeasured"] = {
            "count": review.unmeasured_count,
            "by_reason": [group.to_json() for group in review.unmeasured],
        }
        document["empty_hint"] = review.empty_hint
    return document


def render_json(
    items: Sequence[ReviewItem], query: ReviewQuery, review: Review | None = None
) -> str:
    return json.dumps(review_json(items, query, review), ensure_ascii=False, indent=2)


# ------------------------------------------------------------------------------------- HTML


def anchor(trace_id: str) -> str:
    """The element id of a trace's answer: ``trace-`` + the id percent-encoded (RFC 3986)."""
    return "trace-" + quote(trace_id, safe="-._~")


def _escaped(value: object) -> Markup:
    """Every value the template prints: control characters (terminal escapes, which HTML does
    not allow) and bidirectional overrides replaced, then escaped for text and attributes.
    Autoescaping would escape it too; escaping here, with quotes, keeps the page's entities
    (``&#x27;``, ``&quot;``) those of ``html.escape``."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(CONTROLS.sub("\N{REPLACEMENT CHARACTER}", str(value)), quote=True))


def _grade(cell: ScoreCell) -> str:
    if cell.value is None:
        return "unmeasured"
    if cell.value < 0.5:
        return "bad"
    return "warn" if cell.value < 0.8 else "ok"


def _template_file(name: str) -> str:
    return (resources.files("monitor.review") / "templates" / name).read_text("utf-8")


@functools.cache
def _environment() -> jinja2.Environment:
    import jinja2  # here: `rag-monitor` commands that print text need not load it

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("monitor.review", "templates"),
        autoescape=True,
        finalize=_escaped,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["grade"] = _grade
    environment.filters["utc"] = utc_text
    return environment


@functools.cache
def _css() -> str:
    return _template_file("review.css")


@functools.cache
def content_security_policy() -> str:
    """The page's CSP: its own style sheet (by hash) and a same-origin form, nothing else."""
    digest = base64.b64encode(hashlib.sha256(_css().encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; style-src 'sha256-{digest}'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'self'"
    )


@dataclass(frozen=True)
class _Entry:
    rank: int
    item: ReviewItem
    element_id: str
    href: str


def _entries(
    items: Sequence[ReviewItem], trace_url: str | None, used: set[str] | None = None
) -> list[_Entry]:
    """The items' entries; `used` (element ids taken by entries before these) is updated."""
    used = set() if used is None else used
    entries = []
    for rank, item in enumerate(items, start=1):
        element_id = anchor(item.trace_id)
        if element_id in used:  # the same trace again, scored by another evaluator
            element_id += "-" + quote(item.evaluator, safe="-._~")
        if element_id in used:
            element_id += f"-{rank}"
        used.add(element_id)
        href = (
            trace_url.format(trace_id=quote(item.trace_id, safe=""))
            if trace_url
            else "#" + element_id
        )
        entries.append(_Entry(rank, item, element_id, href))
    return entries


def render_page(
    items: Sequence[ReviewItem],
    params: Mapping[str, str],
    agents: Sequence[str],
    *,
    since: datetime | None = None,
    error: str | None = None,
    trace_url: str | None = None,
    time: str = DEFAULT_TIME,
    review: Review | None = None,
) -> str:
    """The whole page: filters (as `params` gave them), then the answers worst first (or the
    error, or 'none'), and with `review`, what the list left out and the unmeasured answers by
    reason. `agents` fill the agent filter."""
    agent = params.get("agent") or ""
    names = list(agents)
    if agent and agent not in names:
        names.insert(0, agent)
    summary = None
    if error is None and since is not None:
        summary = {
            "since": since,
            "when": "scored since" if time == "scored" else "trace time since",
            "folded": sum(item.count for item in items) - len(items),
            "not_shown": review.not_shown if review is not None else 0,
            "unmeasured": review.unmeasured_count if review is not None else 0,
            "empty_hint": review.empty_hint if review is not None else None,
        }
    used: set[str] = set()
    entries = _entries(items, trace_url, used)
    unmeasured = [
        (group, _entries(group.items, trace_url, used))
        for group in (review.unmeasured if review is not None else [])
    ]
    query = {k: v for k, v in params.items() if v}
    form = {
        "metrics": METRICS,
        "agents": names,
        "since": params.get("since") or DEFAULT_SINCE,
        "times": [(t, _TIME_LABELS[t]) for t in TIMES],
        "time": params.get("time") or DEFAULT_TIME,
        "worst": params.get("worst") or str(DEFAULT_WORST),
        "max_worst": MAX_WORST,
        "group": params.get("group") or "1",
    }
    return (
        _environment()
        .get_template("review.html.j2")
        .render(
            css=Markup(_css()),
            metric=params.get("metric") or DEFAULT_METRIC,
            agent=agent,
            summary=summary,
            form=form,
            error=error,
            entries=entries,
            unmeasured=unmeasured,
            json_link="review.json" + ("?" + urlencode(query) if query else ""),
        )
    )
