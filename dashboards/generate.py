"""Generate the Grafana dashboards from plain Python dicts.

    python dashboards/generate.py           # write dashboards/*.json and the chart's copies
    python dashboards/generate.py --check   # exit 1 when a committed file differs

The JSON is committed; tests/test_dashboards.py fails when regeneration would change it. Every
query uses only metrics the daemon exports (`monitor/metrics_catalog.py`; checked here and in
the test). Means are `sum by (...) (rate(x_sum)) / sum by (...) (rate(x_count))`, which is
exact across replicas; quantiles come from the histogram buckets; gauges that are per replica
are aggregated with max/min/sum as each panel says, never averaged into "means of means".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `dashboards` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboards.contract import contract_metrics, contract_problems

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_DIRS = (ROOT / "dashboards", ROOT / "helm" / "rag-monitor" / "dashboards")

# The default of the `review_url` variable; the chart replaces it with dashboards.reviewUrl.
REVIEW_URL_PLACEHOLDER = "http://rag-monitor:9820"
DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["rag-monitor"]
SCHEMA_VERSION = 39

# The chart's alert thresholds (docs/metrics.md) drawn as lines on the score panels.
THRESHOLDS = {
    "faithfulness": 0.8,
    "answer_relevancy": 0.7,
    "context_relevancy": 0.6,
}
METRIC_TITLES = {
    "faithfulness": "Faithfulness",
    "answer_relevancy": "Answer relevancy",
    "context_precision": "Context precision",
    "context_relevancy": "Context relevancy",
    "context_utilization": "Context utilization",
}
GOLDEN_METRICS = {
    # metric label -> (title, default target drawn when the suite exports none)
    "mrr": ("MRR", 0.70),
    "recall_5": ("Recall@5", 0.80),
    "ndcg_5": ("NDCG@5", 0.70),
    "precision_5": ("Precision@5", None),
    "coverage": ("Coverage", None),
    # generation suites: measured without a judge, so the panels always have data to show
    "topic_coverage": ("Expected-topic coverage", None),
    "no_context_pass_rate": ("No-context answers that admit not knowing", None),
}

AGENT = 'agent=~"$agent"'
# Measures that only the LLM judge produces: tier 0 emits none, so their panels are empty
# without a judge and say so instead of showing a bare "No data".
JUDGE_ONLY_METRICS = frozenset({"context_relevancy"})
JUDGE_ONLY_VALUE = "No data: only the LLM judge scores this (tier 0 does not)"
JUDGE_ONLY_NOTE = (
    " Only the LLM judge produces this measure; tier 0 does not, so without a judge the "
    "panel is empty by design."
)
# Tier 0's headline (it ranks answers better than its faithfulness ratio, see docs/scoring.md) and
# the chart's default for RagmonTier0SupportDrop's minimum drop.
TIER0_SUPPORT = ['metric="support"', 'evaluator="heuristic"']
TIER0_MIN_DROP = 0.1
EVALUATOR = 'evaluator=~"$evaluator"'
# Scores of the judge's priority traces describe those traces, not the traffic: panels of means
# and distributions leave them out (monitor/metrics_catalog.SELECTIONS).
NOT_PRIORITY = 'selection!="priority"'

# The store read through Grafana's PostgreSQL data source (docs/review.md, "Grafana: a table panel
# over the store"): the worst recent answers, next to the metrics that raised the alert.
STORE_DS: dict[str, str] = {"type": "grafana-postgresql-datasource", "uid": "${store}"}
REVIEW_METRICS = (
    "faithfulness",
    "support",  # tier 0's headline: ranks answers better than its faithfulness ratio
    "answer_relevancy",
    "context_precision",
    "context_relevancy",
)
# The agents the store holds within the time range. A variable of its own rather than `$agent`:
# that one's All value is the custom regex `.*`, which Grafana inserts unformatted (so
# `${agent:sqlstring}` would read `IN (.*)`), and its regex format does not escape SQL quotes.
# Without a custom All value, All expands to every listed agent, each quoted by `:sqlstring`.
STORE_AGENTS_SQL = (
    "SELECT DISTINCT agent FROM evaluation_results WHERE $__timeFilter(timestamp) ORDER BY 1"
)
# The "Table panel query" of docs/review.md, with `${agent:sqlstring}` read from the store-side
# variable `store_agent` (tests/test_dashboards.py checks that the two stay the same).
WORST_ANSWERS_SQL = """\
SELECT
  r.timestamp AS "time",
  r.agent,
  r.evaluator,
  r.trace_id,
  (r.result::jsonb -> 'scores' -> ${metric:sqlstring} ->> 'value')::float AS score,
  r.faithfulness,
  r.answer_relevancy,
  r.context_precision,
  left(r.query, 200) AS question,
  left(r.answer, 300) AS answer_excerpt,
  (SELECT string_agg(s.value ->> 'statement', ' | ' ORDER BY s.ord)
     FROM jsonb_array_elements(r.result::jsonb -> 'statements') WITH ORDINALITY AS s(value, ord)
    WHERE NOT (s.value ->> 'supported')::boolean) AS unsupported_claims,
  (SELECT string_agg(c.id || ' (' || c.status || ')', ', ' ORDER BY c.id)
     FROM (SELECT v ->> 'constraint_id' AS id, v ->> 'status' AS status
             FROM jsonb_array_elements(r.result::jsonb -> 'constraints') AS v
           UNION
           SELECT v ->> 'constraint_id', v ->> 'status'
             FROM conversation_turns AS t,
                  jsonb_array_elements(t.detail::jsonb -> 'constraints') AS v
            WHERE t.conversation_id = r.conversation_id AND t.trace_id = r.trace_id) AS c
    WHERE c.status IN ('violated', 'omitted')) AS violated_constraints
FROM evaluation_results AS r
WHERE $__timeFilter(r.timestamp)
  AND r.agent IN (${store_agent:sqlstring})
  AND (r.result::jsonb -> 'scores' -> ${metric:sqlstring} ->> 'value') IS NOT NULL
ORDER BY score ASC, r.timestamp DESC
LIMIT 50
"""
# The trace id's data link: the answer on the review page, with its reasons and flags.
REVIEW_ANSWER_URL = (
    "${review_url}/review?since=${__from:date:iso}&metric=${metric}"
    "&agent=${__data.fields.agent}&worst=200#trace-${__data.fields.trace_id}"
)


# --- PromQL builders ------------------------------------------------------------------------------


def sel(*matchers: str) -> str:
    inner = ", ".join(m for m in matchers if m)
    return "{" + inner + "}" if inner else ""


def mean(histogram: str, by: str, matchers: list[str], window: str = "$window") -> str:
    """Mean from a histogram's sum and count, summed over replicas before dividing."""
    s = sel(*matchers)
    grouping = f"sum by ({by}) " if by else "sum "
    return (
        f"{grouping}(rate({histogram}_sum{s}[{window}]))\n"
        f"/\n"
        f"{grouping}(rate({histogram}_count{s}[{window}]))"
    )


def quantile(q: float, histogram: str, by: str, matchers: list[str], window: str) -> str:
    s = sel(*matchers)
    group = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({histogram}_bucket{s}[{window}])))"


def rate(counter: str, by: str, matchers: list[str], window: str = "$__rate_interval") -> str:
    s = sel(*matchers)
    grouping = f"sum by ({by}) " if by else "sum "
    return f"{grouping}(rate({counter}{s}[{window}]))"


def share(counter: str, by: str, part: list[str], whole: list[str], window: str) -> str:
    """part / whole of one counter, e.g. unsupported statements / all statements."""
    return f"{rate(counter, by, part, window)}\n/\n{rate(counter, by, whole, window)}"


ESTIMATE_BY = "agent, metric, evaluator, quantity"
Z95 = 1.96  # as the recording rules and monitor/estimates/estimator.py


