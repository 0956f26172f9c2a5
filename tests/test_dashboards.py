"""The Grafana dashboards: generated, committed, and held to the metrics contract."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate
from dashboards.contract import (
    contract_metrics,
    contract_problems,
    scan,
    substitute_grafana_variables,
)
from monitor.sinks.store import Store
from tests.test_review import WORST_CLAIMS, grafana_panel_sql, seed

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD_DIR = ROOT / "dashboards"
CHART_DASHBOARD_DIR = ROOT / "helm" / "rag-monitor" / "dashboards"


def committed() -> dict[str, dict[str, Any]]:
    boards = {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}
    assert boards, "no dashboards committed"
    return boards


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    return generate.expressions(board)


def test_regeneration_changes_nothing() -> None:
    rendered = generate.render()
    assert sorted(rendered) == sorted(p.name for p in DASHBOARD_DIR.glob("*.json"))
    for directory in (DASHBOARD_DIR, CHART_DASHBOARD_DIR):
        for name, text in rendered.items():
            path = directory / name
            assert path.read_text(encoding="utf-8") == text, (
                f"{path.relative_to(ROOT)} is stale: run python dashboards/generate.py"
            )
    assert sorted(p.name for p in CHART_DASHBOARD_DIR.glob("*.json")) == sorted(rendered)


def test_the_four_dashboards_exist() -> None:
    titles = {board["title"] for board in committed().values()}
    assert titles == {
        "rag-monitor / Quality overview",
        "rag-monitor / Conversations",
        "rag-monitor / Golden sets",
        "rag-monitor / Operations",
    }
    uids = [board["uid"] for board in committed().values()]
    assert len(set(uids)) == len(uids)


def test_every_query_uses_only_exported_metrics_and_their_labels() -> None:
    metrics = contract_metrics()
    problems = []
    for name, board in committed().items():
        for where, expr in queries(board):
            problems += [f"{name} {where}: {p}" for p in contract_problems(expr, metrics)]
    assert not problems, "\n".join(problems)


def test_contract_check_is_not_vacuous() -> None:
    metrics = contract_metrics()
    assert "ragmon_evaluation_score_ratio_bucket" in metrics
    assert "le" in metrics["ragmon_evaluation_score_ratio_bucket"].labels
    assert "le" not in metrics["ragmon_evaluation_score_ratio_count"].labels
    assert contract_problems('rate(ragmon_nope_total{agent="a"}[5m])', metrics)
    assert contract_problems('rate(ragmon_dead_letters_total{agent="a"}[5m])', metrics)
    assert contract_problems("sum by (agent) (rate(ragmon_dead_letters_total[5m]))", metrics)
    assert not contract_problems(
        'sum by (reason) (rate(ragmon_dead_letters_total{reason!=""}[$__rate_interval]))',
        metrics,
    )
    found = scan('histogram_quantile(0.5, sum by (le) (rate(x_bucket{a=~"$agent"}[$window])))')
    assert found.metrics == ["x_bucket"]
    assert found.grouping == ["le"]
    assert found.matchers == [("x_bucket", "a")]


def test_every_panel_has_a_query_on_the_datasource_variable() -> None:
    """PromQL (`expr`) on `$datasource`, or SQL (`rawSql`) on the store's `$store`."""
    for name, board in committed().items():
        for panel in panels(board):
            targets = panel.get("targets") or []
            assert targets, f"{name}: panel {panel['title']!r} has no query"
            for target in targets:
                if "rawSql" in target:
                    assert "expr" not in target, "tests/test_prometheus_e2e.py skips SQL targets"
                    assert target["rawSql"].strip(), f"{name}: {panel['title']!r} has no SQL"
                    assert target["format"] == "table" and target["rawQuery"]
                    assert target["datasource"] == generate.STORE_DS
                    assert panel["datasource"] == generate.STORE_DS
                    continue
                assert target["expr"].strip(), f"{name}: {panel['title']!r} has an empty query"
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert panel["datasource"]["uid"] == "${datasource}"


