"""Scoring a file without Kafka (`rag-monitor score`), and the summary a finished run prints.

The summary is read from the run's Prometheus registry, so `score` and the file replay
(`rag-monitor run --source file:...`) report the same things the same way: traces scored,
dead letters and skips by reason, mean scores per evaluator, unsupported statements,
unmeasured scores and flags by reason, and what the LLM judge did -- how many traces the
sampler selected, how many were shed under load or left unjudged, by reason.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from prometheus_client import CollectorRegistry

from monitor.formats.errors import DecodeError
from monitor.formats.native import decode_native
from monitor.messages import RawMessage
from monitor.models import Trace
from monitor.offline_otlp import LineKind
from monitor.sources.file import input_problem, split_lines
from monitor.stages.router import Router

MAX_LINE_BYTES = 16 * 1024 * 1024
JUDGE_EVALUATORS = ("llm", "ragas")


class InputError(Exception):
    """An input or output path that cannot be used; one line naming the flag."""


def check_paths(input_path: str, output: Path) -> None:
    """Raise InputError when `--input` cannot be read or `--output` cannot be written."""
    problem = input_problem(input_path)
    if problem is not None:
        raise InputError(f"--input {problem}")
    folder = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise InputError(f"--output {output} is a directory; give a file name")
    if not folder.is_dir():
        raise InputError(
            f"--output {output}: folder {folder} does not exist; create it or choose another"
        )
    if not os.access(folder, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise InputError(f"--output {output}: permission denied")


@dataclass
class FileInput:
    """What `read_traces` found: native traces, the OTLP/JSON lines (assembled afterwards, see
    :mod:`monitor.offline_otlp`), and how many lines it rejected."""

    traces: list[Trace] = field(default_factory=list)
    otlp: list[tuple[RawMessage, LineKind]] = field(default_factory=list)
    rejected: int = 0


def read_traces(path: str, errors: IO[str], otlp: bool = True) -> FileInput:
    """The traces of a JSONL file (`-` for stdin); bad lines are reported, not fatal.

    Native lines are decoded here; with `otlp` (the `auto` format, as the file replay reads),
    OTLP/JSON lines are kept for assembly. Lines are read with a bound: one longer than
    MAX_LINE_BYTES is rejected (`too_large`) without being held in memory whole.
    """
    stream = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115
    found = FileInput()
    label = "stdin" if path == "-" else path
    # The file replay's router: the same lines go the same way (OTLP/JSON only with `otlp`).
    router = Router(
        input_format="auto" if otlp else "native", max_bytes=MAX_LINE_BYTES, text_lines=True
    )
    try:
        for number, line in enumerate(split_lines(stream, MAX_LINE_BYTES), start=1):
            if not line.value.strip():
                continue
            message = RawMessage(label, 0, number, None, line.value, size=line.size)
            try:
                routed = router.classify(message)
                if isinstance(routed, DecodeError):
                    raise routed
                _, item = routed
                if item.format == "native":
                    found.traces.append(decode_native(line.value))
                else:
                    found.otlp.append((message, "otlp_logs" if item.logs else "otlp_spans"))
            except DecodeError as exc:
                found.rejected += 1
                errors.write(
                    json.dumps({"line": number, "reason": exc.reason, "error": exc.detail}) + "\n"
                )
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    return found


# ------------------------------------------------------------------------------- the summary


def samples_by_name(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in registry.collect():
        for sample in family.samples:
            samples[sample.name].append((dict(sample.labels), sample.value))
    return samples


def _counts(
    samples: list[tuple[dict[str, str], float]], *keys: str, **where: str | tuple[str, ...]
) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for labels, value in samples:
        if any(
            labels.get(k) not in (v if isinstance(v, tuple) else (v,)) for k, v in where.items()
        ):
            continue
        if value:
            out[tuple(labels.get(k, "") for k in keys)] += int(value)
    return out


def _listing(counts: Counter[tuple[str, ...]]) -> str:
    return ", ".join(f"{' '.join(k)} {n}" for k, n in sorted(counts.items()))


@dataclass
class RunSummary:
    """What a finished run did, from its metrics (see the module docstring)."""

    processed: int = 0
    processing_errors: int = 0
    dead_letters: Counter[tuple[str, ...]] = field(default_factory=Counter)
    skipped: Counter[tuple[str, ...]] = field(default_factory=Counter)
    score_sums: dict[tuple[str, str], float] = field(default_factory=dict)
    score_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    unmeasured: Counter[tuple[str, ...]] = field(default_factory=Counter)
    flags: Counter[tuple[str, ...]] = field(default_factory=Counter)
    statements: Counter[tuple[str, ...]] = field(default_factory=Counter)
    evaluations: Counter[tuple[str, ...]] = field(default_factory=Counter)
    decisions: Counter[tuple[str, ...]] = field(default_factory=Counter)
    shed: Counter[tuple[str, ...]] = field(default_factory=Counter)
    judge_active: bool = False

    @classmethod
    def from_registry(cls, registry: CollectorRegistry, *, judge_active: bool) -> RunSummary:
        s = samples_by_name(registry)
        processed = _counts(s["ragmon_traces_processed_total"], "outcome")
        summary = cls(
            processed=processed[("ok",)],
            processing_errors=processed[("error",)],
            dead_letters=_counts(s["ragmon_dead_letters_total"], "reason"),
            skipped=_counts(s["ragmon_traces_skipped_total"], "reason"),
            unmeasured=_counts(
                s["ragmon_evaluation_unmeasured_total"], "evaluator", "metric", "reason"
            ),
            flags=_counts(s["ragmon_evaluation_flags_total"], "reason"),
            statements=_counts(s["ragmon_statements_total"], "evaluator", "outcome"),
            evaluations=_counts(s["ragmon_evaluations_total"], "evaluator", "outcome"),
            decisions=_counts(s["ragmon_sampler_decisions_total"], "outcome"),
            shed=_counts(s["ragmon_sampler_shed_total"], "reason"),
            judge_active=judge_active,
        )
        for labels, value in s["ragmon_evaluation_score_ratio_sum"]:
            key = (labels["evaluator"], labels["metric"])
            summary.score_sums[key] = summary.score_sums.get(key, 0.0) + value
        for labels, value in s["ragmon_evaluation_score_ratio_count"]:
            key = (labels["evaluator"], labels["metric"])
            summary.score_counts[key] = summary.score_counts.get(key, 0) + int(value)
        return summary

    def evaluated(self, evaluator: str) -> int:
        return sum(n for (ev, _), n in self.evaluations.items() if ev == evaluator)

    def render(self, head: str, evaluators: tuple[str, ...] | None = None) -> str:
        """`head`, then one indented line per topic; `evaluators` limits the score lines."""
        lines = [head]
        shown = sorted(
            {ev for ev, _ in self.score_counts} | {ev for ev, _ in self.evaluations},
            key=lambda ev: (ev != "heuristic", ev),
        )
        for evaluator in shown:
            if evaluators is not None and evaluator not in evaluators:
                continue
            for (ev, metric), count in sorted(self.score_counts.items()):
                if ev == evaluator and count:
                    mean = self.score_sums[(ev, metric)] / count
                    lines.append(f"  {metric:<22} mean {mean:.3f}  (n={count}, {evaluator})")
            supported = self.statements[(evaluator, "supported")]
            unsupported = self.statements[(evaluator, "unsupported")]
            if supported + unsupported:
                lines.append(
                    f"  unsupported statements {unsupported} of {supported + unsupported}"
                    f" ({evaluator})"
                )
        grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
        for (evaluator, metric, reason), count in sorted(self.unmeasured.items()):
            if evaluators is None or evaluator in evaluators:
                grouped[(evaluator, reason)].append(f"{metric} {count}")
        for (evaluator, reason), metrics in sorted(grouped.items()):
            lines.append(f"  unmeasured ({evaluator}) {reason}: {', '.join(metrics)}")
        for (flag,), count in sorted(self.flags.items()):
            lines.append(f"  flag {flag}: {count}")
        lines.append("  " + self.judge_line())
        return "\n".join(lines)

    def judge_line(self) -> str:
        """What the LLM judge did: selected, shed by reason, judged, unjudged by reason."""
        if not self.judge_active:
            return "judge: off (set judge.base_url / RAGMON_JUDGE__BASE_URL): tier 0 only"
        sampled, priority = self.decisions[("sampled",)], self.decisions[("priority",)]
        shed = sum(self.shed.values())
        skipped = self.decisions[("skipped",)]
        capped = self.decisions[("priority_capped",)]
        selected = sampled + priority + shed
        parts = [
            f"judge: {selected} traces selected (sampled {sampled}, priority {priority}),"
            f" {skipped} not in the sample"
            + (f", {capped} priorities over sampling.priority_max_share" if capped else "")
        ]
        if shed:
            parts.append(f"shed {shed} ({_listing(self.shed)})")
        judged = sum(n for (ev, _), n in self.evaluations.items() if ev in JUDGE_EVALUATORS)
        failed = sum(
            n
            for (ev, outcome), n in self.evaluations.items()
            if ev in JUDGE_EVALUATORS and outcome == "error"
        )
        parts.append(f"judged {judged - failed}")
        if failed:
            reasons: Counter[tuple[str, ...]] = Counter()
            for (ev, _metric, reason), n in self.unmeasured.items():
                if ev in JUDGE_EVALUATORS and reason in JUDGE_FAILURES:
                    reasons[(reason,)] = max(reasons[(reason,)], n)
            parts.append(f"left unjudged {failed} (" + (_listing(reasons) or "judge errors") + ")")
        return "; ".join(parts)

    def unjudged(self) -> tuple[int, str]:
        """Traces the judge was asked for but did not judge (shed, or left unjudged), and the
        reasons with their counts (``judge_timeout 2, token_budget 1``)."""
        failed = sum(
            n
            for (ev, outcome), n in self.evaluations.items()
            if ev in JUDGE_EVALUATORS and outcome == "error"
        )
        reasons: Counter[tuple[str, ...]] = Counter(self.shed)
        for (ev, _metric, reason), n in self.unmeasured.items():
            if ev in JUDGE_EVALUATORS and reason in JUDGE_FAILURES:
                reasons[(reason,)] = max(reasons[(reason,)], n)
        return sum(self.shed.values()) + failed, _listing(reasons) or "judge errors"


# Unmeasured reasons that mean the judge failed (not that the trace had nothing to judge).
JUDGE_FAILURES = frozenset(
    {
        "judge_error",
        "judge_timeout",
        "malformed_output",
        "truncated_output",
        "context_too_long",
        "circuit_open",
        "nan_result",
    }
)
