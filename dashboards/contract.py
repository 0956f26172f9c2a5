"""The metrics contract (from the catalog) and a small PromQL scanner that checks against it.

Dashboards and alert rules may use only the metrics the daemon exports, with their labels: the
ones declared in `monitor/metrics_catalog.py`. This module turns that catalog into the series
names a query can select, and finds, in a PromQL expression, every metric selector, every label
matcher and every grouping label, so a test (and the dashboard generator) can reject a name that
the daemon does not export. It is a scanner, not a full parser: syntax itself is checked by
`promtool check rules` in the tests. (The tables of docs/exported-metrics.md are checked against
the same catalog by tests/test_metrics_catalog.py.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from monitor.metrics_catalog import CATALOG, MetricType

# Labels Prometheus itself attaches to every scraped series (target labels), plus the ones the
# Kubernetes service discovery of the Prometheus Operator adds. Grouping by them is always allowed.
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "service", "container", "endpoint", "__name__"}
)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    labels: frozenset[str]


def contract_metrics() -> dict[str, Metric]:
    """Every metric of the catalog, by every series name it exports.

    A histogram `x` exports `x_bucket` (with `le`), `x_sum` and `x_count`; those three names map
    to the histogram's entry. The base name maps too, so a caller can look up the declaration.
    """
    found: dict[str, Metric] = {}
    for spec in CATALOG:
        labels = frozenset(spec.labels)
        found[spec.name] = Metric(spec.name, spec.type, labels)
        if spec.type == "histogram":
            for suffix in HISTOGRAM_SUFFIXES:
                extra = {"le"} if suffix == "_bucket" else set()
                found[spec.name + suffix] = Metric(spec.name + suffix, spec.type, labels | extra)
    return found


# --- scanning PromQL -----------------------------------------------------------------------------

KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "and",
        "or",
        "unless",
        "atan2",
        "inf",
        "nan",
    }
)
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
AGGREGATIONS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    }
)

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)
      (?:ms|[smhdwy])?(?:\d+(?:ms|[smhdwy]))*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}@])
    """,
    re.VERBOSE,
)
# Grafana variables: $name, ${name}, ${name:format}, [[name]].
_GRAFANA_VAR = re.compile(r"\$\{[^}]+\}|\$\w+|\[\[\w+\]\]")


@dataclass
class Scan:
    """What an expression refers to."""

    metrics: list[str] = field(default_factory=list)  # selector names, in order
    matchers: list[tuple[str, str]] = field(default_factory=list)  # (metric or "", label)
    grouping: list[str] = field(default_factory=list)  # labels in by/without/on/ignoring/...
    functions: list[str] = field(default_factory=list)


def substitute_grafana_variables(expr: str) -> str:
    """Replace Grafana's template variables with values PromQL accepts (for syntax checks)."""

    def repl(match: re.Match[str]) -> str:
        name = match.group(0).strip("${}[]").split(":")[0]
        if name in ("__rate_interval", "__interval", "__range", "window"):
            return "5m"
        if name == "__range_s":
            return "300"
        return ".*"

    return _GRAFANA_VAR.sub(repl, expr)


def tokenize(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot scan PromQL at {expr[pos : pos + 30]!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind in ("ws", "comment"):
            continue
        tokens.append((kind, match.group(0)))
    return tokens


def scan(expr: str) -> Scan:
    """Find metric selectors, label matchers and grouping labels in a PromQL expression."""
    tokens = tokenize(substitute_grafana_variables(expr))
    result = Scan()
    i = 0
    current_metric = ""
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and text.lower() in GROUPING and nxt == "(":
            # by (a, b) / on (a) group_left (c): a list of label names
            i += 2
            while i < len(tokens) and tokens[i][1] != ")":
                if tokens[i][0] == "ident":
                    result.grouping.append(tokens[i][1])
                i += 1
            i += 1
            continue
        if kind == "ident" and text.lower() in KEYWORDS:
            i += 1
            continue
        if kind == "ident" and (nxt == "(" or (text in AGGREGATIONS and nxt in GROUPING)):
            result.functions.append(text)
            i += 1
            continue
        if kind == "ident":
            result.metrics.append(text)
            current_metric = text
            i += 1
            if i < len(tokens) and tokens[i][1] == "{":
                i = _matchers(tokens, i, current_metric, result)
            continue
        if text == "{":  # a selector without a metric name: {__name__=~"..."}
            i = _matchers(tokens, i, "", result)
            continue
        i += 1
    return result


def _matchers(tokens: list[tuple[str, str]], i: int, metric: str, result: Scan) -> int:
    i += 1  # past "{"
    while i < len(tokens) and tokens[i][1] != "}":
        if tokens[i][0] == "ident" and i + 1 < len(tokens) and tokens[i + 1][0] == "op":
            result.matchers.append((metric, tokens[i][1]))
        i += 1
    return i + 1


def contract_problems(
    expr: str,
    metrics: dict[str, Metric],
    recorded: dict[str, frozenset[str]] | None = None,
    allowed_outside: frozenset[str] = frozenset(),
) -> list[str]:
    """Every way `expr` breaks the contract: unknown metrics, labels they do not carry.

    `recorded` maps recording-rule names to their labels (rules may use those too);
    `allowed_outside` names non-ragmon series an expression may use (for example `up`).
    """
    recorded = recorded or {}
    problems: list[str] = []
    found = scan(expr)
    used_labels: set[str] = set(TARGET_LABELS)
    for name in found.metrics:
        if name in metrics:
            used_labels |= metrics[name].labels
        elif name in recorded:
            used_labels |= recorded[name]
        elif name not in allowed_outside:
            problems.append(f"metric {name!r} is not a metric the daemon exports")
    for metric, label in found.matchers:
        if metric in metrics:
            allowed = metrics[metric].labels | TARGET_LABELS
        elif metric in recorded:
            allowed = recorded[metric] | TARGET_LABELS
        else:
            continue
        if label not in allowed:
            problems.append(f"label {label!r} is not a label of {metric}")
    for label in found.grouping:
        if label not in used_labels:
            problems.append(f"grouping label {label!r} belongs to none of the metrics used")
    if not found.metrics:
        problems.append("expression selects no metric")
    return problems