def test_template_variables() -> None:
    for name, board in committed().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        assert variables["review_url"]["type"] == "textbox"
        assert variables["review_url"]["query"] == generate.REVIEW_URL_PLACEHOLDER
        uses_agent = any(
            "agent" in scan(expr).grouping + [m[1] for m in scan(expr).matchers]
            for _, expr in queries(board)
        )
        if uses_agent:
            agent = variables["agent"]
            assert agent["type"] == "query"
            assert agent["multi"] and agent["includeAll"] and agent["allValue"] == ".*"
            assert "label_values(ragmon_" in agent["query"]["query"]
            assert any('agent=~"$agent"' in expr for _, expr in queries(board)), name
        for variable in variables.values():
            if variable["type"] == "query":
                assert variable["datasource"] in (generate.DS, generate.STORE_DS), variable
        if generate.sql_queries(board):  # a panel on the store has its data source variable
            assert variables["store"]["type"] == "datasource"
            assert variables["store"]["query"] == "grafana-postgresql-datasource"
    # Golden-set metrics carry no agent label; that dashboard filters by suite and mode instead.
    golden = {v["name"] for v in committed()["golden-sets.json"]["templating"]["list"]}
    assert {"suite", "mode"} <= golden


def test_dashboards_link_to_the_review_page() -> None:
    for name, board in committed().items():
        urls = [link.get("url", "") for link in board["links"]]
        assert any(url.startswith("${review_url}/review") for url in urls), name
    quality = committed()["quality-overview.json"]
    linked = [
        panel
        for panel in panels(quality)
        if any(
            "/review?" in link["url"] for link in panel["fieldConfig"]["defaults"].get("links", [])
        )
    ]
    assert linked, "score panels link to /review for the agent under the cursor"
    for panel in linked:
        assert "${__field.labels.agent}" in panel["fieldConfig"]["defaults"]["links"][0]["url"]


def test_means_come_from_histogram_sum_over_count_summed_before_dividing() -> None:
    for name, board in committed().items():
        for where, expr in queries(board):
            if "_sum" not in expr:
                continue
            # Every x_sum is paired with x_count of the same histogram, both under sum(...).
            for base in set(re.findall(r"(ragmon_\w+)_sum\b", expr)):
                assert f"{base}_count" in expr, f"{name} {where}: {base}_sum without _count"
            assert re.search(r"\bsum( by \([^)]*\))? \(rate\(ragmon_\w+_sum", expr), (
                f"{name} {where}: the sum must be aggregated with sum by (...) before dividing"
            )
            assert re.search(r"\bsum( by \([^)]*\))? \(rate\(ragmon_\w+_count", expr), where
            assert "avg" not in expr, f"{name} {where}: never average averages"
        # The per-replica rolling gauge is for a one-replica glance, not for dashboards.
        assert "ragmon_evaluation_score_mean_ratio" not in json.dumps(board)


def test_score_panels_have_exemplars_and_quantiles() -> None:
    quality = committed()["quality-overview.json"]
    score_targets = [
        target
        for panel in panels(quality)
        if panel["type"] == "timeseries"
        for target in panel["targets"]
        if re.search(r"ragmon_evaluation_score_ratio_(sum|bucket)", target["expr"])
    ]
    assert score_targets
    assert all(target["exemplar"] for target in score_targets)
    assert any("histogram_quantile" in t["expr"] for t in score_targets)
    bucket_queries = [t for t in score_targets if "_bucket" in t["expr"]]
    assert bucket_queries and all("le" in scan(t["expr"]).grouping for t in bucket_queries)


@pytest.mark.parametrize(
    ("dashboard", "required"),
    [
        (
            "quality-overview.json",
            {
                'metric="faithfulness"',
                'metric="answer_relevancy"',
                'metric="context_precision"',
                "ragmon_evaluation_unmeasured_total",
                "ragmon_evaluations_total",
                'evaluator="heuristic"',
                "histogram_quantile",
            },
        ),
        (
            "conversations.json",
            {
                "ragmon_turn_hallucination_ratio_sum",
                "ragmon_turn_drift_ratio_sum",
                "sum by (turn_bucket)",
                "ragmon_turn_memory_tokens_sum",
                "ragmon_conversation_final_memory_tokens_sum",
                "ragmon_turn_outcome_score_sum",
            },
        ),
        (
            "golden-sets.json",
            {
                "ragmon_golden_metric_ratio",
                "ragmon_golden_target_ratio",
                "ragmon_golden_latency_seconds",
                "ragmon_golden_last_success_timestamp_seconds",
                "ragmon_golden_runs_total",
            },
        ),
        (
            "operations.json",
            {
                "ragmon_messages_consumed_total",
                "ragmon_kafka_consumer_lag_messages",
                "ragmon_dead_letters_total",
                "ragmon_judge_request_duration_seconds_bucket",
                'outcome!="ok"',
                "ragmon_judge_circuit_open",
                "ragmon_judge_input_tokens_total",
                "ragmon_judge_cost_dollars_total",
                "ragmon_judge_cache_lookups_total",
                "ragmon_sampler_shed_total",
            },
        ),
    ],
)
def test_panels_the_issue_asks_for(dashboard: str, required: set[str]) -> None:
    text = "\n".join(expr for _, expr in queries(committed()[dashboard]))
    missing = {needle for needle in required if needle not in text}
    assert not missing, f"{dashboard} lacks queries for {sorted(missing)}"


