"""Holds a /metrics exposition to the metrics catalog (monitor/metrics_catalog.py)."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from monitor.metrics_catalog import CATALOG

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def catalog_problems(openmetrics_text: str, complete: bool = False) -> list[str]:
    """Every way an OpenMetrics exposition departs from the catalog: a family it does not
    declare, another type or help, a sample with other labels; with `complete`, also a catalog
    metric the exposition lacks."""
    declared = {spec.family_name: spec for spec in CATALOG}
    problems: list[str] = []
    seen: set[str] = set()
    for family in text_string_to_metric_families(openmetrics_text):
        spec = declared.get(family.name)
        if spec is None:
            problems.append(f"{family.name} ({family.type}) is not in the catalog")
            continue
        seen.add(spec.name)
        if family.type != spec.type:
            problems.append(f"{spec.name} is a {family.type}, the catalog says {spec.type}")
        if family.documentation != spec.help:
            problems.append(f"{spec.name}'s help is {family.documentation!r}")
        for sample in family.samples:
            labels = set(sample.labels) - ({"le"} if sample.name.endswith("_bucket") else set())
            if labels != set(spec.labels):
                problems.append(
                    f"{sample.name} has labels {sorted(labels)}, the catalog {list(spec.labels)}"
                )
                break
    if complete:
        problems += [f"{spec.name} is not exported" for spec in CATALOG if spec.name not in seen]
    return problems
