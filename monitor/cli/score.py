"""`rag-monitor score`: score a JSONL file of traces offline, then print a summary.

With a judge (``--evaluator llm|ragas``) every trace was asked for: nothing is shed for load,
the judge waits for a slow server (its concurrency adapts, its deadlines follow each request's
size) and for an open circuit's next probe, progress goes to stderr, and the command exits 3
with a one-line reason and counts when traces end unjudged.
"""

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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


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
    score.add_argument(
        "--max-concurrency",
        type=_positive_int,
        metavar="N",
        help="at most N judge requests at once (judge.max_concurrency; the judge finds how many"
        " the server serves well, up to this)",
    )
    score.add_argument(
        "--timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="a fixed time limit for every judge request (judge.timeout_seconds); by default"
        " each request's deadline follows its size and the server's observed speed",
    )
    score.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(score, handle)


def with_judge_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """`settings` with ``--max-concurrency`` and ``--timeout`` applied to the judge."""
    update: dict[str, object] = {}
    if args.max_concurrency is not None:
        update["max_concurrency"] = args.max_concurrency
    if args.timeout is not None:
        update["timeout_seconds"] = args.timeout
    if not update:
        return settings
    return settings.model_copy(update={"judge": settings.judge.model_copy(update=update)})


def handle(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from monitor.logs import configure_logging
    from monitor.offline import InputError, RunSummary, check_paths, read_traces

    input_path: str = args.input
    output: Path = args.output
    evaluator: str = args.evaluator
    settings = with_judge_flags(settings_or_exit(args.config), args)
    try:
        check_paths(input_path, output)
    except InputError as exc:
        return fail(str(exc), ExitCode.USAGE)
    judged = evaluator in ("llm", "ragas")
    if judged and not settings.judge.active:
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
    registry, rejected, total = asyncio.run(_score_traces(settings, found, output, evaluator))
    summary = RunSummary.from_registry(registry, judge_active=judged)
    head = f"scored {summary.evaluated(evaluator)} traces ({rejected} rejected lines)"
    print(summary.render(head))
    if judged:
        unjudged, reasons = summary.unjudged()
        if unjudged:
            return fail(
                f"{unjudged} of {total} traces were not judged ({reasons}); their"
                f" {evaluator} results are unmeasured or missing in {output}",
                ExitCode.UNAVAILABLE,
            )
    return ExitCode.OK


async def _score_traces(
    settings: Settings, found: FileInput, output: Path, evaluator: str
) -> tuple[CollectorRegistry, int, int]:
    """Score every trace into `output` (the results of every evaluator that ran), OTLP lines
    assembled first; returns the run's metrics registry (for the summary), how many lines were
    rejected and how many traces there were. With a judge, up to ``judge.max_concurrency``
    traces are in flight (a conversation's turns still one after another, in order)."""
    import asyncio
    from contextlib import AsyncExitStack

    from monitor.daemon import build_scoring_stage
    from monitor.evaluators.llm import LLMJudge
    from monitor.metrics import Metrics
    from monitor.models import EvaluationResult
    from monitor.offline_otlp import assemble_lines
    from monitor.progress import Progress
    from monitor.stages.conversation_state import turn_order_key

    judged = evaluator in ("llm", "ragas")
    if judged:
        settings = settings.model_copy(
            update={"judge": settings.judge.model_copy(update={"backend": evaluator})}
        )
    else:
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
        stage = await build_scoring_stage(settings, metrics, stack, None, judge_everything=judged)
        processor = stage.processor
        judge = stage.judge

        def concurrency() -> str:
            assert isinstance(judge, LLMJudge)
            return f"judge concurrency {judge.client.concurrency_limit.limit}"

        progress = Progress(
            len(traces), sys.stderr, detail=concurrency if isinstance(judge, LLMJudge) else None
        )
        with output.open("w", encoding="utf-8") as out:

            async def write(trace: Trace, result: EvaluationResult) -> None:
                out.write(result.model_dump_json() + "\n")

            processor.observers.append(write)
            room = asyncio.Semaphore(settings.judge.max_concurrency if judged else 1)

            async def score(trace: Trace) -> None:
                try:
                    await processor.process(trace)
                finally:
                    room.release()
                    progress.advance()

            reporter = asyncio.create_task(progress.report())
            try:
                async with asyncio.TaskGroup() as group:
                    # tasks start in this order, so a conversation's turns queue in order
                    for trace in sorted(
                        traces, key=lambda t: (t.conversation_id or "", turn_order_key(t))
                    ):
                        await room.acquire()
                        group.create_task(score(trace))
            finally:
                reporter.cancel()
                progress.finish()
    return metrics.registry, rejected, len(traces)
