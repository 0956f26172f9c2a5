"""The metrics catalog is the contract: the tables of docs/exported-metrics.md, the docs and every
metrics class agree with it (a running daemon's exposition is held to it in
tests/test_prometheus_e2e.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.openmetrics.exposition import generate_latest

from dashboards.contract import contract_metrics
from monitor import metrics_catalog as catalog
from monitor.estimates.calibration import Calibrations
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.golden.metrics import GoldenMetrics
from monitor.golden.results import Outcome
from monitor.metrics import Metrics
from monitor.retry import RetryMetrics
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.stages.assemble import OtlpMetrics
from monitor.stages.conversation import ConversationMetrics
from tests.support.exposition import catalog_problems

ROOT = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"^\|\s*(?P<names>`ragmon_[^|]*)\|\s*(?P<type>[^|]*)\|\s*(?P<labels>[^|]*)\|")
_TICKED = re.compile(r"`([^`]+)`")
# `ragmon_` words in the docs that are not metrics.
NOT_METRICS = {
    "ragmon_reference": "the JSON schema name of the golden-set reference judge call",
    "ragmon_soak_asyncio_tasks": "bench/soak.py's own gauge, added to the daemon it measures",
}


def metrics_tables(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Metric name -> (type, labels) of every row of the metrics page's tables."""
    body = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in body.splitlines():
        match = _ROW.match(line.strip())
        if match is None:
            continue
        kind = match["type"].split()[0].lower()
        labels = tuple(x for x in _TICKED.findall(match["labels"]) if re.fullmatch(r"\w+", x))
        for name in _TICKED.findall(match["names"]):
            assert name not in rows, f"{name} is listed twice"
            rows[name] = (kind, labels)
    return rows


def every_metrics_class(registry: CollectorRegistry) -> None:
    """Every metrics class on one registry, as a daemon with a judge and a golden suite has."""
    metrics = Metrics(registry)
    OtlpMetrics(registry)
    ScoringMetrics(registry, metrics.agent_label)
    registry.register(
        Calibrations({"faithfulness": 0.8}, window=10, min_labels=1, epoch_seconds=300.0)
    )
    JudgeMetrics(registry).register_evaluator("llm")
    GoldenMetrics(registry).init_suite("suite", {"mrr": 0.7})
    RetryMetrics.of(registry)
    ConversationMetrics(registry, metrics.agent_label)


def test_the_metrics_page_lists_exactly_the_catalog_with_its_types_and_labels() -> None:
    rows = metrics_tables((ROOT / "docs" / "exported-metrics.md").read_text(encoding="utf-8"))
    declared = {spec.name: (spec.type, spec.labels) for spec in catalog.CATALOG}
    assert sorted(set(declared) - set(rows)) == [], "in the catalog, not on the page"
    assert sorted(set(rows) - set(declared)) == [], "on the page, not in the catalog"
    wrong = {name: (rows[name], want) for name, want in declared.items() if rows[name] != want}
    assert wrong == {}, "the page's (type, labels) vs the catalog's"


def test_the_metrics_table_parser_sees_every_row() -> None:
    rows = metrics_tables((ROOT / "docs" / "exported-metrics.md").read_text(encoding="utf-8"))
    assert rows["ragmon_judge_output_tokens_total"] == ("counter", ("evaluator",))  # 2 in a cell
    assert rows["ragmon_evaluation_score_ratio"][0] == "histogram"  # "histogram (buckets ...)"
    assert rows["ragmon_kafka_consumer_lag_messages"][1] == ("topic", "partition")
    assert rows["ragmon_in_flight_traces"] == ("gauge", ())  # "–": no labels


def test_the_docs_name_only_metrics_the_daemon_exports() -> None:
    series = set(contract_metrics())
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "runbooks").glob("*.md"))
    unknown = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        # Recording rules (level:ragmon_...:ops) are checked against the catalog in test_rules.
        for match in re.finditer(r"(?<![\w:])ragmon_\w+(?![\w:])(\*)?", text):
            name = match.group(0)
            if name.endswith("*"):
                if not any(s.startswith(name[:-1]) for s in series):
                    unknown.append(f"{page.name}: {name}")
            elif name not in series and name not in NOT_METRICS:
                unknown.append(f"{page.name}: {name}")
    assert unknown == []