def estimate_term(
    term: str,
    matchers: list[str],
    window: str = "$window",
    counter: str = "ragmon_estimate_terms_total",
) -> str:
    """One running sum of the population estimates over the window (all replicas): of the
    traffic and the uniform draw, or (`ragmon_estimate_weighted_terms_total`) of every judged
    trace."""
    s = sel(f'term="{term}"', *matchers)
    return f"sum by ({ESTIMATE_BY}) (increase({counter}{s}[{window}]))"


def ppi_estimate(matchers: list[str], window: str = "$window") -> tuple[str, str, str]:
    """The prediction-powered estimate and its 95% bounds, as the recording rules compute them
    (docs/metrics.md, "Population estimates"), over the dashboard's window."""

    def t(term: str) -> str:
        return estimate_term(term, matchers, window)

    def j(term: str) -> str:
        return estimate_term(term, matchers, window, "ragmon_estimate_weighted_terms_total")

    shift = f"((({j('y')} - {j('f')}) / ({j('m')} > 0)) and {t('clusters')} > 1)"
    value = f"({t('predicted')} / ({t('traces')} > 0) + {shift})"

    spread = (
        f"(({j('yy')} - 2 * {j('yf')} + {j('ff')})"
        f" - 2 * {shift} * ({j('ym')} - {j('fm')})"
        f" + {shift} ^ 2 * {j('mm')})"
    )
    stderr = (
        f"(sqrt(clamp_min({j('clusters')} / ({j('clusters')} - 1 > 0) * {spread}, 0)) / {j('m')})"
    )
    lower = f"clamp_min({value} - {Z95} * {stderr}, 0)"
    upper = f"clamp_max({value} + {Z95} * {stderr}, 1)"
    return value, lower, upper


def uniform_estimate(matchers: list[str], window: str = "$window") -> str:
    """The uniform draw's estimate alone (weighted by inverse inclusion probability)."""
    return (
        f"{estimate_term('y', matchers, window)}\n/\n({estimate_term('m', matchers, window)} > 0)"
    )


# --- panel builders -------------------------------------------------------------------------------


def target(
    expr: str,
    legend: str = "",
    *,
    instant: bool = False,
    exemplar: bool = False,
    fmt: str = "time_series",
    ref: str = "A",
) -> dict[str, Any]:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "exemplar": exemplar,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "refId": ref,
    }


def _thresholds(
    line: float | None, *, low_is_bad: bool = True, red_above: float | None = None
) -> dict[str, Any]:
    if red_above is not None:
        steps = [{"color": "green", "value": None}, {"color": "red", "value": red_above}]
    elif line is None:
        steps = [{"color": "green", "value": None}]
    elif low_is_bad:
        steps = [{"color": "red", "value": None}, {"color": "green", "value": line}]
    else:
        steps = [{"color": "green", "value": None}, {"color": "red", "value": line}]
    return {"mode": "absolute", "steps": steps}


def timeseries(
    title: str,
    targets: list[dict[str, Any]],
    *,
    unit: str = "short",
    description: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    threshold: float | None = None,
    low_is_bad: bool = True,
    stack: bool = False,
    links: list[dict[str, Any]] | None = None,
    dashed: str | None = None,
    no_value: str | None = None,
    width: int = 12,
    height: int = 8,
) -> dict[str, Any]:
    custom: dict[str, Any] = {
        "drawStyle": "line",
        "fillOpacity": 10 if stack else 0,
        "lineWidth": 1,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        "thresholdsStyle": {"mode": "line" if threshold is not None else "off"},
    }
    defaults: dict[str, Any] = {
        "custom": custom,
        "unit": unit,
        "thresholds": _thresholds(threshold, low_is_bad=low_is_bad),
        "links": links or [],
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    if no_value is not None:
        defaults["noValue"] = no_value  # say why the panel is empty instead of "No data"
    overrides = []
    if dashed:
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": dashed},
                "properties": [
                    {
                        "id": "custom.lineStyle",
                        "value": {"dash": [10, 10], "fill": "dash"},
                    }
                ],
            }
        )
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _refs(targets),
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "last"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "_size": (width, height),
    }


def stat(
    title: str,
    expr: str,
    *,
    unit: str = "short",
    description: str = "",
    threshold: float | None = None,
    low_is_bad: bool = True,
    red_above: float | None = None,
    decimals: int | None = None,
    width: int = 4,
    height: int = 4,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "thresholds": _thresholds(threshold, low_is_bad=low_is_bad, red_above=red_above),
        "color": {"mode": "thresholds"},
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr, instant=True)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "colorMode": "background",
            "graphMode": "none",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
        "_size": (width, height),
    }


def table(
    title: str,
    targets: list[dict[str, Any]],
    *,
    description: str = "",
    unit: str = "short",
    width: int = 24,
    height: int = 8,
) -> dict[str, Any]:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _refs(targets),
        "fieldConfig": {"defaults": {"unit": unit, "decimals": 3}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}}},
        ],
        "_size": (width, height),
    }


def store_table(
    title: str, sql: str, *, description: str = "", width: int = 24, height: int = 14
) -> dict[str, Any]:
    """A table of rows the SQL query reads from the store (PostgreSQL data source `$store`)."""
    scores = {
        "matcher": {
            "id": "byRegexp",
            "options": "^(score|faithfulness|answer_relevancy|context_precision)$",
        },
        "properties": [
            {"id": "unit", "value": "percentunit"},
            {"id": "decimals", "value": 2},
            {"id": "min", "value": 0},
            {"id": "max", "value": 1},
            {"id": "custom.cellOptions", "value": {"type": "color-background"}},
            {"id": "color", "value": {"mode": "thresholds"}},
            {
                "id": "thresholds",
                "value": {
                    "mode": "absolute",
                    "steps": [
                        {"color": "red", "value": None},
                        {"color": "orange", "value": 0.5},
                        {"color": "green", "value": 0.8},
                    ],
                },
            },
            {"id": "noValue", "value": "unmeasured"},  # NULL: not computed, never 0
        ],
    }
    wrapped = {
        "matcher": {
            "id": "byRegexp",
            "options": "^(question|answer_excerpt|unsupported_claims|violated_constraints)$",
        },
        "properties": [{"id": "custom.cellOptions", "value": {"type": "auto", "wrapText": True}}],
    }
    trace_link = {
        "matcher": {"id": "byName", "options": "trace_id"},
        "properties": [
            {
                "id": "links",
                "value": [
                    {
                        "title": "Open this answer on the review page",
                        "url": REVIEW_ANSWER_URL,
                        "targetBlank": True,
                    }
                ],
            }
        ],
    }
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": STORE_DS,
        "targets": [
            {
                "datasource": STORE_DS,
                "editorMode": "code",
                "format": "table",
                "rawQuery": True,
                "rawSql": sql.strip(),
                "refId": "A",
            }
        ],
        "fieldConfig": {
            "defaults": {"custom": {"cellOptions": {"type": "auto"}}},
            "overrides": [scores, wrapped, trace_link],
        },
        "options": {"showHeader": True, "cellHeight": "sm", "sortBy": []},
        "_size": (width, height),
    }


def bargauge(
    title: str,
    expr: str,
    legend: str,
    *,
    description: str = "",
    unit: str = "percentunit",
    maximum: float | None = 1,
    threshold: float | None = None,
    width: int = 12,
    height: int = 8,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "min": 0,
        "thresholds": _thresholds(threshold, low_is_bad=False),
        "color": {"mode": "thresholds"},
    }
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr, legend, instant=True)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
        },
        "_size": (width, height),
    }


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "_size": (24, 1)}


