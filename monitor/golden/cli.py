"""``rag-monitor golden ...``: score TREC runs, run suites, check annotator agreement.

Registered in the main CLI (:mod:`monitor.cli`) by :func:`register`; its handler is
:func:`dispatch`::

    golden score --qrels FILE --run FILE [--k 5,10] [--gain exponential|linear]
                 [--tie-break trec_eval|stable] [--relevance-threshold N]
                 [--missing-queries zero|skip] [--trec-eval] [--per-query] [--json]
    golden run SUITE [--config FILE] [--report PATH] [--no-progress]
    golden agreement A B [--weighted] [--json]
    golden validate FILE [--kind retrieval|generation]   (kind told from the file if omitted)

Exit codes (:class:`~monitor.command.ExitCode`): 0 success (``run``: every target of the
gated modes met); 1 ``run``: a target missed (or unmeasured); 2 bad configuration, bad data
file or bad arguments; 3 ``run``: the run could not complete (service unreachable, more failed
queries than ``max_query_failures``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from monitor.command import ExitCode, RawDescriptionHelpFormatter, Subparsers, set_handler

if TYPE_CHECKING:  # each command imports what it needs when it runs (monitor.cli's rule)
    from monitor.golden.answers import AnswerJudge
    from monitor.golden.dataset import SuiteKind
    from monitor.golden.results import RunResult
    from monitor.golden.trec import TieBreak

PROG = "rag-monitor golden"

SCORE_EPILOG = """\
conventions (monitor/golden/ranking.py and trec.py document them in full):
  relevant    judged with grade >= --relevance-threshold (default 2: "highly
              relevant" and above; trec_eval's default is 1, trec_eval -l2 is 2). Negative
              grades and unjudged documents are never relevant. Applies to recip_rank, P,
              recall and success, not to nDCG.
  gain        nDCG gain 2^grade - 1 (exponential, default) or grade (linear:
              trec_eval's ndcg and ndcg_cut, JQaRA); discount 1/log2(rank + 1); the ideal DCG
              comes from every judged document of the query, cut at the same K.
  tie-break   trec_eval (default): documents by score descending, equal scores by document
              id descending in byte order; the rank column is ignored -- as trec_eval does.
              stable: the order of the lines in the run file (systems that store their order).
  missing     a judged query absent from the run scores 0 on every measure (zero, default:
              trec_eval -c, so a system cannot hide a query) or is left out (skip: trec_eval's
              default). Queries only in the run are ignored.
  precision   P_K divides by K even when fewer than K documents were returned.

measures (trec_eval's names): recip_rank (MRR over everything returned), ndcg (uncut), and per
K: recip_rank_cut_K (MRR@K), P_K, recall_K, success_K, ndcg_cut_K; then num_q.

reproducing trec_eval: --trec-eval, which is --gain linear --tie-break trec_eval
--relevance-threshold 1 --missing-queries skip (explicit options override it). When every
judged query is in the run, --gain linear --tie-break trec_eval --relevance-threshold 1 gives
trec_eval's figures too (checked to 1e-4 against trec_eval's own test outputs and JQaRA).
"""

RUN_EPILOG = """\
The suite comes from the `golden.suites` section of the configuration (--config, environment
RAGMON_GOLDEN__...). A relative dataset path is taken from the config file's directory (the
working directory without --config).
The report goes to --report PATH (markdown) with the JSON result beside it (PATH with suffix
.json); without --report, to the suite's or golden.report_dir (<dir>/<suite>/<time>.md), else
the markdown is printed.
Generation suites: when the `judge` section is active (judge.enabled or judge.base_url) and
golden.judge_answers is true, each answer is scored by the judge (faithfulness, answer and
context relevancy; with a reference also answer correctness, semantic similarity, context
recall); --no-judge leaves those unmeasured.

exit codes: 0 every target of the gated modes met; 1 a target missed or unmeasured;
2 bad configuration or dataset; 3 the run could not complete (service unreachable, too many
failed queries).
"""

AGREEMENT_EPILOG = """\
Label files: TREC qrels (qid iteration docid grade), JSONL of {"query_id", "doc_id", "grade"},
or a retrieval suite (.yaml: its expected_docs grades). Items are (query, document) pairs
labelled in both files; the others are counted and left out.

Cohen's kappa treats grades as categories; --weighted adds quadratic weighted kappa, which
counts a 0-vs-3 disagreement nine times a 0-vs-1 one (for graded labels). Interpretation after
Landis & Koch: <0 poor, 0-0.20 slight, 0.21-0.40 fair, 0.41-0.60 moderate, 0.61-0.80
substantial, 0.81-1 almost perfect. Definitions: docs/metrics.md#comparisons.
"""


# --------------------------------------------------------------------------- parser


def _cutoffs(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(k < 1 for k in values):
        raise argparse.ArgumentTypeError(f"cutoffs must be positive integers, got {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"cutoffs repeat a value: {text!r}")
    return values


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def register(subparsers: Subparsers) -> None:
    """Add the ``golden`` command group to the main CLI's ``add_subparsers()`` object."""
    golden: argparse.ArgumentParser = subparsers.add_parser(
        "golden",
        help="golden-set evaluation: score TREC runs, run suites, annotator agreement",
        description="Golden-set evaluation of retrieval and answers"
        " (definitions: docs/metrics.md).",
    )
    set_handler(golden, dispatch)
    sub = golden.add_subparsers(dest="golden_command", required=True, metavar="COMMAND")

    score = sub.add_parser(
        "score",
        help="ranking measures of a TREC run against TREC qrels",
        description="Compute MRR, nDCG, precision, recall and success from TREC files.",
        epilog=SCORE_EPILOG,
        formatter_class=RawDescriptionHelpFormatter,
    )
    score.add_argument("--qrels", type=Path, required=True, help="TREC qrels file")
    score.add_argument("--run", type=Path, required=True, help="TREC run file")
    score.add_argument(
        "--k", type=_cutoffs, default=None, metavar="K,K,...", help="cutoffs (default 5,10,30)"
    )
    score.add_argument(
        "--gain",
        choices=["exponential", "linear"],
        default=None,
        help="nDCG gain (default exponential; linear with --trec-eval)",
    )
    score.add_argument(
        "--tie-break",
        choices=["trec_eval", "stable"],
        default=None,
        help="order of equal scores (default trec_eval)",
    )
    score.add_argument(
        "--relevance-threshold",
        type=_non_negative,
        default=None,
        metavar="N",
        help="lowest grade that counts as relevant (default 2; 1 with --trec-eval)",
    )
    score.add_argument(
        "--missing-queries",
        choices=["zero", "skip"],
        default=None,
        help="a judged query the run lacks (default zero; skip with --trec-eval)",
    )
    score.add_argument(
        "--trec-eval", action="store_true", help="trec_eval's conventions (see below)"
    )
    score.add_argument(
        "--per-query", "-q", action="store_true", help="per-query values too (trec_eval -q)"
    )
    score.add_argument("--json", action="store_true", help="print JSON")

    run = sub.add_parser(
        "run",
        help="run a configured suite against the live service and report",
        description="Run a golden-set suite once (a Kubernetes CronJob or a CI gate).",
        epilog=RUN_EPILOG,
        formatter_class=RawDescriptionHelpFormatter,
    )
    run.add_argument("suite", help="suite name (golden.suites[].name)")
    run.add_argument("--config", type=Path, help="YAML configuration file")
    run.add_argument("--report", type=Path, help="markdown report path (JSON beside it)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--no-judge", action="store_true", help="do not call the judge for answer metrics"
    )

    agreement = sub.add_parser(
        "agreement",
        help="Cohen's kappa between two annotators' label files",
        description="Inter-annotator agreement on a golden set (Cohen's kappa).",
        epilog=AGREEMENT_EPILOG,
        formatter_class=RawDescriptionHelpFormatter,
    )
    agreement.add_argument("a", type=Path, help="first annotator's labels")
    agreement.add_argument("b", type=Path, help="second annotator's labels")
    agreement.add_argument(
        "--weighted", action="store_true", help="also quadratic weighted kappa (graded labels)"
    )
    agreement.add_argument("--json", action="store_true", help="print JSON")

    validate = sub.add_parser(
        "validate",
        help="check a golden-set file (errors name file, line and field)",
        description="Load a retrieval or generation suite and report the first problem.",
    )
    validate.add_argument("file", type=Path, help="the suite's YAML or JSONL file")
    validate.add_argument(
        "--kind",
        choices=["retrieval", "generation"],
        help="the suite's kind (default: told from the file's fields)",
    )


# --------------------------------------------------------------------------- score


def score_conventions(args: argparse.Namespace) -> dict[str, Any]:
    """The effective conventions of ``golden score``: explicit options, then the preset."""
    preset: dict[str, Any] = (
        {"gain": "linear", "tie_break": "trec_eval", "relevance_threshold": 1,
         "missing_queries": "skip"}
        if args.trec_eval
        else {"gain": "exponential", "tie_break": "trec_eval", "relevance_threshold": 2,
              "missing_queries": "zero"}
    )  # fmt: skip
    for name in preset:
        value = getattr(args, name)
        if value is not None:
            preset[name] = value
    preset["cutoffs"] = list(args.k) if args.k is not None else [5, 10, 30]
    return preset


def _score(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from monitor.golden import ranking
    from monitor.golden.trec import load_qrels, load_run

    conv = score_conventions(args)
    tie_break: TieBreak = conv["tie_break"]
    qrels = load_qrels(args.qrels)
    run = load_run(args.run, tie_break=tie_break)
    per_query = ranking.evaluate_run(
        run,
        qrels,
        cutoffs=conv["cutoffs"],
        relevance_threshold=conv["relevance_threshold"],
        gain=conv["gain"],
        missing_queries=conv["missing_queries"],
    )
    if not per_query:
        print(
            f"{PROG} score: no queries with both results and relevance judgments", file=sys.stderr
        )
        return ExitCode.USAGE
    summary = ranking.mean_over_queries(per_query)
    names = ranking.metric_names(conv["cutoffs"])
    if args.json:
        document: dict[str, Any] = {
            "qrels": str(args.qrels),
            "run": str(args.run),
            "conventions": conv,
            "num_q": summary.num_q,
            "all": {name: summary.means[name] for name in names},
            "coverage": ranking.result_coverage(run, list(per_query)),
        }
        if args.per_query:
            document["per_query"] = per_query
        out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        return ExitCode.OK
    if args.per_query:
        for qid, values in per_query.items():
            for name in names:
                out.write(f"{name:<22}\t{qid}\t{values[name]:.4f}\n")
    out.write(f"{'num_q':<22}\tall\t{summary.num_q}\n")
    for name in names:
        out.write(f"{name:<22}\tall\t{summary.means[name]:.4f}\n")
    return ExitCode.OK


# --------------------------------------------------------------------------- run


def _summary_line(result: RunResult) -> str:
    text = f"golden suite {result.suite}: {result.outcome.upper()}"
    missed = result.failed_targets() if result.outcome == "failed" else []
    if missed:
        text += " -- missed: " + ", ".join(
            f"{mode} {check.metric}="
            + ("unmeasured" if check.value is None else f"{check.value:.3g}")
            + f" ({'<=' if check.direction == 'max' else '>='} {check.target:g})"
            for mode, check in missed
        )
    if result.error:
        text += f" -- error: {result.error}"
    return text


def _run(args: argparse.Namespace, judge: AnswerJudge | None, out: TextIO) -> ExitCode:
    import asyncio

    from monitor.config import ConfigError, load_settings
    from monitor.golden.judges import open_answer_judge
    from monitor.golden.report import render_markdown, write_report
    from monitor.golden.runner import run_suite
    from monitor.golden.schedule import report_path
    from monitor.logs import configure_logging

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"{PROG} run: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    configure_logging(settings.log.format, settings.log.level)
    golden = settings.golden
    try:
        suite = golden.suite(args.suite)
    except KeyError as exc:
        print(f"{PROG} run: {exc.args[0]}", file=sys.stderr)
        return ExitCode.USAGE
    base_dir = args.config.resolve().parent if args.config is not None else None
    use_configured_judge = judge is None and not args.no_judge and golden.judge_answers
    judge_config = settings.judge if use_configured_judge else None

    async def run_once() -> RunResult:
        async with open_answer_judge(judge_config) as configured:
            return await run_suite(
                suite,
                judge=judge or configured,
                base_dir=base_dir,
                progress=False if args.no_progress else None,
            )

    result = asyncio.run(run_once())
    target: Path | None = args.report
    if target is None:
        directory = suite.report_dir or golden.report_dir
        if directory is not None:
            if not directory.is_absolute() and base_dir is not None:
                directory = base_dir / directory
            target = report_path(directory, result)
    if target is None:
        out.write(render_markdown(result))
        print(_summary_line(result), file=sys.stderr)
    else:
        md_path, json_path = write_report(result, target)
        out.write(f"{_summary_line(result)}\nreport: {md_path}\nresult: {json_path}\n")
    if result.outcome == "passed":
        return ExitCode.OK
    if result.outcome == "failed":
        return ExitCode.TARGET_MISSED
    return ExitCode.UNAVAILABLE


# --------------------------------------------------------------------------- agreement


def landis_koch(kappa: float) -> str:
    """Landis & Koch (1977) name of an agreement level."""
    if kappa < 0:
        return "poor"
    for upper, name in (
        (0.20, "slight"),
        (0.40, "fair"),
        (0.60, "moderate"),
        (0.80, "substantial"),
    ):
        if kappa <= upper:
            return name
    return "almost perfect"


def agreement_report(
    labels_a: dict[tuple[str, str], int],
    labels_b: dict[tuple[str, str], int],
    *,
    weighted: bool,
) -> dict[str, Any]:
    """Kappa(s), counts and the confusion of two label sets, paired on (query, doc)."""
    from monitor.golden import stats

    common = [key for key in labels_a if key in labels_b]
    a = [labels_a[key] for key in common]
    b = [labels_b[key] for key in common]
    unweighted = stats.cohens_kappa(a, b)
    report: dict[str, Any] = {
        "items": len(common),
        "only_in_a": sum(1 for key in labels_a if key not in labels_b),
        "only_in_b": sum(1 for key in labels_b if key not in labels_a),
        "observed_agreement": unweighted.observed,
        "kappa": unweighted.kappa,
        "kappa_reason": unweighted.reason,
        "interpretation": landis_koch(unweighted.kappa) if unweighted.kappa is not None else None,
    }
    if weighted:
        quadratic = stats.quadratic_weighted_kappa(a, b)
        report["weighted_kappa"] = quadratic.kappa
        report["weighted_kappa_reason"] = quadratic.reason
        report["weighted_interpretation"] = (
            landis_koch(quadratic.kappa) if quadratic.kappa is not None else None
        )
    grades = sorted({*a, *b})
    pairs = Counter(zip(a, b, strict=True))
    report["grades"] = grades
    report["confusion"] = [[pairs.get((ga, gb), 0) for gb in grades] for ga in grades]
    return report


def _fmt_kappa(value: float | None, reason: str | None, name: str | None) -> str:
    if value is None:
        return f"undefined ({reason})"
    return f"{value:.4f} ({name})"


def _agreement(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from monitor.golden.dataset import load_labels

    labels_a = load_labels(args.a)
    labels_b = load_labels(args.b)
    report = agreement_report(labels_a, labels_b, weighted=args.weighted)
    if report["items"] == 0:
        print(
            f"{PROG} agreement: no (query, document) pair is labelled in both files",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.json:
        out.write(json.dumps({"a": str(args.a), "b": str(args.b), **report}, indent=2) + "\n")
        return ExitCode.OK
    out.write(
        f"items labelled by both: {report['items']} "
        f"(only in A: {report['only_in_a']}, only in B: {report['only_in_b']})\n"
    )
    if report["observed_agreement"] is not None:
        out.write(f"observed agreement:     {report['observed_agreement']:.4f}\n")
    out.write(
        "Cohen's kappa:          "
        + _fmt_kappa(report["kappa"], report["kappa_reason"], report["interpretation"])
        + "\n"
    )
    if args.weighted:
        out.write(
            "quadratic weighted kappa: "
            + _fmt_kappa(
                report["weighted_kappa"],
                report["weighted_kappa_reason"],
                report["weighted_interpretation"],
            )
            + "\n"
        )
    grades: list[int] = report["grades"]
    out.write("\nconfusion (rows A, columns B):\n")
    out.write("      " + "".join(f"{g:>6}" for g in grades) + "\n")
    for grade, row in zip(grades, report["confusion"], strict=True):
        out.write(f"{grade:>6}" + "".join(f"{count:>6}" for count in row) + "\n")
    return ExitCode.OK


# --------------------------------------------------------------------------- validate


def _validate(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from monitor.golden.dataset import GenerationSuite, RetrievalSuite, detect_kind, load_suite

    kind: SuiteKind = args.kind or detect_kind(args.file)
    suite = load_suite(args.file, kind)
    categories = Counter(
        q.category or "(none)"
        for q in (suite.queries if isinstance(suite, RetrievalSuite | GenerationSuite) else [])
    )
    text = ", ".join(f"{label} {count}" for label, count in categories.items())
    out.write(f"{args.file}: ok, {len(suite.queries)} {kind} queries ({text})\n")
    return ExitCode.OK


# --------------------------------------------------------------------------- dispatch


def dispatch(
    args: argparse.Namespace,
    *,
    judge: AnswerJudge | None = None,
    out: TextIO | None = None,
) -> ExitCode:
    """Run the ``golden`` subcommand in ``args``; returns the exit code.

    ``judge`` is the answer judge for generation suites (default: the configured ``judge``
    section's, when ``golden.judge_answers``); ``out`` the stream reports go to (stdout).
    """
    from monitor.golden.trec import GoldenDataError

    stream = out if out is not None else sys.stdout
    command: str = args.golden_command
    try:
        if command == "score":
            return _score(args, stream)
        if command == "run":
            return _run(args, judge, stream)
        if command == "agreement":
            return _agreement(args, stream)
        if command == "validate":
            return _validate(args, stream)
    except GoldenDataError as exc:
        print(f"{PROG} {command}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    raise AssertionError(f"unknown golden command {command!r}")


__all__ = [
    "agreement_report",
    "dispatch",
    "landis_koch",
    "register",
    "score_conventions",
]
