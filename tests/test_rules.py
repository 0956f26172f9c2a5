"""Prometheus recording and alerting rules: promtool checks, unit tests, chart equivalence."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from dashboards.contract import contract_metrics, contract_problems, scan

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
RECORDING = RULES / "recording.yaml"
ALERTS = RULES / "alerts.yaml"
UNIT_TESTS = sorted((RULES / "tests").glob("*.yaml"))
RUNBOOKS = ROOT / "runbooks"
# The one alert meant to fire when there is no data at all.
FIRES_ON_NO_DATA = {"RagmonDaemonAbsent"}


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rules_render", RULES / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def groups(path: Path) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(path.read_text())["groups"]
    return loaded


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in groups(ALERTS) for rule in group["rules"]]


def recording_rules() -> list[dict[str, Any]]:
    return [rule for group in groups(RECORDING) for rule in group["rules"]]


def test_promtool_check_rules(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "check", "rules", str(RECORDING), str(ALERTS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("unit_test", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(unit_test: Path, promtool: str) -> None:
    result = subprocess.run(
        [promtool, "test", "rules", str(unit_test)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_rules_equal_the_charts_rendering_with_default_values() -> None:
    rendered = _render_module().render()
    for name, text in rendered.items():
        assert (RULES / name).read_text(encoding="utf-8") == text, (
            f"rules/{name} differs from the chart's PrometheusRule: run python rules/render.py"
        )
    chart_groups = _render_module().chart_rule_groups()
    assert chart_groups == groups(RECORDING) + groups(ALERTS)


def test_every_alert_has_severity_summary_description_and_a_runbook_in_the_repo() -> None:
    names = [rule["alert"] for rule in alert_rules()]
    assert len(set(names)) == len(names)
    for rule in alert_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"].endswith(f"/{name}.md"), name
        runbook = RUNBOOKS / f"{name}.md"
        assert runbook.is_file(), f"no runbook {runbook.relative_to(ROOT)}"
        text = runbook.read_text(encoding="utf-8")
        assert text.startswith(f"# {name}"), runbook
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in text, f"{runbook.name} lacks {section}"
    orphans = {p.stem for p in RUNBOOKS.glob("*.md")} - set(names) - {"README"}
    assert not orphans, f"runbooks without an alert: {sorted(orphans)}"


def test_the_alerts_the_issue_asks_for() -> None:
    assert {rule["alert"] for rule in alert_rules()} == {
        "RagmonFaithfulnessLow",
        "RagmonAnswerRelevancyLow",
        "RagmonContextRelevancyLow",
        "RagmonUnfaithfulShareHigh",
        "RagmonTier0SupportDrop",
        "RagmonHallucinationRateHigh",
        "RagmonHallucinationRateRising",
        "RagmonConstraintDriftHigh",
        "RagmonConstraintDriftRising",
        "RagmonGoldenBelowTarget",
        "RagmonGoldenLatencyHigh",
        "RagmonGoldenStale",
        "RagmonJudgeErrorRateHigh",
        "RagmonJudgeCircuitOpen",
        "RagmonJudgeSheddingHigh",
        "RagmonDeadLetters",
        "RagmonConsumerLagGrowing",
        "RagmonNoEvaluations",
        "RagmonOtlpAssemblyShedding",
        "RagmonStageStuck",
        "RagmonDaemonDown",
        "RagmonDaemonAbsent",
    }


def test_quality_alerts_are_multi_window_with_a_minimum_sample_count() -> None:
    """They page on the population estimate's interval (the whole 95% interval beyond the
    threshold in both windows), never on the mean of the judged scores, and need judged traces
    of the uniform draw."""
    thresholds = {
        "RagmonFaithfulnessLow": ("faithfulness", "mean", "upper", "< 0.8"),
        "RagmonAnswerRelevancyLow": ("answer_relevancy", "mean", "upper", "< 0.7"),
        "RagmonContextRelevancyLow": ("context_relevancy", "mean", "upper", "< 0.6"),
        "RagmonUnfaithfulShareHigh": ("faithfulness", "below", "lower", "> 0.2"),
    }
    seen = set()
    for rule in alert_rules():
        if rule["alert"] not in thresholds:
            continue
        seen.add(rule["alert"])
        metric, quantity, bound, comparison = thresholds[rule["alert"]]
        expr = rule["expr"]
        assert f'metric="{metric}", quantity="{quantity}"' in expr
        assert expr.startswith("agent:ragmon_estimate_ppi:mean1h{")  # $value: the estimate
        for window in ("1h", "6h"):
            assert re.search(
                rf"agent:ragmon_estimate_ppi:{bound}{window}\{{.*\}} {comparison}", expr
            )
        assert re.search(r"agent:ragmon_estimate_judged:increase1h\{.*\} >= 20", expr)
        assert "ragmon_evaluation_score_ratio" not in expr
        description = rule["annotations"]["description"]
        assert "95% interval" in description and "query" in description
    assert seen == set(thresholds)


def test_hallucination_rate_alerts_read_tier_zero_by_default() -> None:
    """Tier 0's H_t covers every turn; the judge's only the turns it was sent."""
    for rule in alert_rules():
        if rule["alert"].startswith("RagmonHallucinationRate"):
            for series in scan(rule["expr"]).metrics:
                assert f'{series}{{evaluator=~"heuristic"}}' in rule["expr"], series


def test_tier0_alert_pages_without_a_judge_against_the_agents_own_baseline() -> None:
    """It reads tier 0's support only (present without a judge), compares each agent's last
    hour with its own 7 days before, and needs samples in both windows."""
    (rule,) = [r for r in alert_rules() if r["alert"] == "RagmonTier0SupportDrop"]
    expr = rule["expr"]
    assert "agent:ragmon_tier0_support:mean7d_1h_ago - agent:ragmon_tier0_support:mean1h" in expr
    assert "clamp_min(3 * agent:ragmon_tier0_support:spread1h_7d_1h_ago, 0.1)" in expr
    assert "agent:ragmon_tier0_support_count:increase1h >= 50" in expr
    assert "agent:ragmon_tier0_support_count:increase7d_1h_ago >= 500" in expr
    recorded = {r["record"]: r["expr"] for r in recording_rules()}
    for name in (
        "agent:ragmon_tier0_support:mean1h",
        "agent:ragmon_tier0_support:mean7d_1h_ago",
        "agent:ragmon_tier0_support_count:increase1h",
    ):
        assert 'metric="support", evaluator="heuristic"' in recorded[name], name
        assert "llm" not in recorded[name]
    assert "[7d] offset 1h" in recorded["agent:ragmon_tier0_support:mean7d_1h_ago"]


def _unit_test_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    cases = []
    for path in UNIT_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                cases.append((path.name, test, case))
    return cases


@pytest.mark.parametrize("alert", [rule["alert"] for rule in alert_rules()])
def test_every_alert_is_unit_tested_firing_quiet_on_low_samples_and_on_no_data(alert: str) -> None:
    fires = quiet_with_data = no_data = fires_on_no_data = False
    for _file, test, case in _unit_test_cases():
        if case["alertname"] != alert:
            continue
        has_data = bool(test.get("input_series"))
        expected = case.get("exp_alerts") or []
        if expected and has_data:
            fires = True
            for exp in expected:
                assert set(exp["exp_annotations"]) >= {"summary", "description", "runbook_url"}
        elif has_data:
            quiet_with_data = True
        elif expected:
            fires_on_no_data = True
        else:
            no_data = True
    assert fires, f"{alert}: no unit test where it fires"
    assert quiet_with_data, f"{alert}: no unit test where data exists and it stays quiet"
    if alert in FIRES_ON_NO_DATA:
        assert fires_on_no_data, f"{alert}: no unit test where it fires without data"
    else:
        assert no_data, f"{alert}: no unit test where it stays quiet without data"


def test_unit_test_files_load_both_rule_files_and_order_recording_first() -> None:
    names = [g["name"] for g in groups(RECORDING) + groups(ALERTS)]
    for path in UNIT_TESTS:
        spec = yaml.safe_load(path.read_text())
        assert spec["rule_files"] == ["../recording.yaml", "../alerts.yaml"], path.name
        assert spec["group_eval_order"] == names, path.name


def test_rules_use_only_exported_metrics_and_recorded_series() -> None:
    metrics = contract_metrics()
    recorded: dict[str, frozenset[str]] = {}
    for rule in recording_rules():
        found = scan(rule["expr"])
        labels = frozenset(found.grouping)
        if not labels:  # arithmetic of recorded series keeps their labels
            labels = frozenset().union(*(recorded.get(m, frozenset()) for m in found.metrics))
        recorded[rule["record"]] = labels
    problems = []
    for rule in recording_rules() + alert_rules():
        name = rule.get("record") or rule.get("alert")
        for problem in contract_problems(
            rule["expr"], metrics, recorded, allowed_outside=frozenset({"up"})
        ):
            problems.append(f"{name}: {problem}")
    assert not problems, "\n".join(problems)
    # Recording-rule names follow level:metric:operations, and every recorded name an alert
    # uses is recorded.
    for rule in recording_rules():
        assert re.fullmatch(r"[a-z_]+:ragmon_[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule
    used = {m for rule in alert_rules() for m in scan(rule["expr"]).metrics if ":" in m}
    assert used <= set(recorded), used - set(recorded)


def test_thresholds_come_from_the_chart_values(tmp_path: Path, promtool: str) -> None:
    render = _render_module()
    custom = render.chart_rule_groups(
        {
            "alerts": {
                "runbookBaseUrl": "https://runbooks.example/ragmon/",
                "reviewUrl": "https://ragmon.example",
                "additionalLabels": {"team": "search"},
                "quality": {"evaluators": "llm", "minSamples": 50, "for": "30m"},
                "faithfulness": {"threshold": 0.9, "severity": "warning"},
                "drift": {"enabled": False},
                "tier0Support": {"minDrop": 0.2, "sigmas": 4, "minSamples": 100},
                "golden": {"targets": {"mrr": 0.75}, "maxAgeSeconds": 7200},
                "judge": {"errorRatio": 0.05},
                "otlpAssembly": {"shedRatio": 0.05, "minShed": 200, "for": "1h"},
                "daemonDown": {"selector": 'job="ragmon", namespace="rag"'},
            }
        }
    )
    rules = {r["alert"]: r for g in custom for r in g["rules"] if "alert" in r}
    faithfulness = rules["RagmonFaithfulnessLow"]
    assert faithfulness["expr"].count("< 0.9") == 2
    assert 'evaluator=~"llm"' in faithfulness["expr"]
    assert ">= 50" in faithfulness["expr"]
    assert faithfulness["for"] == "30m"
    assert faithfulness["labels"] == {"severity": "warning", "team": "search"}
    assert faithfulness["annotations"]["runbook_url"] == (
        "https://runbooks.example/ragmon/RagmonFaithfulnessLow.md"
    )
    assert faithfulness["annotations"]["review_url"].startswith("https://ragmon.example/review?")
    assert "RagmonConstraintDriftHigh" not in rules
    assert "RagmonConstraintDriftRising" not in rules
    assert 'metric="mrr"}) < 0.75' in rules["RagmonGoldenBelowTarget"]["expr"]
    assert "> 7200" in rules["RagmonGoldenStale"]["expr"]
    assert "> 0.05" in rules["RagmonJudgeErrorRateHigh"]["expr"]
    shedding = rules["RagmonOtlpAssemblyShedding"]
    assert ") > 0.05" in shedding["expr"] and "[30m])) >= 200" in shedding["expr"]
    assert shedding["for"] == "1h" and shedding["labels"]["severity"] == "warning"
    tier0 = rules["RagmonTier0SupportDrop"]["expr"]
    assert "clamp_min(4 * agent:ragmon_tier0_support:spread1h_7d_1h_ago, 0.2)" in tier0
    assert "increase1h >= 100" in tier0
    assert rules["RagmonTier0SupportDrop"]["annotations"]["review_url"].endswith(
        "metric=support&since=1h"
    )
    assert 'up{job="ragmon", namespace="rag"} == 0' in rules["RagmonDaemonDown"]["expr"]
    # Custom values still give valid rules.
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump({"groups": custom}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_demo_rules_are_the_charts_rules_with_short_windows(promtool: str) -> None:
    """monitor/demo/prometheus_rules.yaml is generated from the same template (rules/render.py),
    valid for promtool, and differs from the production rules only in durations, minimum
    counts and labels -- never in thresholds or which rules exist."""
    render = _render_module()
    demo_file = ROOT / "monitor" / "demo" / "prometheus_rules.yaml"
    assert demo_file.read_text(encoding="utf-8") == render.render_demo(), (
        "monitor/demo/prometheus_rules.yaml is stale: run python rules/render.py"
    )
    result = subprocess.run(
        [promtool, "check", "rules", str(demo_file)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    demo = {r.get("alert") or r["record"]: r for g in groups(demo_file) for r in g["rules"]}
    production = {r.get("alert") or r["record"]: r for r in recording_rules() + alert_rules()}
    assert demo.keys() == production.keys()
    # Windows, offsets, minimum counts and golden.maxAgeSeconds may differ; thresholds may not.
    windows = re.compile(
        r"\[\d+[smhd](?::[^\]]*)?\]|offset \d+[smhd]|>= \d+|(?<=> )\d{3,}(?![.\d])"
    )
    for name, rule in production.items():
        assert windows.sub("", demo[name]["expr"]) == windows.sub("", rule["expr"]), name
    hallucination = demo["RagmonHallucinationRateHigh"]
    assert hallucination["for"] == "1m" and "[1h]" not in hallucination["expr"]
    assert hallucination["labels"]["rendering"] == "demo"


def test_the_estimate_rules_compute_what_the_estimator_computes() -> None:
    """rules/tests/estimates.yaml expects, from its input series, the numbers of
    monitor/estimates/estimator.py on the same sums: so the recording rules (which promtool
    holds to those numbers) and the Python arithmetic (the bench, the daemon test) agree."""
    from monitor.estimates import estimator

    spec = yaml.safe_load((RULES / "tests" / "estimates.yaml").read_text())
    checked = 0
    for test in spec["tests"]:
        # (agent, metric name) -> term -> its increase per minute
        per_minute: dict[tuple[str, str], dict[str, float]] = {}
        for entry in test["input_series"]:
            name = entry["series"].split("{")[0]
            labels = dict(re.findall(r'(\w+)="([^"]*)"', entry["series"]))
            step = float(entry["values"].split("+")[1].split("x")[0])
            terms = per_minute.setdefault((labels["agent"], name), {})
            terms[labels["term"]] = terms.get(labels["term"], 0.0) + step
        for case in test.get("promql_expr_test", []):
            match = re.fullmatch(
                r"round\(agent:ragmon_estimate_(\w+):([a-z]+)(\dh), 0\.0001\)", case["expr"]
            )
            if match is None:
                continue
            method, what, window = match.groups()
            (sample,) = case["exp_samples"]
            agent = dict(re.findall(r'(\w+)="([^"]*)"', sample["labels"]))["agent"]
            minutes = {"1h": 60, "6h": 360}[window]
            drawn, judged = (
                estimator.Terms.of(
                    {k: v * minutes for k, v in per_minute.get((agent, name), {}).items()}
                )
                for name in ("ragmon_estimate_terms_total", "ragmon_estimate_weighted_terms_total")
            )
            expected: float | None
            if method == "judged":
                expected = drawn.judged
            elif what == "correction":
                expected = estimator.correction(judged)
            elif method == "uniform" and what == "mean":  # needs no error: one unit will do
                expected = drawn.y / drawn.m
            else:
                estimate = (
                    estimator.uniform(drawn) if method == "uniform" else
                    estimator.prediction_powered(drawn, judged)
                )  # fmt: skip
                assert estimate is not None
                low, high = estimate.interval()
                expected = {
                    "mean": estimate.value,
                    "stderr": estimate.stderr,
                    "lower": low,
                    "upper": high,
                }[what]
            assert expected is not None
            assert float(sample["value"]) == pytest.approx(round(expected, 4), abs=1e-9)
            checked += 1
    assert checked >= 20
