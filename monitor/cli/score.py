"""`rag-monitor score`: score a JSONL file of traces offline, then print a summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.command import ExitCode, Subparsers, fail, set_handler, settings_or_exit

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from monitor.config import Settings
    from monitor.models import Trace
    from monitor.offline import FileInput


def register(subparsers: Subparsers) -> None:
    score = subparsers.add_parser(
        "score", help="score a JSONL file of traces offline (native or OTLP/JSON, as `run` reads)"
    )
    score.add_argument(
        "--input",
        required=True,
        help="traces, one JSON object a line: native traces or OTLP/JSON span and log exports,"
        " as `run --source file:` reads them; - = stdin",
    )
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
    import asyncio

    from monitor.logs import configure_logging
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
        found = read_traces(input_path, sys.stderr, otlp=settings.kafka.format != "native")
    except OSError as exc:
        return fail(f"--input {input_path}: {exc.strerror or exc}", ExitCode.USAGE)
    registry, rejected = asyncio.run(_score_traces(settings, found, output, evaluator))
    summary = RunSummary.from_registry(registry, judge_active=evaluator != "heuristic")
    head = f"scored {summary.evaluated(evaluator)} traces ({rejected} rejected lines)"
    print(summary.render(head))
    return ExitCode.OK


async def _score_traces(
    settings: Settings, found: FileInput, output: Path, evaluator: str
) -> tuple[CollectorRegistry, int]:
    """Score every trace into `output` (the results of every evaluator that ran), OTLP lines
    assembled first; returns the run's metrics registry (for the summary) and how many lines
    were rejected."""
    from contextlib import AsyncExitStack

    from monitor.daemon import build_scoring_stage
    from monitor.metrics import Metrics
    from monitor.models import EvaluationResult
    from monitor.offline_otlp import assemble_lines
    from monitor.stages.conversation import turn_order_key

    if evaluator in ("llm", "ragas"):
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"backend": evaluator})}
        )
    if evaluator == "heuristic":
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"enabled": False, "base_url": None})}
        )
    metrics = Metrics()
    traces, rejected = list(found.traces), found.rejected
    if found.otlp:
        assembled, bad_lines = await assemble_lines(found.otlp, settings, metrics, sys.stderr)
        traces += assembled
        rejected += bad_lines
    async with AsyncExitStack() as stack:
        stage = await build_scoring_stage(
            settings, metrics, stack, None, judge_everything=evaluator != "heuristic"
        )
        processor = stage.processor
        with output.open("w", encoding="utf-8") as out:

            async def write(trace: Trace, result: EvaluationResult) -> None:
                out.write(result.model_dump_json() + "\n")

            processor.observers.append(write)
            for trace in sorted(traces, key=lambda t: (t.conversation_id or "", turn_order_key(t))):
                await processor.process(trace)
    return metrics.registry, rejected