def _refs(targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for index, t in enumerate(targets):
        t["refId"] = chr(ord("A") + index)
    return targets


def review_link(title: str, query: str) -> dict[str, Any]:
    return {"title": title, "url": "${review_url}/review?" + query, "targetBlank": True}


def layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give panels ids and grid positions, left to right, wrapping at 24 columns."""
    x = y = row_height = 0
    placed = []
    for panel_id, panel in enumerate(panels, start=1):
        width, height = panel.pop("_size")
        if panel["type"] == "row" or x + width > 24:
            x, y, row_height = 0, y + row_height, 0
        panel["id"] = panel_id
        panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
        x += width
        row_height = max(row_height, height)
        if panel["type"] == "row":
            x, y, row_height = 0, y + height, 0
        placed.append(panel)
    return placed


# --- template variables ---------------------------------------------------------------------------


def datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(name: str, label: str, query: str, *, multi: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 0,
        "regex": "",
        "options": [],
    }


def agent_variable() -> dict[str, Any]:
    return query_variable("agent", "Agent", "label_values(ragmon_traces_processed_total, agent)")


def evaluator_variable() -> dict[str, Any]:
    return query_variable(
        "evaluator", "Evaluator", "label_values(ragmon_evaluations_total, evaluator)"
    )


def window_variable(default: str = "1h") -> dict[str, Any]:
    choices = ["5m", "15m", "1h", "6h", "1d"]
    return {
        "name": "window",
        "label": "Averaging window",
        "type": "custom",
        "description": "Window of the means and quantiles (the alerts use 1h and 6h).",
        "query": ",".join(choices),
        "current": {"selected": True, "text": default, "value": default},
        "options": [
            {"selected": choice == default, "text": choice, "value": choice} for choice in choices
        ],
        "multi": False,
        "includeAll": False,
        "hide": 0,
    }


def review_url_variable() -> dict[str, Any]:
    return {
        "name": "review_url",
        "label": "rag-monitor URL",
        "type": "textbox",
        "description": "Base URL of the daemon's HTTP server; links open its /review page.",
        "query": REVIEW_URL_PLACEHOLDER,
        "current": {"text": REVIEW_URL_PLACEHOLDER, "value": REVIEW_URL_PLACEHOLDER},
        "options": [
            {"selected": True, "text": REVIEW_URL_PLACEHOLDER, "value": REVIEW_URL_PLACEHOLDER}
        ],
        "hide": 0,
    }


def store_variable() -> dict[str, Any]:
    return {
        "name": "store",
        "label": "Store (PostgreSQL)",
        "type": "datasource",
        "description": "The PostgreSQL data source on the daemon's store, with a read-only role "
        "(docs/review.md).",
        "query": "grafana-postgresql-datasource",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def store_agent_variable() -> dict[str, Any]:
    return {
        "name": "store_agent",
        "label": "Agent (store)",
        "type": "query",
        "description": "Agents in the store within the time range; filters the store's table.",
        "datasource": STORE_DS,
        "definition": STORE_AGENTS_SQL,
        "query": STORE_AGENTS_SQL,
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,  # no custom All value: All lists every agent, quoted by :sqlstring
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 0,
        "regex": "",
        "options": [],
    }


def review_metric_variable(default: str = "faithfulness") -> dict[str, Any]:
    return {
        "name": "metric",
        "label": "Worst by",
        "type": "custom",
        "description": "The metric the store's table ranks answers by, worst first.",
        "query": ",".join(REVIEW_METRICS),
        "current": {"selected": True, "text": default, "value": default},
        "options": [
            {"selected": choice == default, "text": choice, "value": choice}
            for choice in REVIEW_METRICS
        ],
        "multi": False,
        "includeAll": False,
        "hide": 0,
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    panels: list[dict[str, Any]],
    *,
    review_query: str = "since=1h&worst=20",
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "",
        "annotations": {"list": []},
        "links": [
            {
                "title": "rag-monitor dashboards",
                "type": "dashboards",
                "tags": TAGS,
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            },
            {
                "title": "Worst answers (/review)",
                "type": "link",
                "url": "${review_url}/review?" + review_query,
                "icon": "external link",
                "targetBlank": True,
                "tooltip": "The daemon's review page: worst recent answers with their reasons",
            },
        ],
        "templating": {"list": variables},
        "panels": layout(panels),
    }


# --- dashboards -----------------------------------------------------------------------------------


def quality_overview() -> dict[str, Any]:
    faithfulness = 'metric="faithfulness"'
    judged_faithfulness = mean(
        "ragmon_evaluation_score_ratio",
        "agent",
        [faithfulness, 'evaluator=~"llm|ragas"', NOT_PRIORITY, AGENT],
    )
    tier0_faithfulness = mean(
        "ragmon_evaluation_score_ratio", "agent", [faithfulness, 'evaluator="heuristic"', AGENT]
    )
    panels: list[dict[str, Any]] = [row("At a glance (selected agents and evaluators, $window)")]
    for metric in ("faithfulness", "answer_relevancy", "context_precision"):
        panels.append(
            stat(
                f"{METRIC_TITLES[metric]} (mean)",
                mean(
                    "ragmon_evaluation_score_ratio",
                    "",
                    [f'metric="{metric}"', NOT_PRIORITY, AGENT, EVALUATOR],
                ),
                unit="percentunit",
                threshold=THRESHOLDS.get(metric),
                decimals=3,
            )
        )
    panels += [
        stat(
            "Traces / s",
            rate("ragmon_traces_processed_total", "", [AGENT], "$window"),
            unit="reqps",
        ),
        stat(
            "Judged share",
            share(
                "ragmon_sampler_decisions_total",
                "",
                ['outcome=~"sampled|priority"', AGENT],
                [AGENT],
                "$window",
            ),
            unit="percentunit",
            description="Traces sent to the LLM judge (sampled or priority) / all sampler "
            "decisions.",
        ),
        stat(
            "Unmeasured share",
            _unmeasured_share(""),
            unit="percentunit",
            red_above=0.2,
            description="Scores that could not be computed / all scores attempted.",
        ),
    ]

    panels += tier0_grounding_panels()

    panels += population_estimate_panels()

    panels.append(row("Means by agent (histogram sum / count, exact across replicas)"))
    for metric in (
        "faithfulness",
        "answer_relevancy",
        "context_precision",
        "context_relevancy",
    ):
        panels.append(
            timeseries(
                f"{METRIC_TITLES[metric]}: mean by agent",
                [
                    target(
                        mean(
                            "ragmon_evaluation_score_ratio",
                            "agent, evaluator",
                            [f'metric="{metric}"', NOT_PRIORITY, AGENT, EVALUATOR],
                        ),
                        "{{agent}} ({{evaluator}})",
                        exemplar=True,
                    )
                ],
                unit="percentunit",
                minimum=0,
                maximum=1,
                threshold=THRESHOLDS.get(metric),
                links=[
                    review_link(
                        "Worst answers of ${__field.labels.agent}",
                        f"agent=${{__field.labels.agent}}&metric={metric}&since=1h&worst=20",
                    )
                ],
                description=f"Mean {metric} over $window: sum of scores / count of scores, "
                "summed over replicas first; the judge's from its uniform draw only (priority "
                "traces left out), unweighted: the estimate over all traffic is in the row "
                "above. The line is the alert threshold."
                + (JUDGE_ONLY_NOTE if metric in JUDGE_ONLY_METRICS else ""),
                no_value=JUDGE_ONLY_VALUE if metric in JUDGE_ONLY_METRICS else None,
            )
        )

    panels.append(row("Distribution (quantiles from the histogram buckets; exemplars = traces)"))
    for metric in ("faithfulness", "answer_relevancy", "context_precision"):
        matchers = [f'metric="{metric}"', NOT_PRIORITY, AGENT, EVALUATOR]
        panels.append(
            timeseries(
                f"{METRIC_TITLES[metric]}: p10 and median by agent",
                [
                    target(
                        quantile(
                            0.1, "ragmon_evaluation_score_ratio", "agent", matchers, "$window"
                        ),
                        "p10 {{agent}}",
                        exemplar=True,
                    ),
                    target(
                        quantile(
                            0.5, "ragmon_evaluation_score_ratio", "agent", matchers, "$window"
                        ),
                        "p50 {{agent}}",
                        exemplar=True,
                    ),
                ],
                unit="percentunit",
                minimum=0,
                maximum=1,
                threshold=THRESHOLDS.get(metric),
                width=8,
                links=[
                    review_link(
                        "Worst answers of ${__field.labels.agent}",
                        f"agent=${{__field.labels.agent}}&metric={metric}&since=1h&worst=20",
                    )
                ],
                description="Exemplar dots carry the trace id of an observed score; the "
                "data source's exemplar link opens the trace.",
            )
        )

    panels.append(row("Tier 0 (heuristic) versus LLM judge"))
    for metric in ("faithfulness", "answer_relevancy", "context_precision"):
        panels.append(
            timeseries(
                f"{METRIC_TITLES[metric]}: by evaluator",
                [
                    target(
                        mean(
                            "ragmon_evaluation_score_ratio",
                            "evaluator",
                            [f'metric="{metric}"', NOT_PRIORITY, AGENT],
                        ),
                        "{{evaluator}}",
                        exemplar=True,
                    )
                ],
                unit="percentunit",
                minimum=0,
                maximum=1,
                threshold=THRESHOLDS.get(metric),
                width=8,
                description="The same metric from the heuristic tier (every trace) and from "
                "the judge (a sample), over the selected agents.",
            )
        )
    panels += [
        timeseries(
            "Unsupported statements share by evaluator",
            [
                target(
                    share(
                        "ragmon_statements_total",
                        "agent, evaluator",
                        ['outcome="unsupported"', AGENT],
                        [AGENT],
                        "$window",
                    ),
                    "{{agent}} ({{evaluator}})",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Judge minus tier 0: faithfulness gap",
            [
                target(
                    f"({judged_faithfulness})\n-\n({tier0_faithfulness})",
                    "{{agent}}",
                    exemplar=True,
                )
            ],
            unit="percentunit",
            description="How far the cheap estimate is from the judge; a widening gap means "
            "tier 0 no longer tracks quality for this agent. Needs the LLM judge: without one "
            "this panel is empty by design.",
            no_value="No data: needs the LLM judge's faithfulness",
        ),
    ]

    panels.append(row("Coverage and sample counts"))
    panels += [
        timeseries(
            "Unmeasured share by agent and metric",
            [target(_unmeasured_share("agent, metric"), "{{agent}} {{metric}}")],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=8,
        ),
        timeseries(
            "Unmeasured by reason",
            [
                target(
                    rate(
                        "ragmon_evaluation_unmeasured_total",
                        "reason",
                        [AGENT, EVALUATOR],
                        "$__rate_interval",
                    ),
                    "{{reason}}",
                )
            ],
            unit="ops",
            stack=True,
            width=8,
        ),
        timeseries(
            "Evaluations per $window by agent and evaluator (sample counts)",
            [
                target(
                    "sum by (agent, evaluator) (increase(ragmon_evaluations_total"
                    f"{sel(AGENT, EVALUATOR)}[$window]))",
                    "{{agent}} ({{evaluator}})",
                )
            ],
            unit="short",
            width=8,
            description="How many evaluations each mean rests on; the alerts need at least "
            "the configured minimum per hour.",
        ),
        timeseries(
            "Tier-0 flags by reason",
            [target(rate("ragmon_evaluation_flags_total", "reason", [AGENT]), "{{reason}}")],
            unit="ops",
            stack=True,
        ),
        timeseries(
            "Evaluation outcomes",
            [
                target(
                    rate("ragmon_evaluations_total", "evaluator, outcome", [AGENT, EVALUATOR]),
                    "{{evaluator}} {{outcome}}",
                )
            ],
            unit="ops",
        ),
        table(
            "Scores by agent, metric and evaluator ($window)",
            [
                target(
                    mean(
                        "ragmon_evaluation_score_ratio",
                        "agent, metric, evaluator",
                        [AGENT, EVALUATOR],
                    ),
                    instant=True,
                    fmt="table",
                ),
                target(
                    "sum by (agent, metric, evaluator) (increase("
                    f"ragmon_evaluation_score_ratio_count{sel(AGENT, EVALUATOR)}[$window]))",
                    instant=True,
                    fmt="table",
                ),
            ],
            description="Value #A: mean score; Value #B: number of scores in the window.",
        ),
    ]

    panels += _unmeasurable_input_panels()

    panels.append(row("Worst answers ($metric, from the store)"))
    panels.append(
        store_table(
            "Worst answers (from the store)",
            WORST_ANSWERS_SQL,
            description="The worst answers by $metric within the time range, read from the "
            "daemon's PostgreSQL store through the data source $store (a read-only role, see "
            "docs/review.md). Unmeasured scores are never listed and never shown as 0. The "
            "trace id opens the answer on the review page; the agent filter is $store_agent, "
            "the store's own list of agents.",
        )
    )
    return dashboard(
        "ragmon-quality",
        "rag-monitor / Quality overview",
        "Answer quality by agent: faithfulness, answer relevancy and context metrics from the "
        "heuristic tier and the LLM judge.",
        [
            datasource_variable(),
            agent_variable(),
            evaluator_variable(),
            window_variable(),
            review_url_variable(),
            store_variable(),
            store_agent_variable(),
            review_metric_variable(),
        ],
        panels,
        review_query="since=1h&metric=faithfulness&worst=20",
    )


def population_estimate_panels() -> list[dict[str, Any]]:
    """The judge's scores over all traffic: estimate and 95% band per agent, from tier 0 and the
    judged traces, each weighted by its inverse chance of being judged, with what they rest
    on."""
    panels: list[dict[str, Any]] = [
        row("Population estimates: the judge's scores over all traffic (estimate and 95% band)")
    ]
    shown = (
        ("faithfulness", "mean", THRESHOLDS["faithfulness"], "Faithfulness"),
        ("faithfulness", "below", None, "Share of answers below the faithfulness threshold"),
        ("answer_relevancy", "mean", THRESHOLDS["answer_relevancy"], "Answer relevancy"),
        ("context_relevancy", "mean", THRESHOLDS["context_relevancy"], "Context relevancy"),
    )
    for metric, quantity, threshold, title in shown:
        matchers = [f'metric="{metric}"', f'quantity="{quantity}"', AGENT]
        value, lower, upper = ppi_estimate(matchers)
        panels.append(
            timeseries(
                f"{title}: estimate over all traffic",
                [
                    target(value, "{{agent}} estimate"),
                    target(lower, "{{agent}} lower 95%", ref="B"),
                    target(upper, "{{agent}} upper 95%", ref="C"),
                    target(uniform_estimate(matchers), "{{agent}} uniform draw only", ref="D"),
                ],
                unit="percentunit",
                minimum=0,
                maximum=1,
                threshold=threshold,
                low_is_bad=quantity == "mean",
                dashed="(lower|upper) 95%$",
                links=[
                    review_link(
                        "Worst answers of ${__field.labels.agent}",
                        f"agent=${{__field.labels.agent}}&metric={metric}&since=1h&worst=20",
                    )
                ],
                description="Prediction-powered estimate over $window: tier 0's calibrated "
                "prediction averaged over every trace, plus the judge's mean difference from it "
                "on the traces it judged, each weighted by its inverse chance of being judged "
                "(the uniform draw's rate, more for a priority); dashed: its 95% interval "
                "(conversations as the unit). The uniform draw's own estimate is shown beside "
                'it. docs/metrics.md, "Population estimates".'
                + (JUDGE_ONLY_NOTE if metric in JUDGE_ONLY_METRICS else ""),
                no_value="No data: needs the LLM judge and judged traces of the uniform draw",
            )
        )
    judged = [
        target(
            rate(
                "ragmon_sampler_decisions_total",
                "outcome",
                ['outcome=~"sampled|priority|priority_capped"', AGENT],
                "$window",
            )
            + " * 3600",
            "{{outcome}}",
        ),
        target(
            rate("ragmon_sampler_priorities_total", "reason", [AGENT], "$window") + " * 3600",
            "priority rule {{reason}}",
            ref="B",
        ),
    ]
    means = ['quantity="mean"', AGENT]
    panels += [
        timeseries(
            "Judged per hour: uniform draw, priorities, capped",
            judged,
            unit="short",
            width=8,
            description="sampled: the uniform draw; priority: judged for a priority rule only "
            "(by a chance the cap sampling.priority_max_share sets: the estimates weigh it by "
            "its inverse); priority_capped: priorities that chance skipped; and the priority rules "
            "matched, drawn or not. The estimate alerts need 20 sampled in the hour: an agent "
            "under it cannot page (sampling.min_drawn_per_hour raises a quiet agent's rate).",
        ),
        timeseries(
            "Judge minus tier 0 on the uniform draw (correction)",
            [
                target(
                    f"({estimate_term('y', means)} - {estimate_term('f', means)})\n/\n"
                    f"({estimate_term('m', means)} > 0)",
                    "{{agent}} {{metric}}",
                )
            ],
            unit="percentunit",
            width=8,
            description="How far the judge's scores are above tier 0's calibrated prediction on "
            "the uniform draw; near 0 when the calibration tracks the judge. A lasting gap is "
            "corrected in the estimate, and narrows as the calibration follows.",
        ),
        timeseries(
            "Tier-0 calibration: judged traces and age (per replica, largest)",
            [
                target(
                    "max by (metric, language) (ragmon_estimate_calibration_labels)",
                    "{{metric}} {{language}} labels",
                ),
                target(
                    "max by (metric, language) (ragmon_estimate_calibration_age_seconds)",
                    "{{metric}} {{language}} age (s)",
                    ref="B",
                ),
            ],
            unit="short",
            width=8,
            description="Judged traces each calibration (per judge metric and answer "
            "language) is fitted on, and seconds since it last took one in. Per replica: the "
            "largest is shown. Under estimates.calibration_min_labels the prediction is a "
            "constant and the estimate is the uniform draw's.",
        ),
    ]
    return panels


def _unmeasurable_input_panels() -> list[dict[str, Any]]:
    """What the input does not let rag-monitor measure: retrieved documents without their text
    (faithfulness unmeasured, `contexts_without_text`) and OTLP traces that are no RAG turn."""
    flagged = rate(
        "ragmon_evaluation_flags_total",
        "agent",
        ['reason="contexts_without_text"', AGENT],
        "$window",
    )
    # the whole: tier-0 evaluations (every trace gets exactly one)
    evaluated = rate(
        "ragmon_evaluations_total", "agent", ['evaluator="heuristic"', AGENT], "$window"
    )
    # No flag counter exists until a first trace is flagged: that share is 0, not "no data".
    textless = f"(\n{flagged}\nor\n{evaluated} * 0\n)\n/\n{evaluated}"
    not_rag = rate("ragmon_traces_skipped_total", "", ['reason="otlp_not_rag"'], "$window")
    scored = rate("ragmon_traces_decoded_total", "", ['format="otlp"'], "$window")
    return [
        row("What the input does not let us measure"),
        timeseries(
            "Traces whose retrieved documents carry no text (share by agent)",
            [target(textless, "{{agent}}")],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=12,
            description="Tier-0 evaluations flagged contexts_without_text / all tier-0 "
            "evaluations. The instrumentation records retrieved documents without their text "
            "(ids and scores only, or content capture off), so faithfulness and the context "
            "metrics are unmeasured for these traces: turn content capture on (docs/input.md, Feed "
            "it from your app).",
        ),
        timeseries(
            "OTLP traces that are no RAG turn (share)",
            [target(f"{not_rag}\n/\n({not_rag}\n+\n{scored})", "not RAG")],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=12,
            description="OTLP traces skipped as otlp_not_rag (no LLM call or retrieval, or a "
            "plain LLM call: no retrieval, and no pipeline span or no conversation) / all OTLP "
            "traces assembled.",
        ),
    ]


def tier0_grounding_panels() -> list[dict[str, Any]]:
    """Tier 0's headline, support, per agent against its own 7-day mean: what
    RagmonTier0SupportDrop pages on, with or without a judge."""
    hour = mean("ragmon_evaluation_score_ratio", "agent", [*TIER0_SUPPORT, AGENT], "1h")
    week = mean("ragmon_evaluation_score_ratio", "agent", [*TIER0_SUPPORT, AGENT], "7d")
    worst = review_link(
        "Worst answers of ${__field.labels.agent} by support",
        "agent=${__field.labels.agent}&metric=support&since=1h&worst=20",
    )
    return [
        row("Tier-0 support: the headline without a judge (every trace)"),
        stat(
            "Tier-0 support (mean, $window)",
            mean("ragmon_evaluation_score_ratio", "", [*TIER0_SUPPORT, AGENT], "$window"),
            unit="percentunit",
            decimals=3,
            description="Mean of tier 0's support, its estimate that an answer is grounded in "
            "its contexts (every trace, no judge needed). It ranks answers better than tier "
            "0's faithfulness ratio; its level depends on the agent's traffic, so watch it "
            "against the agent's own baseline (next panels).",
            width=4,
            height=8,
        ),
        timeseries(
            "Tier-0 support by agent: last hour against its 7-day mean",
            [
                target(hour, "{{agent}} last hour", exemplar=True),
                target(week, "{{agent}} 7-day mean", exemplar=True),
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            dashed="7-day mean",
            links=[worst],
            description="Mean support over the last hour (solid) and over the last 7 days "
            "(dashed), summed over replicas first. RagmonTier0SupportDrop fires when the hour "
            "falls below the 7 days before it by more than the agent's normal hour-to-hour "
            "movement (at least 0.1), with enough scores in both.",
            width=10,
        ),
        timeseries(
            "Tier-0 support drop against the 7-day mean",
            [target(f"({week})\n-\n({hour})", "{{agent}}", exemplar=True)],
            unit="percentunit",
            threshold=TIER0_MIN_DROP,
            low_is_bad=False,
            links=[worst],
            description="7-day mean minus last-hour mean per agent; above the line (the "
            "alert's minimum drop) answers are less grounded than the agent's own normal.",
            width=10,
        ),
    ]


def _unmeasured_share(by: str) -> str:
    matchers = [AGENT, EVALUATOR]
    unmeasured = rate("ragmon_evaluation_unmeasured_total", by, matchers, "$window")
    measured = rate("ragmon_evaluation_score_ratio_count", by, matchers, "$window")
    # `or ... * 0`: a metric that was never measured still shows (as 100 % unmeasured).
    return f"{unmeasured}\n/\n({unmeasured}\n+\n({measured} or {unmeasured} * 0))"


def conversations() -> dict[str, Any]:
    panels: list[dict[str, Any]] = [row("At a glance ($window)")]
    panels += [
        stat(
            "Hallucination H_u",
            mean("ragmon_turn_hallucination_ratio", "", [AGENT]),
            unit="percentunit",
            threshold=0.2,
            low_is_bad=False,
            decimals=3,
            width=6,
        ),
        stat(
            "Drift D_r",
            mean("ragmon_turn_drift_ratio", "", [AGENT]),
            unit="percentunit",
            threshold=0.3,
            low_is_bad=False,
            decimals=3,
            width=6,
        ),
        stat(
            "Active conversations (all replicas)",
            "sum(ragmon_conversations_active)",
            width=6,
        ),
        stat(
            "Turns / s",
            rate("ragmon_turn_hallucination_ratio_count", "", [AGENT], "$window"),
            unit="reqps",
            width=6,
        ),
    ]
    panels.append(row("Hallucination and drift by agent"))
    panels += [
        timeseries(
            "Hallucination H_u by agent",
            [
                target(
                    mean("ragmon_turn_hallucination_ratio", "agent, evaluator", [AGENT]),
                    "{{agent}} ({{evaluator}})",
                    exemplar=True,
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            threshold=0.2,
            low_is_bad=False,
            links=[
                review_link(
                    "Worst answers of ${__field.labels.agent}",
                    "agent=${__field.labels.agent}&metric=faithfulness&since=1h&worst=20",
                )
            ],
            description="H_u = mean of H_t = U_t / max(1, S_t + U_t) over turns (sum / count).",
        ),
        timeseries(
            "Constraint drift D_r by agent",
            [
                target(
                    mean("ragmon_turn_drift_ratio", "agent", [AGENT]),
                    "{{agent}}",
                    exemplar=True,
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            threshold=0.3,
            low_is_bad=False,
            description="D_r = mean of D_t = (V_t + O_t) / max(1, |K_t|) over turns t >= 2.",
        ),
    ]
    panels.append(row("Decay over long conversations (by turn index)"))
    panels += [
        timeseries(
            "Hallucination by turn bucket",
            [
                target(
                    mean("ragmon_turn_hallucination_ratio", "turn_bucket", [AGENT]),
                    "turn {{turn_bucket}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Drift by turn bucket",
            [
                target(
                    mean("ragmon_turn_drift_ratio", "turn_bucket", [AGENT]),
                    "turn {{turn_bucket}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        bargauge(
            "Hallucination by turn bucket (whole time range)",
            mean("ragmon_turn_hallucination_ratio", "turn_bucket", [AGENT], "$__range"),
            "turn {{turn_bucket}}",
            threshold=0.2,
        ),
        bargauge(
            "Drift by turn bucket (whole time range)",
            mean("ragmon_turn_drift_ratio", "turn_bucket", [AGENT], "$__range"),
            "turn {{turn_bucket}}",
            threshold=0.3,
        ),
    ]
    panels.append(row("Memory and outcome scores"))
    panels += [
        timeseries(
            "Memory per turn: mean by agent",
            [target(mean("ragmon_turn_memory_tokens", "agent", [AGENT]), "{{agent}}")],
            unit="short",
            width=8,
        ),
        timeseries(
            "Final memory M_T: mean and p95 by agent",
            [
                target(
                    mean("ragmon_conversation_final_memory_tokens", "agent", [AGENT]),
                    "mean {{agent}}",
                ),
                target(
                    quantile(
                        0.95, "ragmon_conversation_final_memory_tokens", "agent", [AGENT], "$window"
                    ),
                    "p95 {{agent}}",
                ),
            ],
            unit="short",
            width=8,
        ),
        timeseries(
            "Outcome scores (0-10): mean by agent and metric",
            [
                target(
                    mean("ragmon_turn_outcome_score", "agent, metric", [AGENT]),
                    "{{agent}} {{metric}}",
                )
            ],
            minimum=0,
            maximum=10,
            width=8,
            description="Relevance, answer quality, instruction following and coherence of "
            "judged turns. Only the LLM judge's turn check produces them: without a judge "
            "(judge.base_url unset) this panel stays empty by design.",
            no_value="No data: outcome scores come from the LLM judge only",
        ),
    ]
    panels.append(row("Constraints and conversation state"))
    panels += [
        timeseries(
            "Constraint checks by outcome",
            [
                target(
                    rate("ragmon_constraint_checks_total", "outcome", [AGENT]),
                    "{{outcome}}",
                )
            ],
            unit="ops",
            stack=True,
            width=8,
        ),
        timeseries(
            "Violated or omitted share by agent",
            [
                target(
                    share(
                        "ragmon_constraint_checks_total",
                        "agent",
                        ['outcome=~"violated|omitted"', AGENT],
                        ['outcome=~"satisfied|violated|omitted"', AGENT],
                        "$window",
                    ),
                    "{{agent}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=8,
        ),
        timeseries(
            "Conversations held and evicted",
            [
                target("sum by (instance) (ragmon_conversations_active)", "held {{instance}}"),
                target(
                    rate("ragmon_conversations_evicted_total", "reason", []),
                    "evicted/s {{reason}}",
                ),
            ],
            width=8,
        ),
    ]
    return dashboard(
        "ragmon-conversations",
        "rag-monitor / Conversations",
        "Multi-turn hallucination (H_u) and constraint drift (D_r) per agent, their decay over "
        "the turns of a conversation, memory and outcome scores.",
        [datasource_variable(), agent_variable(), window_variable(), review_url_variable()],
        panels,
    )


def golden() -> dict[str, Any]:
    suite = 'suite=~"$suite"'
    mode = 'mode=~"$mode"'
    failed, errored = 'outcome="failed"', 'outcome="error"'
    panels: list[dict[str, Any]] = [row("Last runs")]
    panels += [
        stat(
            "Time since last completed run (oldest suite)",
            f"max(time() - max by (suite) (ragmon_golden_last_success_timestamp_seconds{sel(suite)}))",  # noqa: E501
            unit="s",
            red_above=26 * 3600,
            width=8,
        ),
        stat(
            "Runs failed (targets missed) in range",
            f"sum(increase(ragmon_golden_runs_total{sel(suite, failed)}[$__range])) or vector(0)",
            red_above=1,
            decimals=0,
            width=8,
        ),
        stat(
            "Runs errored in range",
            f"sum(increase(ragmon_golden_runs_total{sel(suite, errored)}[$__range])) or vector(0)",
            red_above=1,
            decimals=0,
            width=8,
        ),
        table(
            "Latest values against targets",
            [
                target(
                    f"max by (suite, mode, metric) (ragmon_golden_metric_ratio{sel(suite, mode)})",
                    instant=True,
                    fmt="table",
                ),
                target(
                    f"max by (suite, mode, metric) (ragmon_golden_metric_ratio{sel(suite, mode)})\n"
                    "- on (suite, metric) group_left ()\n"
                    f"max by (suite, metric) (ragmon_golden_target_ratio{sel(suite)})",
                    instant=True,
                    fmt="table",
                ),
            ],
            description="Value #A: last run's value; Value #B: margin over the suite's target "
            "(negative = below target).",
        ),
    ]
    panels.append(row("Metrics per suite and mode against their targets"))
    for metric, (title, default_target) in GOLDEN_METRICS.items():
        metric_matcher = f'metric="{metric}"'
        queries = [
            target(
                "max by (suite, mode) (ragmon_golden_metric_ratio"
                f"{sel(suite, mode, metric_matcher)})",
                "{{suite}} {{mode}}",
            )
        ]
        if default_target is not None:  # a target line only where a default exists
            queries.append(
                target(
                    f"max by (suite) (ragmon_golden_target_ratio{sel(suite, metric_matcher)})",
                    "{{suite}} target",
                )
            )
        panels.append(
            timeseries(
                title,
                queries,
                unit="percentunit",
                minimum=0,
                maximum=1,
                dashed=".* target$",
                width=8,
            )
        )
    judged = (
        'metric=~"answer_correctness|semantic_similarity|context_recall'
        '|faithfulness|answer_relevancy|context_relevancy"'
    )
    panels.append(
        timeseries(
            "Answers scored by the judge",
            [
                target(
                    "max by (suite, mode, metric) (ragmon_golden_metric_ratio"
                    f"{sel(suite, mode, judged)})",
                    "{{suite}} {{mode}} {{metric}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=8,
            description="Generation suites scored by the judge: against the reference answer, "
            "answer correctness (0.75 statement F1 + 0.25 semantic similarity), semantic "
            "similarity and context recall; without one, faithfulness (target 0.8), "
            "answer relevancy (0.7) and context relevancy (0.6). Empty when no judge is "
            "configured (the measures are unmeasured, never 0).",
        )
    )
    panels.append(row("Latency and duration"))
    panels += [
        timeseries(
            "Latency percentiles per suite and mode",
            [
                target(
                    f"max by (suite, mode, metric) (ragmon_golden_latency_seconds{sel(suite, mode)})",  # noqa: E501
                    "{{suite}} {{mode}} {{metric}}",
                )
            ],
            unit="s",
            threshold=0.3,
            low_is_bad=False,
            width=8,
            description="Default targets: P50 <= 200 ms, P95 <= 300 ms (line).",
        ),
        timeseries(
            "Run duration",
            [
                target(
                    f"max by (suite) (ragmon_golden_run_duration_seconds{sel(suite)})",
                    "{{suite}}",
                )
            ],
            unit="s",
            width=8,
        ),
        timeseries(
            "Runs by outcome",
            [
                target(
                    "sum by (suite, outcome) (increase(ragmon_golden_runs_total"
                    f"{sel(suite)}[$__rate_interval]))",
                    "{{suite}} {{outcome}}",
                )
            ],
            stack=True,
            width=8,
        ),
    ]
    return dashboard(
        "ragmon-golden",
        "rag-monitor / Golden sets",
        "Scheduled golden-set evaluations: ranking and answer metrics per suite and retrieval "
        "mode against their targets, latency percentiles and the last completed run.",
        [
            datasource_variable(),
            query_variable("suite", "Suite", "label_values(ragmon_golden_metric_ratio, suite)"),
            query_variable("mode", "Mode", "label_values(ragmon_golden_metric_ratio, mode)"),
            review_url_variable(),
        ],
        panels,
    )


def operations() -> dict[str, Any]:
    ri = "$__rate_interval"
    panels: list[dict[str, Any]] = [row("Ingest")]
    panels += [
        timeseries(
            "Messages consumed by topic",
            [target(rate("ragmon_messages_consumed_total", "topic", []), "{{topic}}")],
            unit="ops",
            width=8,
        ),
        timeseries(
            "Traces decoded, processed and skipped",
            [
                target(rate("ragmon_traces_decoded_total", "format", []), "decoded {{format}}"),
                target(
                    rate("ragmon_traces_processed_total", "agent, outcome", [AGENT]),
                    "processed {{agent}} {{outcome}}",
                ),
                target(rate("ragmon_traces_skipped_total", "reason", []), "skipped {{reason}}"),
            ],
            unit="ops",
            width=8,
        ),
        timeseries(
            "Dead letters by reason",
            [target(rate("ragmon_dead_letters_total", "reason", []), "{{reason}}")],
            unit="ops",
            stack=True,
            width=8,
        ),
        timeseries(
            "Processing time per trace",
            [
                target(
                    quantile(0.5, "ragmon_processing_duration_seconds", "", [], ri),
                    "p50",
                    exemplar=True,
                ),
                target(
                    quantile(0.99, "ragmon_processing_duration_seconds", "", [], ri),
                    "p99",
                    exemplar=True,
                ),
            ],
            unit="s",
            width=8,
        ),
        timeseries(
            "In-flight traces",
            [target("sum by (instance) (ragmon_in_flight_traces)", "{{instance}}")],
            width=8,
        ),
        timeseries(
            "Replicas ready",
            [
                target("sum(ragmon_ready)", "ready"),
                target("count(ragmon_build_info)", "running"),
                target("sum by (stage) (ragmon_stuck_partitions)", "stuck partitions ({{stage}})"),
            ],
            width=8,
            description="Stuck partitions: the oldest unfinished message has not finished for "
            "kafka.stuck_seconds (/readyz names them; alert RagmonStageStuck).",
        ),
    ]
    panels.append(row("Kafka"))
    panels += [
        timeseries(
            "Consumer lag by topic",
            [
                target(
                    "sum by (topic) (max by (topic, partition) (ragmon_kafka_consumer_lag_messages))",  # noqa: E501
                    "{{topic}}",
                )
            ],
            unit="short",
            width=8,
            description="Partition end minus committable position; a partition counted once "
            "even while two replicas report it during a rebalance.",
        ),
        timeseries(
            "Commits by outcome and time since last commit",
            [
                target(rate("ragmon_kafka_commits_total", "outcome", []), "commits {{outcome}}"),
                target(
                    "time() - max(ragmon_kafka_last_commit_timestamp_seconds)",
                    "seconds since last commit",
                ),
            ],
            width=8,
        ),
        timeseries(
            "Assigned partitions and rebalances",
            [
                target(
                    "sum by (instance) (ragmon_kafka_assigned_partitions)",
                    "partitions {{instance}}",
                ),
                target(
                    "sum(increase(ragmon_kafka_rebalances_total[$__rate_interval]))",
                    "rebalances",
                ),
            ],
            width=8,
        ),
    ]
    panels += otlp_stage_panels()
    panels.append(row("LLM judge"))
    panels += [
        timeseries(
            "Judge requests by outcome",
            [
                target(
                    rate("ragmon_judge_requests_total", "evaluator, outcome", []),
                    "{{evaluator}} {{outcome}}",
                )
            ],
            unit="reqps",
            stack=True,
            width=8,
        ),
        timeseries(
            "Judge error share",
            [
                target(
                    share(
                        "ragmon_judge_requests_total",
                        "evaluator",
                        ['outcome!="ok"'],
                        [],
                        ri,
                    ),
                    "{{evaluator}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            threshold=0.2,
            low_is_bad=False,
            width=8,
        ),
        timeseries(
            "Judge latency",
            [
                target(
                    quantile(0.5, "ragmon_judge_request_duration_seconds", "evaluator", [], ri),
                    "p50 {{evaluator}}",
                ),
                target(
                    quantile(0.95, "ragmon_judge_request_duration_seconds", "evaluator", [], ri),
                    "p95 {{evaluator}}",
                ),
                target(
                    quantile(0.99, "ragmon_judge_request_duration_seconds", "evaluator", [], ri),
                    "p99 {{evaluator}}",
                ),
            ],
            unit="s",
            width=8,
        ),
        timeseries(
            "Circuit open and judge queue",
            [
                target(
                    "max by (evaluator) (ragmon_judge_circuit_open)",
                    "circuit open {{evaluator}}",
                ),
                target("sum by (instance) (ragmon_judge_queue_depth)", "queue {{instance}}"),
            ],
            width=8,
        ),
        timeseries(
            "Tokens / s",
            [
                target(
                    rate("ragmon_judge_input_tokens_total", "evaluator", []),
                    "input {{evaluator}}",
                ),
                target(
                    rate("ragmon_judge_output_tokens_total", "evaluator", []),
                    "output {{evaluator}}",
                ),
            ],
            width=8,
        ),
        timeseries(
            "Cost per hour",
            [
                target(
                    "sum by (evaluator) (rate(ragmon_judge_cost_dollars_total[$__rate_interval]))"
                    " * 3600",
                    "{{evaluator}}",
                )
            ],
            unit="currencyUSD",
            width=8,
        ),
        timeseries(
            "Judge pace: concurrency and slowdown",
            [
                target(
                    "max by (instance, evaluator)"
                    ' (ragmon_judge_concurrency_limit{endpoint="chat"})',
                    "limit {{evaluator}} {{instance}}",
                ),
                target(
                    "max by (instance, evaluator) (ragmon_judge_slowdown_ratio)",
                    "slowdown {{evaluator}} {{instance}}",
                ),
            ],
            description="Requests the judge lets run at once on its chat endpoint (adaptive, "
            "from 1 up to judge.max_concurrency) and how much longer replies at that limit take "
            "than a request alone (1: no queueing). A limit that stays at 1 or 2 is a server "
            "that computes requests one at a time or splits its cores between them; one at "
            "judge.max_concurrency serves or batches them in parallel.",
            width=8,
        ),
        timeseries(
            "Judge server speed (per request)",
            [
                target(
                    "max by (instance, evaluator, phase) (ragmon_judge_tokens_per_second)",
                    "{{phase}} {{evaluator}} {{instance}}",
                )
            ],
            description="Prompt tokens read and tokens generated per second for one request by "
            "the judge's chat endpoint, at the concurrency the judge runs it at, fitted from the "
            "usage its replies report; request deadlines are sized from it.",
            width=8,
        ),
        timeseries(
            "Judge cache hit rate",
            [
                target(
                    share("ragmon_judge_cache_lookups_total", "", ['outcome="hit"'], [], ri),
                    "hit rate",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=8,
        ),
    ]
    panels.append(row("Sampler"))
    panels += [
        timeseries(
            "Sampler decisions",
            [
                target(
                    rate("ragmon_sampler_decisions_total", "outcome", [AGENT]),
                    "{{outcome}}",
                )
            ],
            unit="ops",
            stack=True,
            width=8,
        ),
        timeseries(
            "Shed by reason",
            [target(rate("ragmon_sampler_shed_total", "reason", [AGENT]), "{{reason}}")],
            unit="ops",
            stack=True,
            width=8,
        ),
        timeseries(
            "Effective sampling rate (lowest replica)",
            [
                target(
                    f"min by (agent) (ragmon_sampler_effective_rate_ratio{sel(AGENT)})",
                    "{{agent}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=8,
        ),
    ]
    panels.append(row("Outputs"))
    panels += [
        timeseries(
            "Results published",
            [target(rate("ragmon_results_published_total", "outcome", []), "{{outcome}}")],
            unit="ops",
            width=8,
        ),
        timeseries(
            "Store writes",
            [target(rate("ragmon_store_writes_total", "outcome", []), "{{outcome}}")],
            unit="ops",
            width=8,
        ),
        table(
            "Running versions",
            [
                target(
                    "count by (version, python) (ragmon_build_info)",
                    instant=True,
                    fmt="table",
                )
            ],
            width=8,
        ),
    ]
    return dashboard(
        "ragmon-operations",
        "rag-monitor / Operations",
        "The daemon itself: ingest, Kafka lag and commits, dead letters, the OTLP stage's "
        "assembler, the LLM judge (latency, errors, circuit, tokens, cost, cache), sampler "
        "shedding and outputs.",
        [datasource_variable(), agent_variable(), review_url_variable()],
        panels,
    )


def otlp_stage_panels() -> list[dict[str, Any]]:
    """The OTLP stage's assembler: what it holds against its bounds, what it sheds at them,
    how whole the traces it releases are, and spans that come too late."""
    ri = "$__rate_interval"
    first_releases = ['outcome=~"complete|incomplete"']
    return [
        row("OTLP stage"),
        timeseries(
            "Assembler: traces held",
            [
                target(
                    "sum by (instance, state) (ragmon_otlp_assembly_traces)",
                    "{{instance}} {{state}}",
                )
            ],
            width=8,
            description="Per replica: traces assembling (pending, waiting for their root, "
            "missing parents or their GenAI log records) and released traces kept for late "
            "spans (kept). Per replica, pending traces are bounded by "
            "kafka.otlp_max_pending_traces (10,000 by default) and kept ones by "
            "kafka.otlp_max_kept_traces (50,000); at a bound the assembler sheds (next panels).",
        ),
        timeseries(
            "Assembler: bytes held",
            [target("sum by (instance) (ragmon_otlp_assembly_bytes)", "{{instance}}")],
            unit="bytes",
            width=8,
            description="Per replica: span and log-record bytes of the traces held, with an "
            "estimate of their bookkeeping, bounded by kafka.otlp_max_pending_bytes (256 MiB by "
            "default).",
        ),
        timeseries(
            "Traces shed by the assembler bounds",
            [
                target(
                    rate("ragmon_otlp_assembly_shed_total", "reason", []),
                    "{{reason}}",
                )
            ],
            unit="ops",
            stack=True,
            width=8,
            description="Traces given up at the memory bound: grace_limit (a released trace "
            "forgotten before its grace period ended: its late spans are dropped), "
            "pending_limit (released before it was whole: scored flagged incomplete_trace). "
            "Sustained shedding fires RagmonOtlpAssemblyShedding.",
        ),
        timeseries(
            "Traces released by outcome",
            [
                target(
                    rate("ragmon_otlp_traces_released_total", "outcome", []),
                    "{{outcome}}",
                )
            ],
            unit="ops",
            stack=True,
            width=8,
            description="complete: whole (root ended, every parent present); incomplete: "
            "released at kafka.otlp_assembly_max_seconds or at the memory bound; revised: "
            "released again after late spans.",
        ),
        timeseries(
            "Incomplete traces (share of released)",
            [
                target(
                    share(
                        "ragmon_otlp_traces_released_total",
                        "",
                        ['outcome="incomplete"'],
                        first_releases,
                        ri,
                    ),
                    "incomplete",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            width=8,
            description="Traces released before they were whole / all traces released the "
            "first time. Their results carry the incomplete_trace flag. A steady share means "
            "root spans that never arrive (instrumentation, sampling) or waits longer than "
            "kafka.otlp_assembly_max_seconds.",
        ),
        timeseries(
            "Late spans and orphan log records",
            [
                target(
                    rate(
                        "ragmon_traces_skipped_total",
                        "reason",
                        ['reason=~"otlp_late_spans|otlp_no_spans"'],
                    ),
                    "{{reason}}",
                )
            ],
            unit="ops",
            width=8,
            description="otlp_late_spans: spans or GenAI log records that came after their "
            "trace's grace period (kafka.otlp_late_span_grace_seconds), or fragments of a trace "
            "already scored whole, dropped; otlp_no_spans: exports without spans, and log "
            "records whose spans never came.",
        ),
    ]


DASHBOARDS = {
    "quality-overview.json": quality_overview,
    "conversations.json": conversations,
    "golden-sets.json": golden,
    "operations.json": operations,
}


# --- output ---------------------------------------------------------------------------------------


def expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every Prometheus panel query and query variable of a dashboard.

    SQL targets (`rawSql`) and query variables on the store's PostgreSQL data source are not
    PromQL: `sql_queries` lists those.
    """
    found = []
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            if "rawSql" not in t:
                found.append((f"panel {panel['title']!r} {t['refId']}", t["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query" and variable["datasource"] == DS:
            query = variable["query"]["query"]
            inner = query.removeprefix("label_values(").removesuffix(")").split(",")[0]
            found.append((f"variable {variable['name']}", inner.strip()))
    return found


def sql_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, SQL) for every panel query and query variable on the store's data source."""
    found = []
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            if "rawSql" in t:
                found.append((f"panel {panel['title']!r} {t['refId']}", t["rawSql"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query" and variable["datasource"] == STORE_DS:
            found.append((f"variable {variable['name']}", variable["query"]))
    return found


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard; raises when a query breaks the contract."""
    metrics = contract_metrics()
    out = {}
    for name, build in DASHBOARDS.items():
        board = build()
        problems = [
            f"{name}: {where}: {problem}"
            for where, expr in expressions(board)
            for problem in contract_problems(expr, metrics)
        ]
        if problems:
            listing = "\n".join(problems)
            raise SystemExit(f"queries outside the metrics contract:\n{listing}")
        out[name] = json.dumps(board, indent=2, ensure_ascii=False) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    rendered = render()
    stale = []
    for directory in OUTPUT_DIRS:
        for name, text in rendered.items():
            path = directory / name
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == text:
                continue
            stale.append(path)
            if not args.check:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    for path in stale:
        verb = "differs" if args.check else "wrote"
        print(f"{verb}: {path.relative_to(ROOT)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
