"""`rag-monitor score`: score a JSONL file of native traces offline, then print a summary."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.command import ExitCode, Subparsers, fail, set_handler, settings_or_exit
from monitor.config import Settings
from monitor.logs import configure_logging
from monitor.models import Trace


def register(subparsers: Subparsers) -> None:
    score = subparsers.add_parser("score", help="score a JSONL file of native traces offline")
    score.add_argument("--input", required=True, help="traces, one JSON object a line; - = stdin")
    score.add_argument("--output", required=True, type=Path, help="results, one JSON a line")
    score.add_argument(
        "--evaluator",
        choices=["heuristic", "llm", "ragas"],
        default="heuristic",
        help="heuristic (default): tier 0 only, no network; llm or ragas: also the LLM judge on"
        " every trace (needs judge.base_url / RAGMON_JUDGE__BASE_URL; ragas needs the ragas"
        " extra). The summary reports the chosen evaluator's traces",
    )
    score.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(score, handle)


def handle(args: argparse.Namespace) -> ExitCode:
    from monitor.offline import InputError, RunSummary, check_paths, read_traces

    input_path: str = args.input
    output: Path = args.output
    evaluator: str = args.evaluator
    settings = settings_or_exit(args.config)
    try:
        check_paths(input_path, output)
    except InputError as exc:
        return fail(str(exc), ExitCode.USAGE)
    if evaluator in ("llm", "ragas") and not settings.judge.active:
        return fail(
            f"--evaluator {evaluator} needs a judge endpoint: set judge.base_url"
            " (RAGMON_JUDGE__BASE_URL)",
            ExitCode.USAGE,
        )
    configure_logging(settings.log.format, "warning")
    try:
        traces, rejected = read_traces(input_path, sys.stderr)
    except OSError as exc:
        return fail(f"--input {input_path}: {exc.strerror or exc}", ExitCode.USAGE)
    registry = asyncio.run(_score_traces(settings, traces, output, evaluator))
    summary = RunSummary.from_registry(registry, judge_active=evaluator != "heuristic")
    head = f"scored {summary.evaluated(evaluator)} traces ({rejected} rejected lines)"
    print(summary.render(head))
    return ExitCode.OK


async def _score_traces(
    settings: Settings, traces: list[Trace], output: Path, evaluator: str
) -> CollectorRegistry:
    """Score every trace into `output` (the results of every evaluator that ran); returns the
    run's metrics registry (for the summary)."""
    from contextlib import AsyncExitStack

    from monitor.daemon import build_scoring_stage
    from monitor.models import EvaluationResult
    from monitor.sinks.metrics import Metrics

    if evaluator in ("llm", "ragas"):
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"backend": evaluator})}
        )
    if evaluator == "heuristic":
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"enabled": False, "base_url": None})}
        )
    metrics = Metrics()
    async with AsyncExitStack() as stack:
        stage = await build_scoring_stage(
            settings, metrics, stack, None, judge_everything=evaluator != "heuristic"
        )
        processor = stage.processor
        with output.open("w", encoding="utf-8") as out:

            async def write(trace: Trace, result: EvaluationResult) -> None:
                out.write(result.model_dump_json() + "\n")

            processor.observers.append(write)
            for trace in sorted(traces, key=lambda t: (t.conversation_id or "", t.turn or 0)):
                await processor.process(trace)
    return metrics.registry