def test_layout_fits_the_grid_without_overlaps() -> None:
    for name, board in committed().items():
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids), name
        cells: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, (name, panel["title"])
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, f"{name}: {panel['title']!r} overlaps"
                    cells.add((x, y))


def test_every_query_is_valid_promql(tmp_path: Path, promtool: str) -> None:
    """promtool parses each query (Grafana variables replaced) as a recording rule."""
    rules: list[dict[str, str]] = []
    for board in committed().values():
        for _where, expr in queries(board):
            record = f"check:{len(rules)}"
            rules.append({"record": record, "expr": substitute_grafana_variables(expr)})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------- the table panel over the store


def _store_panel() -> dict[str, Any]:
    quality = committed()["quality-overview.json"]
    (panel,) = [p for p in panels(quality) if p["datasource"] == generate.STORE_DS]
    return panel


def _sqlstring(value: str | list[str]) -> str:
    """Grafana's `:sqlstring` format: each value single-quoted, quotes doubled, comma-joined."""
    values = [value] if isinstance(value, str) else value
    return ",".join("'" + v.replace("'", "''") + "'" for v in values)


def expand_grafana_sql(
    sql: str, start: datetime, end: datetime, variables: dict[str, str | list[str]]
) -> str:
    """The SQL as Grafana's PostgreSQL data source sends it: `$__timeFilter(col)` becomes
    `col BETWEEN 'start' AND 'end'` (as tests/test_review.py expands it) and every
    `${name:sqlstring}` the quoted values."""
    expanded = re.sub(
        r"\$__timeFilter\(([^)]*)\)",
        lambda m: f"{m.group(1)} BETWEEN '{start.isoformat()}' AND '{end.isoformat()}'",
        sql,
    )
    expanded = re.sub(
        r"\$\{(\w+):sqlstring\}", lambda m: _sqlstring(variables[m.group(1)]), expanded
    )
    assert "$" not in expanded, f"an unexpanded Grafana macro or variable in {expanded}"
    return expanded


def test_store_panel_is_the_documented_table_with_its_variables() -> None:
    quality = committed()["quality-overview.json"]
    variables = {v["name"]: v for v in quality["templating"]["list"]}
    panel = _store_panel()
    assert panel["type"] == "table"
    assert panel["title"] == "Worst answers (from the store)"
    (target,) = panel["targets"]
    # docs/review.md's query, its agent filter on the store-side variable: the Prometheus
    # `$agent`'s All value is the raw regex `.*`, which `:sqlstring` does not quote.
    documented = grafana_panel_sql().replace("${agent:sqlstring}", "${store_agent:sqlstring}")
    assert target["rawSql"].strip() == documented.strip()
    assert "${agent" not in target["rawSql"]

    store_agent = variables["store_agent"]
    assert store_agent["datasource"] == generate.STORE_DS
    assert store_agent["multi"] and store_agent["includeAll"]
    assert "allValue" not in store_agent, "All must expand to the quoted list of agents"
    assert "$__timeFilter(timestamp)" in store_agent["query"]
    metric = variables["metric"]
    assert metric["type"] == "custom" and not metric["multi"] and not metric["includeAll"]
    assert metric["query"].split(",") == [
        "faithfulness",
        "support",
        "answer_relevancy",
        "context_precision",
        "context_relevancy",
    ]
    # The Prometheus variables are unchanged by the store's.
    assert variables["agent"]["allValue"] == ".*"
    assert variables["agent"]["datasource"] == generate.DS

    overrides = {o["matcher"]["options"]: o for o in panel["fieldConfig"]["overrides"]}
    (link,) = overrides["trace_id"]["properties"][0]["value"]
    assert link["url"].startswith("${review_url}/review?")
    assert link["url"].endswith("#trace-${__data.fields.trace_id}")
    assert "metric=${metric}" in link["url"]
    scores = next(o for o in overrides.values() if "faithfulness" in o["matcher"]["options"])
    assert {"id": "noValue", "value": "unmeasured"} in scores["properties"]