def test_every_metrics_class_exports_only_catalog_metrics_as_declared() -> None:
    registry = CollectorRegistry()
    every_metrics_class(registry)
    exposition = generate_latest(registry).decode()
    assert catalog_problems(exposition, complete=True) == []


def test_the_exposition_check_catches_what_the_catalog_does_not_declare() -> None:
    registry = CollectorRegistry()
    every_metrics_class(registry)
    Gauge("ragmon_undeclared", "Not in the catalog.", registry=registry)
    stray = CollectorRegistry()
    Counter("ragmon_dead_letters_total", "Other help.", ["topic"], registry=stray).labels("t")
    Gauge("ragmon_ready", "1 when the source is consuming (same as /readyz).", registry=stray)
    problems = catalog_problems(generate_latest(registry).decode())
    assert problems == ["ragmon_undeclared (gauge) is not in the catalog"]
    problems = catalog_problems(generate_latest(stray).decode(), complete=True)
    assert "ragmon_dead_letters_total's help is 'Other help.'" in problems
    assert any(p.startswith("ragmon_dead_letters_total has labels ['topic']") for p in problems)
    assert "ragmon_retries_total is not exported" in problems
    assert "ragmon_ready is not exported" not in problems


def test_no_module_but_the_catalog_declares_a_collector() -> None:
    declaring = {"Counter", "Gauge", "Histogram", "Info", "Summary", "Enum"}
    found = []
    for path in sorted((ROOT / "monitor").rglob("*.py")):
        if path.name == "metrics_catalog.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus"):
                names = {alias.name for alias in node.names}
                if names & declaring or any(n.endswith("MetricFamily") for n in names):
                    found.append(f"{path.relative_to(ROOT)}: {sorted(names)}")
    assert found == []


def test_create_makes_the_preset_series_at_zero_and_zero_fills_in_the_rest() -> None:
    registry = CollectorRegistry()
    dead_letters = catalog.create(catalog.DEAD_LETTERS, registry)
    assert isinstance(dead_letters, Counter)
    for reason in catalog.DEAD_LETTER_REASONS:
        assert registry.get_sample_value("ragmon_dead_letters_total", {"reason": reason}) == 0
    requests = catalog.create(catalog.JUDGE_REQUESTS, registry)
    assert registry.get_sample_value("ragmon_judge_requests_total", {}) is None  # no evaluator
    catalog.zero(catalog.JUDGE_REQUESTS, requests, evaluator="llm")
    for outcome in catalog.JUDGE_REQUEST_OUTCOMES:
        labels = {"evaluator": "llm", "outcome": outcome}
        assert registry.get_sample_value("ragmon_judge_requests_total", labels) == 0
    with pytest.raises(ValueError, match="evaluator"):
        catalog.zero(catalog.JUDGE_REQUESTS, requests)
    histogram = catalog.create(catalog.PROCESSING_DURATION, registry)
    assert isinstance(histogram, Histogram)
    assert tuple(histogram._upper_bounds[:-1]) == catalog.LATENCY_BUCKETS
    with pytest.raises(TypeError):
        catalog.create(catalog.EVALUATION_SCORE_MEAN, registry)  # a custom collector's


@pytest.mark.parametrize(
    ("name", "kind", "extra", "error"),
    [
        ("ragmon_x", Counter, {}, "ends with _total"),
        ("x_total", Counter, {}, "starts with ragmon_"),
        ("ragmon_x", Gauge, {"buckets": (1.0,)}, "buckets"),
        ("ragmon_x", Histogram, {}, "buckets"),
        ("ragmon_x", Gauge, {"preset": {"reason": ("a",)}}, "reason"),
    ],
)
def test_a_malformed_declaration_fails_at_import(
    name: str, kind: Any, extra: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        catalog.MetricSpec(name, kind, "help", **extra)


def test_the_golden_run_outcomes_are_the_results_outcomes() -> None:
    assert get_args(Outcome) == catalog.GOLDEN_RUN_OUTCOMES


def test_names_are_unique() -> None:
    names = [spec.name for spec in catalog.CATALOG]
    assert len(names) == len(set(names))
