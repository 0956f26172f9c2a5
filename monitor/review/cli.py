"""``rag-monitor review``: the worst recent answers in a terminal, or as JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.command import ExitCode, Subparsers, set_handler, settings_or_exit
from monitor.review import options
from monitor.windows import TIME_HELP, check_time

if TYPE_CHECKING:
    from monitor.config import Settings


def register(subparsers: Subparsers) -> None:
    """Add the `review` command to the `rag-monitor` subparsers."""
    review = subparsers.add_parser(
        "review",
        help="the worst recent answers: question, answer, unsupported claims, constraints",
    )
    review.add_argument(
        "--since",
        default=options.DEFAULT_SINCE,
        help="1h (default), 90m, 7d or ISO time; counted from when answers were scored"
        " (see --time)",
    )
    review.add_argument(
        "--time", choices=options.TIMES, default=options.DEFAULT_TIME, help=TIME_HELP
    )
    review.add_argument(
        "--no-group",
        dest="group",
        action="store_false",
        help="list near-identical answers one by one instead of once with a count",
    )
    review.add_argument("--agent", help="only this agent (default: all)")
    review.add_argument(
        "--metric",
        default=options.DEFAULT_METRIC,
        choices=options.METRICS,
        help=f"ranked by (default {options.DEFAULT_METRIC})",
    )
    review.add_argument(
        "--worst", type=_worst_count, default=options.DEFAULT_WORST, help="how many (default 20)"
    )
    review.add_argument("--json", action="store_true", help="print JSON instead of a listing")
    review.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(review, handle)


def _worst_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= options.MAX_WORST:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {options.MAX_WORST}")
    return int(text)


def handle(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from monitor.logs import configure_logging

    settings = settings_or_exit(args.config)
    configure_logging(settings.log.format, "warning")  # logs on stderr: --json stays clean
    return asyncio.run(run_cli(args, settings))


async def run_cli(args: argparse.Namespace, settings: Settings) -> ExitCode:
    """Print the worst answers; 0, or 2 (usage) or 3 (store unreadable).

    The caller configures logging first (``configure_logging(settings.log.format, "warning")``,
    as :func:`handle` does), so that the store's start-up log stays quiet.
    """
    from monitor.review import items
    from monitor.review.queries import review_for
    from monitor.review.render import render_json, render_text
    from monitor.sinks.store import Store, sanitized_url
    from monitor.sinks.store_location import (
        NO_STORE_HINT,
        describe_store,
        missing_store,
        scrubbed_error,
    )
    from monitor.windows import parse_since

    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"rag-monitor: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    time = check_time(args.time)
    query = items.ReviewQuery(since, args.metric, args.agent, args.worst, time, args.group)
    url = settings.store.url.get_secret_value()
    shown = describe_store(url, sanitized_url(url))
    if missing_store(url) is not None:
        print(f"rag-monitor: no results store at {shown}; {NO_STORE_HINT}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    try:
        store = await Store.open(url)
    except Exception as exc:
        print(
            f"rag-monitor: cannot open the results store {sanitized_url(url)}: "
            f"{scrubbed_error(exc, url)}",
            file=sys.stderr,
        )
        return ExitCode.UNAVAILABLE
    try:
        review = await review_for(store, query, items.review_redactor(settings))
    except Exception as exc:
        print(
            f"rag-monitor: cannot read the results store: {scrubbed_error(exc, url)}",
            file=sys.stderr,
        )
        return ExitCode.UNAVAILABLE
    finally:
        await store.close()
    if args.json:
        print(render_json(review.worst, query, review))
    else:
        text = render_text([], since=since, agent=args.agent, time=time, review=review)
        print(text, end="" if text.endswith("\n") else "\n")
        print(f"results store: {shown}")
    return ExitCode.OK