async def test_store_panel_sql_runs_on_postgresql_worst_first(postgres_url: str) -> None:
    """The panel's SQL and its agent variable's, expanded as Grafana sends them, on a real
    PostgreSQL store: worst first, unmeasured and old results left out, filters applied."""
    from sqlalchemy import text

    panel_sql = _store_panel()["targets"][0]["rawSql"]
    quality = committed()["quality-overview.json"]
    agents_sql = next(
        v["query"] for v in quality["templating"]["list"] if v["name"] == "store_agent"
    )
    store = await Store.open(postgres_url)
    try:
        await seed(store)
        end = datetime.now(UTC)
        start = end - timedelta(hours=1)

        async def run(sql: str, **variables: str | list[str]) -> list[dict[str, Any]]:
            async with store._engine.connect() as conn:
                result = await conn.execute(text(expand_grafana_sql(sql, start, end, variables)))
                return [dict(r._mapping) for r in result.all()]

        # "All" of $store_agent: every agent its own query lists for the time range.
        agents = [r["agent"] for r in await run(agents_sql)]
        assert agents == ["billing-bot", "faq-bot", "support-bot"]

        rows = await run(panel_sql, metric="faithfulness", store_agent=agents)
        assert [r["trace_id"] for r in rows] == ["t-worst", "t-xss", "t-secret", "t-good"]
        scores = [r["score"] for r in rows]
        assert scores == sorted(scores) and scores[0] == pytest.approx(0.1)
        worst = rows[0]
        assert worst["agent"] == "support-bot" and worst["evaluator"] == "heuristic"
        assert worst["unsupported_claims"] == " | ".join(WORST_CLAIMS)
        assert worst["violated_constraints"] == "lang-ja (violated), max-3-sentences (omitted)"
        assert rows[1]["answer_relevancy"] is None, "unmeasured stays NULL, not 0"

        one = await run(panel_sql, metric="faithfulness", store_agent=["billing-bot"])
        assert [r["trace_id"] for r in one] == ["t-xss"]
        judged = await run(panel_sql, metric="context_relevancy", store_agent=agents)
        assert [r["trace_id"] for r in judged] == ["t-secret", "t-good"]
        # A value edited into the URL stays a string literal.
        hostile = "support-bot') OR ('1'='1"
        assert await run(panel_sql, metric="faithfulness", store_agent=[hostile]) == []
    finally:
        await store.close()


