"""`rag-monitor agents`: compare agents' multi-turn quality from the results store."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.command import ExitCode, Subparsers, fail, set_handler, settings_or_exit
from monitor.windows import DEFAULT_TIME, TIME_HELP, TIMES, TimeBasis, check_time

DEFAULT_SINCE = "24h"


def register(subparsers: Subparsers) -> None:
    agents = subparsers.add_parser(
        "agents", help="compare agents' multi-turn quality (H_u, D_r, memory)"
    )
    agents.add_argument(
        "--since",
        default=DEFAULT_SINCE,
        help=f"{DEFAULT_SINCE} (default), 90m, 7d or an ISO time; counted from when the turns"
        " were scored (see --time)",
    )
    agents.add_argument("--time", choices=TIMES, default=DEFAULT_TIME, help=TIME_HELP)
    agents.add_argument("--baseline", help="agent the others are tested against")
    agents.add_argument("--json", action="store_true", help="print JSON instead of a table")
    agents.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(agents, handle)


def handle(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from monitor.agents_report import compare, records_from_rows, render_table
    from monitor.evaluators.multiturn import summarize_agents
    from monitor.logs import configure_logging
    from monitor.sinks.store import Store, sanitized_url
    from monitor.sinks.store_location import NO_STORE_HINT, describe_store, missing_store
    from monitor.sinks.turns import turn_extent, turns_since
    from monitor.windows import empty_window_hint, other_time, parse_since

    baseline: str | None = args.baseline
    settings = settings_or_exit(args.config)
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        return fail(str(exc), ExitCode.USAGE)
    time: TimeBasis = check_time(args.time)

    url = settings.store.url.get_secret_value()
    shown = describe_store(url, sanitized_url(url))
    if missing_store(url) is not None:
        return fail(f"no results store at {shown}; {NO_STORE_HINT}", ExitCode.UNAVAILABLE)

    async def load() -> tuple[list[dict[str, Any]], str | None]:
        store = await Store.open(url)
        try:
            rows = await turns_since(store, since, counted_from=time)
            if rows:
                return rows, None
            other, _ = await turn_extent(store, since, counted_from=other_time(time))
            _, latest = await turn_extent(store, since, counted_from=time)
            return rows, empty_window_hint("conversation turns", time, other, latest)
        finally:
            await store.close()

    configure_logging(settings.log.format, "warning")
    rows, hint = asyncio.run(load())
    summaries = summarize_agents(records_from_rows(rows))
    if hint is not None:
        counted = "scored" if time == "scored" else "with trace time"
        empty = f"No conversation turns {counted} since {_utc(since)}. {hint}"
        if not args.json:
            print(empty)
            return ExitCode.OK
        print(empty, file=sys.stderr)  # stdout stays the JSON document
    elif baseline is not None and baseline not in summaries:
        return fail(f"no turns of baseline agent {baseline!r} since {since}", ExitCode.USAGE)
    report = compare(summaries, baseline if baseline in summaries else None)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(render_table(report))
        print(f"results store: {shown}")
    return ExitCode.OK


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
