"""The markdown report of a run (docs/metrics.md#golden-report) and the JSON result beside it.

:func:`render_markdown` is pure. Sections, headed in Japanese and English:

1. 概要 / Overview -- date, dataset, modes, conventions, outcome.
2. メトリクス比較 / Metrics per mode -- one row per mode, a ✓/✗ against each target, and the
   target row (``≥0.70``, ``≤200``); unmeasured values are ``n/m``.
3. 有意差検定 / Significance -- every mode against the baseline: mean difference, bootstrap CI,
   paired t, p, Cohen's d and the verdict; then the significant differences named in words.
4. カテゴリ別分析 / By category (and language, difficulty).
5. パラメータ感度分析 / Parameter sweeps, when the suite has sweeps.
6. 失敗分析 / Failure analysis -- per mode, the worst queries below the primary measure's target
   with expected versus returned ids (generation: the cases whose checks failed).
7. 推奨事項 / Recommendations -- from the tuning table (:mod:`monitor.golden.recommend`).

:func:`write_report` writes ``PATH`` (markdown) and ``PATH`` with suffix ``.json`` (the
:class:`~monitor.golden.results.RunResult`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from monitor.config.golden.measures import (
    GENERATION_MEASURES,
    display_name,
    is_latency,
    lower_is_better,
)
from monitor.golden.results import Comparison, ModeResult, QueryResult, RunResult

UNMEASURED = "n/m"
NA = "-"
_ANSWER_EXCERPT = 160


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def fmt_value(metric: str, value: float | None) -> str:
    if value is None:
        return UNMEASURED
    if is_latency(metric):
        return f"{value:.1f}" if value < 10 else f"{value:.0f}"
    return f"{value:.3f}"


def _fmt_target(metric: str, target: float) -> str:
    sign = "≤" if lower_is_better(metric) else "≥"
    if is_latency(metric):
        return f"{sign}{target:g}"
    return f"{sign}{target:.2f}"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return NA
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def _fmt_signed(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:+.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _mode_name(mode: ModeResult) -> str:
    return f"[{mode.label}] {mode.description}" if mode.description else f"[{mode.label}]"


def _table_metrics(result: RunResult) -> list[str]:
    cutoffs = result.conventions.get("cutoffs")
    ks = [k for k in cutoffs if isinstance(k, int)] if isinstance(cutoffs, list) else []
    if result.kind == "retrieval":
        names = ["mrr"]
        for k in ks:
            names += [f"recall_{k}", f"ndcg_{k}"]
        names += ["coverage"]
    else:
        names = [*GENERATION_MEASURES, "coverage"]
    names += ["latency_p50_ms", "latency_p95_ms", "latency_p99_ms"]
    names += [t for t in result.targets if t not in names]
    return names


# --------------------------------------------------------------------------- sections


def _overview(result: RunResult) -> list[str]:
    title = (
        "検索品質評価レポート / Retrieval quality report"
        if result.kind == "retrieval"
        else "回答品質評価レポート / Answer quality report"
    )
    lines = [f"# {title}: {result.suite}", "", "## 概要 (Overview)", ""]
    lines.append(
        f"- 評価日 / Date: {result.started_at.strftime('%Y-%m-%d %H:%M:%S %Z').strip()} "
        f"({result.duration_seconds:.1f} s)"
    )
    version = f", version {result.dataset_version}" if result.dataset_version else ""
    categories = ""
    if result.modes and "category" in result.modes[0].groups:
        groups = result.modes[0].groups["category"]
        categories = (
            f" ({len(groups)} categories: "
            + ", ".join(f"{label} {g.n}" for label, g in groups.items())
            + ")"
        )
    lines.append(
        f"- データセット / Dataset: `{result.dataset}`{version}: "
        f"{result.n_queries} queries{categories}"
    )
    if result.modes:
        names = ", ".join(_mode_name(m) for m in result.modes)
        lines.append(f"- 検索方式 / Modes: {len(result.modes)} -- {names}")
    if result.baseline_mode:
        lines.append(f"- Baseline: {result.baseline_mode}")
    conv = result.conventions
    if result.kind == "retrieval":
        gain = "2^rel - 1" if conv.get("gain") == "exponential" else "rel"
        lines.append(
            f"- Conventions: relevant = grade ≥ {conv.get('relevance_threshold')}, "
            f"nDCG gain {gain}, cutoffs {conv.get('cutoffs')}, top_k {conv.get('top_k')}; "
            "failed queries score 0"
        )
    else:
        judge = "yes" if result.judge else f"no (judge measures {UNMEASURED})"
        lines.append(f"- Judge: {judge}")
    if result.sweeps:
        lines.append(
            f"- Sweeps: {len(result.sweeps)} variants of mode {result.sweeps[0].variant_of}"
        )
    outcome = result.outcome.upper()
    lines.append(f"- Outcome: **{outcome}**")
    if result.error:
        lines.append(f"- Error: {_cell(result.error)}")
    missed = result.failed_targets() if result.outcome == "failed" else []
    if missed:
        text = "; ".join(
            f"{mode} {display_name(check.metric)} "
            f"{fmt_value(check.metric, check.value)} vs {_fmt_target(check.metric, check.target)}"
            for mode, check in missed
        )
        lines.append(f"- Targets missed: {text}")
    return lines


def _metrics_section(result: RunResult) -> list[str]:
    names = _table_metrics(result)
    header = ["方式 / Mode", *(display_name(n) for n in names), "Targets"]
    rows: list[list[str]] = []
    for mode in result.modes:
        checks = {c.metric: c for c in mode.targets}
        row = [_cell(_mode_name(mode))]
        for name in names:
            text = fmt_value(name, mode.metrics.get(name))
            check = checks.get(name)
            if check is not None and check.passed is not None:
                text += " ✓" if check.passed else " ✗"
            row.append(text)
        verdict = "pass" if mode.passed else "fail"
        if not mode.gated:
            verdict += " (not gated)"
        row.append(verdict)
        rows.append(row)
    target_row = ["**目標 / Target**"]
    for name in names:
        target = result.targets.get(name)
        target_row.append(f"**{_fmt_target(name, target)}**" if target is not None else NA)
    target_row.append("")
    rows.append(target_row)
    lines = ["## メトリクス比較 (Metrics per mode)", "", *_table(header, rows), ""]
    notes = [f"✓ meets the target, ✗ misses it, {UNMEASURED} unmeasured."]
    failed = [f"{m.label} {m.n_failed}" for m in result.modes if m.n_failed]
    if failed:
        notes.append(f"Failed requests (scored 0): {', '.join(failed)}.")
    lines.append(" ".join(notes))
    correlations = [m for m in result.modes if m.length_correlation is not None]
    if correlations:
        lines.append("")
        metric = (
            correlations[0].length_correlation.metric if correlations[0].length_correlation else ""
        )
        parts = []
        for mode in correlations:
            corr = mode.length_correlation
            if corr is None:
                continue
            if corr.r is None:
                parts.append(f"{mode.label} - ({corr.reason})")
            else:
                parts.append(f"{mode.label} r={corr.r:+.2f} (p={_fmt_p(corr.p_value)})")
        lines.append(
            f"Query length (characters) vs {display_name(metric)}, Pearson: " + "; ".join(parts)
        )
    return lines


def _comparison_rows(comparisons: Sequence[Comparison]) -> list[list[str]]:
    rows = []
    for c in comparisons:
        ci = (
            f"[{c.ci_lower:+.3f}, {c.ci_upper:+.3f}]"
            if c.ci_lower is not None and c.ci_upper is not None
            else NA
        )
        verdict = c.verdict if c.reason is None else f"{c.verdict} ({c.reason})"
        if c.verdict in ("better", "worse"):
            verdict = f"**{verdict}**"
        rows.append(
            [
                f"{c.candidate} vs {c.baseline}",
                display_name(c.metric),
                fmt_value(c.metric, c.baseline_mean),
                fmt_value(c.metric, c.candidate_mean),
                _fmt_signed(c.mean_diff),
                ci,
                NA if c.t_statistic is None else f"{c.t_statistic:.2f}",
                _fmt_p(c.p_value),
                NA if c.cohens_d is None else f"{c.cohens_d:+.2f}",
                verdict,
            ]
        )
    return rows


_COMPARISON_HEADER = ["Comparison", "Metric", "Baseline", "Candidate", "Δ", "CI", "t", "p", "d"]


def describe_significant(comparisons: Sequence[Comparison]) -> list[str]:
    """One sentence per significant difference, e.g. ``B is worse than A on MRR (...)``."""
    out = []
    for c in comparisons:
        if not c.significant:
            continue
        if c.verdict in ("better", "worse"):
            how = f"is significantly {c.verdict} than"
        else:
            how = "differs significantly (small effect) from"
        out.append(
            f"**{c.candidate}** {how} **{c.baseline}** on {display_name(c.metric)}: "
            f"{fmt_value(c.metric, c.baseline_mean)} → {fmt_value(c.metric, c.candidate_mean)} "
            f"(Δ {_fmt_signed(c.mean_diff)}, p={_fmt_p(c.p_value)}, "
            f"d={NA if c.cohens_d is None else f'{c.cohens_d:+.2f}'}, n={c.n})"
        )
    return out


def _significance_section(result: RunResult) -> list[str]:
    if not result.comparisons:
        return []
    alpha = result.comparisons[0].alpha
    confidence = result.comparisons[0].confidence
    header = [*_COMPARISON_HEADER, "Verdict"]
    header[5] = f"{confidence:.0%} CI"
    min_effect = result.conventions.get("min_effect", 0.3)
    lines = [
        f"## 有意差検定 (Significance, vs baseline {result.baseline_mode})",
        "",
        f"Paired t-test at alpha = {alpha:g}, Cohen's d (paired d_z), paired bootstrap CI of "
        f"the mean difference; an improvement needs p < alpha and |d| ≥ {min_effect}. "
        "No correction for multiple comparisons.",
        "",
        *_table(header, _comparison_rows(result.comparisons)),
        "",
    ]
    sentences = describe_significant(result.comparisons)
    if sentences:
        lines.append("Significant differences:")
        lines.append("")
        lines += [f"- {s}" for s in sentences]
    else:
        lines.append(f"No significant difference at alpha = {alpha:g}.")
    return lines


def _group_section(result: RunResult) -> list[str]:
    if not result.modes:
        return []
    if result.kind == "retrieval":
        shown = [n for n in result.targets if not is_latency(n) and n != "coverage"]
        shown = shown or [result.primary_metric or "mrr"]
    else:
        shown = [result.primary_metric or "topic_coverage"]
    lines = ["## カテゴリ別分析 (By category)", ""]
    any_group = False
    for grouping in ("category", "language", "difficulty"):
        labels: list[str] = []
        for mode in result.modes:
            for label in mode.groups.get(grouping, {}):
                if label not in labels:
                    labels.append(label)
        if not labels:
            continue
        any_group = True
        cell_names = " / ".join(display_name(n) for n in shown)
        header = [grouping, "n", *(f"{m.label}: {cell_names}" for m in result.modes)]
        rows = []
        for label in labels:
            first = next(
                (
                    m.groups[grouping][label]
                    for m in result.modes
                    if label in m.groups.get(grouping, {})
                ),
                None,
            )
            row = [_cell(label), str(first.n if first else 0)]
            for mode in result.modes:
                group = mode.groups.get(grouping, {}).get(label)
                if group is None:
                    row.append(NA)
                else:
                    row.append(" / ".join(fmt_value(n, group.metrics.get(n)) for n in shown))
            rows.append(row)
        lines += [f"### By {grouping}", "", *_table(header, rows), ""]
    if not any_group:
        lines.append("The dataset labels no category, language or difficulty.")
    return lines


def _sweep_section(result: RunResult) -> list[str]:
    if not result.sweeps:
        return []
    primary = result.primary_metric or "mrr"
    names = _table_metrics(result)
    shown = [n for n in names if n in result.targets and not is_latency(n)] or [primary]
    if primary not in shown:
        shown.insert(0, primary)
    by_candidate = {c.candidate: c for c in result.sweep_comparisons if c.metric == primary}
    header = [
        "Variant",
        *(display_name(n) for n in shown),
        "P95(ms)",
        f"Δ {display_name(primary)}",
        "p",
        "d",
        "Verdict",
    ]
    rows = []
    for mode in result.sweeps:
        comparison = by_candidate.get(mode.label)
        rows.append(
            [
                _cell(mode.label),
                *(fmt_value(n, mode.metrics.get(n)) for n in shown),
                fmt_value("latency_p95_ms", mode.metrics.get("latency_p95_ms")),
                _fmt_signed(comparison.mean_diff if comparison else None),
                _fmt_p(comparison.p_value if comparison else None),
                NA
                if comparison is None or comparison.cohens_d is None
                else f"{comparison.cohens_d:+.2f}",
                comparison.verdict if comparison else NA,
            ]
        )
    base = result.sweeps[0].variant_of
    lines = [
        "## パラメータ感度分析 (Parameter sweeps)",
        "",
        f"Variants of mode {base}, each compared with it on {display_name(primary)}.",
        "",
        *_table(header, rows),
        "",
    ]
    significant = describe_significant(result.sweep_comparisons)
    if significant:
        lines += ["Significant differences:", "", *(f"- {s}" for s in significant)]
    return lines


def _ids(query: QueryResult, ids: Sequence[str], threshold: int) -> str:
    parts = []
    for doc in ids:
        grade = query.expected.get(doc)
        if grade is None:
            parts.append(f"`{doc}`")
        elif grade >= threshold:
            parts.append(f"**`{doc}`({grade})**")
        else:
            parts.append(f"`{doc}`({grade})")
    return ", ".join(parts) if parts else "(none)"


def _worst_retrieval(result: RunResult, mode: ModeResult, limit: int) -> list[str]:
    primary = result.primary_metric or "mrr"
    target = result.targets.get(primary)
    threshold_value = result.conventions.get("relevance_threshold", 2)
    threshold = threshold_value if isinstance(threshold_value, int) else 2
    top_value = result.conventions.get("top_k", 10)
    shown_k = min(10, top_value) if isinstance(top_value, int) else 10

    def below(query: QueryResult) -> bool:
        value = query.metrics.get(primary)
        if value is None:
            return False
        return value < target if target is not None else value < 1.0

    worst = sorted(
        (q for q in mode.queries if below(q) or q.error is not None),
        key=lambda q: (q.metrics.get(primary) or 0.0, q.query_id),
    )[:limit]
    if not worst:
        return [f"No query of mode {mode.label} is below the {display_name(primary)} target."]
    rows = []
    for q in worst:
        expected = sorted(q.expected.items(), key=lambda item: (-item[1], item[0]))
        expected_text = ", ".join(
            f"**`{doc}`({grade})**" if grade >= threshold else f"`{doc}`({grade})"
            for doc, grade in expected
        )
        returned = (
            f"request failed: {_cell(q.error)}"
            if q.error is not None
            else _ids(q, q.returned[:shown_k], threshold)
        )
        rows.append(
            [
                f"{q.query_id}",
                _cell(q.text),
                _cell(q.category or ""),
                fmt_value(primary, q.metrics.get(primary)),
                fmt_value("mrr", q.metrics.get("mrr")),
                expected_text,
                returned,
            ]
        )
    header = [
        "ID",
        "Query",
        "Category",
        display_name(primary),
        "RR",
        "Expected (grade)",
        f"Returned (top {shown_k})",
    ]
    return _table(header, rows)


def _failed_checks(query: QueryResult) -> list[str]:
    problems: list[str] = []
    if query.error is not None:
        return [f"request failed: {query.error}"]
    metrics = query.metrics
    if query.forbidden_found:
        problems.append("contains " + ", ".join(f"'{t}'" for t in query.forbidden_found))
    if query.topics_missing:
        problems.append("missing topics " + ", ".join(f"'{t}'" for t in query.topics_missing))
    if metrics.get("no_context_pass_rate") == 0.0:
        problems.append("does not admit it does not know")
    if metrics.get("false_refusal_rate") == 1.0:
        problems.append("refuses an answerable question")
    if metrics.get("language_pass_rate") == 0.0:
        problems.append(
            f"answer language {query.answer_language or 'unknown'}, expected "
            f"{query.expected_language}"
        )
    return problems


def _worst_generation(mode: ModeResult, limit: int) -> list[str]:
    failing = [(q, _failed_checks(q)) for q in mode.queries]
    failing = [(q, problems) for q, problems in failing if problems][:limit]
    if not failing:
        return [f"Every case of mode {mode.label} passes its checks."]
    rows = []
    for q, problems in failing:
        answer = q.answer or ""
        if len(answer) > _ANSWER_EXCERPT:
            answer = answer[:_ANSWER_EXCERPT] + "…"
        rows.append([q.query_id, _cell(q.text), _cell("; ".join(problems)), _cell(answer)])
    return _table(["ID", "Question", "Problem", "Answer"], rows)


def _failure_section(result: RunResult) -> list[str]:
    if not result.modes:
        return []
    limit_value = result.conventions.get("worst_queries", 5)
    limit = limit_value if isinstance(limit_value, int) else 5
    lines = ["## 失敗分析 (Failure analysis)", ""]
    if result.kind == "retrieval":
        primary = display_name(result.primary_metric or "mrr")
        lines.append(
            f"Worst queries below the {primary} target per mode; relevant ids in bold, "
            "grade in parentheses."
        )
    else:
        lines.append("Cases whose checks failed, per mode.")
    lines.append("")
    for mode in result.modes:
        lines.append(f"### {_cell(_mode_name(mode))}")
        lines.append("")
        if result.kind == "retrieval":
            lines += _worst_retrieval(result, mode, limit)
        else:
            lines += _worst_generation(mode, limit)
        lines.append("")
    return lines


def _recommendation_section(result: RunResult) -> list[str]:
    if not result.modes:
        return []
    lines = ["## 推奨事項 (Recommendations)", ""]
    if not result.recommendations:
        lines.append("Every target is met; no tuning suggested.")
        return lines
    for index, rec in enumerate(result.recommendations, start=1):
        modes = f" (modes {', '.join(rec.modes)})" if rec.modes else ""
        lines.append(f"{index}. **{rec.problem}**{modes}")
        if rec.detail:
            lines.append(f"   - {rec.detail}")
        lines.append(f"   - Cause: {rec.cause}")
        lines.append(f"   - Try: {'; '.join(rec.actions)}")
        lines.append(f"   - Source: {rec.source}")
    return lines


def render_markdown(result: RunResult) -> str:
    """The report of ``result`` (see the module docstring)."""
    sections = [
        _overview(result),
        _metrics_section(result) if result.modes else [],
        _significance_section(result),
        _group_section(result),
        _sweep_section(result),
        _failure_section(result),
        _recommendation_section(result),
    ]
    lines: list[str] = []
    for section in sections:
        while section and not section[-1]:
            section = section[:-1]
        if section:
            if lines:
                lines.append("")
            lines += section
    return "\n".join(lines).rstrip() + "\n"


def json_path_for(report_path: Path) -> Path:
    """``report.md`` -> ``report.json`` (``report.json`` -> ``report.json.result.json``)."""
    if report_path.suffix.lower() == ".json":
        return report_path.with_name(report_path.name + ".result.json")
    return report_path.with_suffix(".json")


def write_report(result: RunResult, path: str | Path) -> tuple[Path, Path]:
    """Write the markdown report to ``path`` and the JSON result beside it; return both paths."""
    report_path = Path(path)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    json_path = json_path_for(report_path)
    report_path.write_text(render_markdown(result), encoding="utf-8")
    json_path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return report_path, json_path


__all__ = [
    "UNMEASURED",
    "describe_significant",
    "fmt_value",
    "json_path_for",
    "render_markdown",
    "write_report",
]