def test_tier0_support_is_the_headline_against_its_own_baseline() -> None:
    """Without a judge the quality dashboard leads with tier 0's support (it ranks answers
    better than tier 0's faithfulness ratio), per agent against its 7-day mean, which is what
    RagmonTier0SupportDrop pages on; its links open /review ranked by support."""
    board = committed()["quality-overview.json"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows[1].startswith("Tier-0 support"), rows
    tier0 = [
        p
        for p in panels(board)
        if any('metric="support", evaluator="heuristic"' in t.get("expr", "") for t in p["targets"])
    ]
    exprs = "\n".join(t["expr"] for p in tier0 for t in p["targets"])
    assert "[1h]" in exprs and "[7d]" in exprs
    links = [link["url"] for p in tier0 for link in p["fieldConfig"]["defaults"].get("links", [])]
    assert links and all("metric=support" in url for url in links)


def test_panels_of_judge_only_measures_say_why_they_are_empty() -> None:
    """Tier 0 emits no context relevancy and no outcome scores: without a judge those panels
    are empty by design and say so, instead of a bare "No data"."""
    expected = {
        ("quality-overview.json", "Context relevancy: mean by agent"),
        ("conversations.json", "Outcome scores (0-10): mean by agent and metric"),
    }
    boards = committed()
    for name, title in expected:
        (panel,) = [p for p in panels(boards[name]) if p["title"] == title]
        note = panel["fieldConfig"]["defaults"].get("noValue", "")
        assert "judge" in note, (name, title, note)
        assert "judge" in panel["description"], (name, title)
    # and a panel of a measure tier 0 does produce keeps Grafana's default
    (faith,) = [
        p
        for p in panels(boards["quality-overview.json"])
        if p["title"] == "Faithfulness: mean by agent"
    ]
    assert "noValue" not in faith["fieldConfig"]["defaults"]


@pytest.mark.slow
def test_the_estimate_panels_compute_what_the_recording_rules_record(
    tmp_path: Path, promtool: str
) -> None:
    """The dashboards compute the population estimates over their own window; over one hour
    they equal the recorded `agent:ragmon_estimate_*:*1h` (promtool, on the running sums of
    rules/tests/estimates.yaml)."""
    spec = yaml.safe_load((ROOT / "rules" / "tests" / "estimates.yaml").read_text())
    series = spec["tests"][0]["input_series"]
    matchers = ['metric="faithfulness"', 'quantity="mean"']
    value, lower, upper = generate.ppi_estimate(matchers, window="1h")
    uniform = generate.uniform_estimate(matchers, window="1h")
    labels = '{agent="mixed", metric="faithfulness", evaluator="llm", quantity="mean"}'
    cases = [
        (value, "agent:ragmon_estimate_ppi:mean1h"),
        (lower, "agent:ragmon_estimate_ppi:lower1h"),
        (upper, "agent:ragmon_estimate_ppi:upper1h"),
        (uniform, "agent:ragmon_estimate_uniform:mean1h"),
    ]
    test = {
        "rule_files": [str(ROOT / "rules" / "recording.yaml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": f"round(({panel}) - {recorded}, 0.000001)",
                        "eval_time": "2h",
                        "exp_samples": [{"labels": labels, "value": 0}],
                    }
                    for panel, recorded in cases
                ],
            }
        ],
    }
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump(test, width=10**6))
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


_RULE_CASE = re.compile(r"(?:round\()?agent:ragmon_estimate_(ppi|uniform):(mean|lower|upper)(\dh)")
# Target refs of the population-estimate panels (dashboards/generate.py).
_ESTIMATE_REFS = {
    ("ppi", "mean"): "A",
    ("ppi", "lower"): "B",
    ("ppi", "upper"): "C",
    ("uniform", "mean"): "D",
}


def _estimate_panel(board: dict[str, Any], metric: str, quantity: str) -> dict[str, str]:
    """The committed population-estimate panel of `metric` and `quantity`: ref -> expression."""
    for panel in panels(board):
        if not panel["title"].endswith("estimate over all traffic"):
            continue
        exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
        if f'metric="{metric}"' in exprs["A"] and f'quantity="{quantity}"' in exprs["A"]:
            return exprs
    raise AssertionError(f"no estimate panel for {metric} {quantity}")


@pytest.mark.slow
def test_the_estimate_panels_show_what_the_recording_rules_record(
    tmp_path: Path, promtool: str
) -> None:
    """The Quality dashboard computes the population estimate and its band over its own window,
    repeating the recording rules' arithmetic: promtool evaluates the committed panels' queries
    (window 1h or 6h, every agent) on the input series of rules/tests/estimates.yaml and must
    get what those rules record there, interval and no interval alike."""
    spec = yaml.safe_load((ROOT / "rules" / "tests" / "estimates.yaml").read_text())
    board = committed()["quality-overview.json"]
    tests = []
    compared = 0
    for test in spec["tests"]:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', test["input_series"][0]["series"]))
        exprs = _estimate_panel(board, labels["metric"], labels["quantity"])
        cases = []
        for case in test["promql_expr_test"]:
            match = _RULE_CASE.fullmatch(case["expr"].removesuffix(", 0.0001)"))
            if match is None:
                continue
            method, what, window = match.groups()
            ref = _ESTIMATE_REFS.get((method, what))
            if ref is None:  # the uniform band is not drawn
                continue
            query = exprs[ref]
            query = query.replace("$window", window).replace("$agent", ".*")
            assert "$" not in query, query
            if case["expr"].startswith("round("):
                query = f"round({query}, 0.0001)"
            cases.append({**case, "expr": query})
        compared += len(cases)
        tests.append({**test, "promql_expr_test": cases})
    assert compared >= 9
    suite = {
        **spec,
        "rule_files": [str(ROOT / "rules" / "recording.yaml")],
        "group_eval_order": [
            g for g in spec["group_eval_order"] if g.startswith("ragmon-recording")
        ],
        "tests": tests,
    }
    path = tmp_path / "dashboard_estimates.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
