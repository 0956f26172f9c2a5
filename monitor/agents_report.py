"""`rag-monitor agents`: compare agents' multi-turn quality from the stored turns."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from scipy import stats  # type: ignore[import-untyped]

from monitor.evaluators.multiturn import AgentSummary, TurnRecord


def records_from_rows(rows: list[dict[str, Any]]) -> list[TurnRecord]:
    records = []
    for row in rows:
        detail = json.loads(row["detail"]) if row.get("detail") else {}
        records.append(
            TurnRecord(
                conversation_id=row["conversation_id"],
                turn=row["turn"],
                agent=row["agent"],
                hallucination=row["hallucination"],
                drift=row["drift"],
                memory_tokens=row["memory_tokens"],
                outcomes=detail.get("outcomes", {}),
            )
        )
    return records


def welch(baseline: list[float], other: list[float]) -> dict[str, float | None]:
    """Welch's t-test (turns of different agents are independent samples)."""
    if len(baseline) < 2 or len(other) < 2:
        return {"t": None, "p": None}
    if len(set(baseline)) < 2 and len(set(other)) < 2:
        return {"t": None, "p": None}
    result = stats.ttest_ind(other, baseline, equal_var=False)
    return {"t": float(result.statistic), "p": float(result.pvalue)}


def compare(summaries: dict[str, AgentSummary], baseline: str | None) -> dict[str, Any]:
    base = summaries.get(baseline) if baseline else None
    report: dict[str, Any] = {"baseline": baseline, "agents": {}}
    for name, summary in summaries.items():
        entry = asdict(summary)
        entry.pop("hallucination_series")
        entry.pop("drift_series")
        if base is not None and name != baseline:
            entry["vs_baseline"] = {
                "hallucination": welch(base.hallucination_series, summary.hallucination_series),
                "drift": welch(base.drift_series, summary.drift_series),
            }
        report["agents"][name] = entry
    return report


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(report: dict[str, Any], alpha: float = 0.05) -> str:
    header = (
        f"{'agent':<20} {'turns':>6} {'convs':>6} {'H_u':>7} {'sd':>7} {'D_r':>7} "
        f"{'sd':>7} {'M':>8} {'M_T':>8}  vs baseline (p, Welch)"
    )
    lines = [header, "-" * len(header)]
    for name, a in report["agents"].items():
        versus = a.get("vs_baseline")
        note = "baseline" if name == report["baseline"] else ""
        if versus:
            parts = []
            for metric in ("hallucination", "drift"):
                p = versus[metric]["p"]
                mark = "*" if p is not None and p < alpha else ""
                parts.append(f"{metric[0].upper()} p={_fmt(p)}{mark}")
            note = ", ".join(parts)
        lines.append(
            f"{name:<20} {a['turns']:>6} {a['conversations']:>6} "
            f"{_fmt(a['hallucination_mean']):>7} {_fmt(a['hallucination_std']):>7} "
            f"{_fmt(a['drift_mean']):>7} {_fmt(a['drift_std']):>7} "
            f"{_fmt(a['memory_mean'], 0):>8} {_fmt(a['memory_final_mean'], 0):>8}  {note}"
        )
    lines.append(f"* significant at alpha {alpha}")
    return "\n".join(lines)
