"""The HTML of ``GET /review``: one self-contained page, no script, no external asset.

Every text that comes from a trace is escaped (``html.escape`` with quotes), so an answer holding
``<script>`` shows as text. The Content-Security-Policy allows nothing but this page's own style
sheet (by hash) and a form submitted to the same origin, so even a mistake in escaping could not
run a script or load anything. Links are relative (``review``, ``review.json``): the page works
behind a reverse proxy that serves the daemon under a path prefix.

Each answer is an ``<article id="trace-ID">`` (the first occurrence of a trace id; a second
evaluator's row of the same trace gets ``trace-ID-EVALUATOR``), with ID percent-encoded the way
Grafana's ``${__value.raw:percentencode}`` does: a dashboard links straight to the answer with
``/review?since=1h#trace-${__data.fields.trace_id:percentencode}``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from urllib.parse import quote, urlencode

from monitor.review import (
    CONTROLS,
    DEFAULT_METRIC,
    DEFAULT_SINCE,
    DEFAULT_TIME,
    DEFAULT_WORST,
    MAX_WORST,
    METRICS,
    TIMES,
    ReviewItem,
    ScoreCell,
    utc_text,
)

CSS = """
:root { color-scheme: light; --bad: #b42318; --warn: #b54708; --ok: #067647; --muted: #667085;
 --line: #e4e7ec; --bg: #f6f7f9; --card: #fff; --ink: #101828; --accent: #1d4ed8; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
 font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Noto Sans CJK JP",
 "DejaVu Sans", sans-serif; }
.page { max-width: 1180px; margin: 0 auto; padding: 20px 24px 40px; }
h1 { font-size: 22px; margin: 0 0 2px; }
.summary { color: var(--muted); margin: 0 0 14px; }
.summary b { color: var(--ink); }
form.filters { display: flex; flex-wrap: wrap; gap: 10px 16px; align-items: end;
 background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px;
 margin-bottom: 16px; }
form.filters label { display: flex; flex-direction: column; font-size: 12px;
 color: var(--muted); gap: 3px; }
form.filters select, form.filters input { font: inherit; color: var(--ink); padding: 4px 6px;
 border: 1px solid #d0d5dd; border-radius: 6px; background: #fff; min-width: 90px; }
form.filters button { font: inherit; padding: 5px 14px; border-radius: 6px;
 border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
.error { background: #fef3f2; border: 1px solid #fecdca; color: var(--bad); padding: 10px 14px;
 border-radius: 8px; }
.empty { color: var(--muted); background: var(--card); border: 1px dashed var(--line);
 padding: 24px; border-radius: 8px; text-align: center; }
article.item { background: var(--card); border: 1px solid var(--line);
 border-left: 4px solid var(--line); border-radius: 8px; padding: 12px 16px;
 margin-bottom: 12px; }
article.item.bad { border-left-color: var(--bad); }
article.item.warn { border-left-color: var(--warn); }
article.item.ok { border-left-color: var(--ok); }
article.item:target { outline: 2px solid var(--accent); }
.item-head { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: baseline;
 margin-bottom: 8px; }
.rank { font-weight: 700; color: var(--muted); }
.score { font-weight: 700; font-variant-numeric: tabular-nums; }
.score.bad { color: var(--bad); }
.score.warn { color: var(--warn); }
.score.ok { color: var(--ok); }
a.trace-id { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px;
 color: var(--accent); overflow-wrap: anywhere; }
.meta { color: var(--muted); }
.meta b { color: var(--ink); font-weight: 600; }
dl { display: grid; grid-template-columns: 160px 1fr; gap: 6px 14px; margin: 0; }
dt { color: var(--muted); font-weight: 600; }
dd { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; unicode-bidi: plaintext; }
dd.answer { background: #f9fafb; border: 1px solid var(--line); border-radius: 6px;
 padding: 6px 8px; }
ul { margin: 0; padding-left: 18px; white-space: normal; }
ul.claims li { color: var(--bad); }
ul.constraints code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.status { font-size: 11px; text-transform: uppercase; letter-spacing: .04em; padding: 1px 6px;
 border-radius: 10px; background: #fef3f2; color: var(--bad); margin: 0 4px; }
table.scores { border-collapse: collapse; white-space: normal; }
table.scores td { padding: 1px 14px 1px 0; vertical-align: middle;
 font-variant-numeric: tabular-nums; }
table.scores .score { display: inline-block; width: 44px; }
table.scores meter { width: 90px; height: 10px; vertical-align: middle; }
.unmeasured { color: var(--muted); font-style: italic; }
.flag { display: inline-block; font-size: 12px; background: #eef4ff; color: #3538cd;
 padding: 1px 8px; border-radius: 10px; margin: 0 4px 2px 0; }
.none { color: var(--muted); }
.fold { font-size: 12px; font-weight: 600; background: #fffaeb; color: var(--warn);
 border: 1px solid #fedf89; padding: 1px 8px; border-radius: 10px; }
details.similar { color: var(--muted); font-size: 12px; }
details.similar code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
footer { color: var(--muted); font-size: 12px; margin-top: 18px; }
footer a { color: var(--accent); }
"""

_CSS_HASH = base64.b64encode(hashlib.sha256(CSS.encode("utf-8")).digest()).decode("ascii")
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_CSS_HASH}'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'self'"
)


def anchor(trace_id: str) -> str:
    """The element id of a trace's answer: ``trace-`` + the id percent-encoded (RFC 3986)."""
    return "trace-" + quote(trace_id, safe="-._~")


def _e(text: object) -> str:
    """Escaped for HTML text and attributes; control characters (terminal escapes, which HTML
    does not allow) and bidirectional overrides replaced."""
    return escape(CONTROLS.sub("\N{REPLACEMENT CHARACTER}", str(text)), quote=True)


def _grade(cell: ScoreCell) -> str:
    if cell.value is None:
        return "unmeasured"
    if cell.value < 0.5:
        return "bad"
    return "warn" if cell.value < 0.8 else "ok"


def _cell(cell: ScoreCell) -> str:
    if cell.value is None:
        reason = f" ({_e(cell.reason)})" if cell.reason else ""
        return f'<td><span class="unmeasured">unmeasured{reason}</span></td>'
    return (
        f'<td><span class="score {_grade(cell)}">{cell.value:.2f}</span>'
        f'<meter min="0" max="1" low="0.5" high="0.8" optimum="1" '
        f'value="{cell.value:.3f}"></meter></td>'
    )


def _text_or_none(text: str | None, what: str) -> str:
    return _e(text) if text is not None else f'<span class="none">({_e(what)} not stored)</span>'


def _item(rank: int, item: ReviewItem, element_id: str, trace_url: str | None) -> str:
    score = item.score
    href = (
        trace_url.format(trace_id=quote(item.trace_id, safe="")) if trace_url else "#" + element_id
    )
    where = ""
    if item.conversation_id:
        where = f" · conversation <b>{_e(item.conversation_id)}</b>"
        if item.turn is not None:
            where += f" turn <b>{item.turn}</b>"
    fold = ""
    if item.similar is not None:
        fold = f'<span class="fold" data-count="{item.similar.count}">×{item.similar.count}</span>'
    head = (
        f'<span class="rank">#{rank}</span>'
        f'<span class="score {_grade(score)}">{_e(item.metric)} {_e(score.render())}</span>'
        f"{fold}"
        f'<a class="trace-id" href="{_e(href)}" title="trace id">{_e(item.trace_id)}</a>'
        f'<span class="meta">agent <b class="agent">{_e(item.agent)}</b> · '
        f'evaluator <b class="evaluator">{_e(item.evaluator)}</b> · '
        f'<time datetime="{_e(item.timestamp.isoformat())}">{_e(utc_text(item.timestamp))}</time>'
        f"{where}</span>"
    )
    rows = []
    if item.similar is not None:
        others = ", ".join(f"<code>{_e(t)}</code>" for t in item.similar.trace_ids)
        rows.append(
            f'<dt>Near-identical</dt><dd><details class="similar"><summary>'
            f"{_e(item.similar.describe())}</summary>other traces: {others}</details></dd>"
        )
    rows += [
        f'<dt>Question</dt><dd class="question">{_text_or_none(item.question, "question")}</dd>',
        "<dt>Answer"
        + (" (excerpt)" if item.answer_truncated else "")
        + f'</dt><dd class="answer">{_text_or_none(item.answer_excerpt, "answer")}</dd>',
    ]
    if item.unsupported_claims:
        claims = "".join(f"<li>{_e(c)}</li>" for c in item.unsupported_claims)
        rows.append(f'<dt>Unsupported claims</dt><dd><ul class="claims">{claims}</ul></dd>')
    else:
        rows.append('<dt>Unsupported claims</dt><dd class="none">none found</dd>')
    if item.violated_constraints:
        broken = "".join(
            f'<li><code>{_e(c.constraint_id)}</code><span class="status">{_e(c.status)}</span>'
            + (_e(c.reason) if c.reason else "")
            + "</li>"
            for c in item.violated_constraints
        )
        rows.append(f'<dt>Violated constraints</dt><dd><ul class="constraints">{broken}</ul></dd>')
    scores = "".join(
        f'<tr data-metric="{_e(name)}"><td>{_e(name)}</td>{_cell(cell)}</tr>'
        for name, cell in item.scores.items()
    )
    rows.append(f'<dt>Scores</dt><dd><table class="scores">{scores}</table></dd>')
    if item.flags:
        flags = "".join(f'<span class="flag">{_e(f)}</span>' for f in item.flags)
        rows.append(f"<dt>Flags</dt><dd>{flags}</dd>")
    return (
        f'<article class="item {_grade(score)}" id="{_e(element_id)}" data-rank="{rank}" '
        f'data-trace-id="{_e(item.trace_id)}" data-evaluator="{_e(item.evaluator)}">'
        f'<div class="item-head">{head}</div><dl>{"".join(rows)}</dl></article>'
    )


def _form(params: Mapping[str, str], agents: Sequence[str]) -> str:
    metric = params.get("metric") or DEFAULT_METRIC
    agent = params.get("agent") or ""
    metric_options = "".join(
        f'<option value="{_e(m)}"{" selected" if m == metric else ""}>{_e(m)}</option>'
        for m in METRICS
    )
    names = list(agents)
    if agent and agent not in names:
        names.insert(0, agent)
    agent_options = '<option value="">all agents</option>' + "".join(
        f'<option value="{_e(a)}"{" selected" if a == agent else ""}>{_e(a)}</option>'
        for a in names
    )
    since = params.get("since") or DEFAULT_SINCE
    worst = params.get("worst") or str(DEFAULT_WORST)
    time = params.get("time") or DEFAULT_TIME
    group = params.get("group") or "1"
    time_labels = {"scored": "when scored", "trace": "trace time"}
    time_options = "".join(
        f'<option value="{_e(t)}"{" selected" if t == time else ""}>{_e(time_labels[t])}</option>'
        for t in TIMES
    )
    group_options = "".join(
        f'<option value="{v}"{" selected" if v == group else ""}>{label}</option>'
        for v, label in (("1", "folded"), ("0", "one by one"))
    )
    return (
        '<form class="filters" method="get" action="review">'
        f'<label>Metric<select name="metric">{metric_options}</select></label>'
        f'<label>Agent<select name="agent">{agent_options}</select></label>'
        f'<label>Since<input name="since" value="{_e(since)}" size="10" '
        'title="24h, 90m, 7d or an ISO time"></label>'
        f'<label>Counted from<select name="time">{time_options}</select></label>'
        f'<label>Worst<input name="worst" type="number" min="1" max="{MAX_WORST}" '
        f'value="{_e(worst)}"></label>'
        f'<label>Near-identical<select name="group">{group_options}</select></label>'
        '<button type="submit">Show</button></form>'
    )


def render_page(
    items: Sequence[ReviewItem],
    params: Mapping[str, str],
    agents: Sequence[str],
    *,
    since: datetime | None = None,
    error: str | None = None,
    trace_url: str | None = None,
    time: str = DEFAULT_TIME,
) -> str:
    """The whole page: filters, then the answers worst first (or the error, or 'none')."""
    metric = params.get("metric") or DEFAULT_METRIC
    agent = params.get("agent") or ""
    parts: list[str] = []
    if error is not None:
        parts.append(f'<p class="error" role="alert">{_e(error)}</p>')
    elif not items:
        parts.append(
            '<p class="empty">No scored answers in this window. An unmeasured score is not '
            "listed (it is not a bad score).</p>"
        )
    used: set[str] = set()
    articles = []
    for rank, item in enumerate(items, start=1):
        element_id = anchor(item.trace_id)
        if element_id in used:  # the same trace again, scored by another evaluator
            element_id += "-" + quote(item.evaluator, safe="-._~")
        if element_id in used:
            element_id += f"-{rank}"
        used.add(element_id)
        articles.append(_item(rank, item, element_id, trace_url))
    summary = ""
    if error is None and since is not None:
        who = f"agent <b>{_e(agent)}</b>" if agent else "all agents"
        when = "scored since" if time == "scored" else "trace time since"
        folded = sum(item.count for item in items) - len(items)
        fold = f" · <b>{folded}</b> near-identical answers folded in" if folded else ""
        summary = (
            f'<p class="summary"><b>{len(items)}</b> answers ranked by <b>{_e(metric)}</b>, '
            f"worst first · {when} <b>{_e(utc_text(since))}</b> · {who}{fold}</p>"
        )
    query = {k: v for k, v in params.items() if v}
    json_link = "review.json" + ("?" + urlencode(query) if query else "")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>Worst answers · {_e(metric)} · rag-monitor</title><style>{CSS}</style></head>"
        '<body><div class="page"><header><h1>Worst answers</h1>'
        f"{summary}</header>{_form(params, agents)}<main>{''.join(parts + articles)}</main>"
        "<footer>Trace text is untrusted and shown redacted (personal data and secrets replaced "
        "by a placeholder). Scores are in [0, 1]; “unmeasured” means the evaluator could not "
        f'score it, never 0. <a href="{_e(json_link)}">This list as JSON</a></footer>'
        "</div></body></html>"
    )
