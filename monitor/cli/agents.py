"""`rag-monitor agents`: compare agents' multi-turn quality from the results store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from monitor.command import ExitCode, Subparsers, fail, set_handler, settings_or_exit


def register(subparsers: Subparsers) -> None:
    agents = subparsers.add_parser(
        "agents", help="compare agents' multi-turn quality (H_u, D_r, memory)"
    )
    agents.add_argument("--since", default="24h", help="24h, 90m, 7d or an ISO time")
    agents.add_argument("--baseline", help="agent the others are tested against")
    agents.add_argument("--json", action="store_true", help="print JSON instead of a table")
    agents.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(agents, handle)


def handle(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from monitor.agents_report import compare, parse_since, records_from_rows, render_table
    from monitor.evaluators.multiturn import summarize_agents
    from monitor.logs import configure_logging
    from monitor.sinks.store import Store, sanitized_url, turns_since
    from monitor.sinks.store_location import NO_STORE_HINT, describe_store, missing_store

    baseline: str | None = args.baseline
    settings = settings_or_exit(args.config)
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        return fail(str(exc), ExitCode.USAGE)

    url = settings.store.url.get_secret_value()
    shown = describe_store(url, sanitized_url(url))
    if missing_store(url) is not None:
        return fail(f"no results store at {shown}; {NO_STORE_HINT}", ExitCode.UNAVAILABLE)

    async def load() -> list[dict[str, object]]:
        store = await Store.open(url)
        try:
            return await turns_since(store, since)
        finally:
            await store.close()

    configure_logging(settings.log.format, "warning")
    summaries = summarize_agents(records_from_rows(asyncio.run(load())))
    if baseline is not None and baseline not in summaries:
        return fail(f"no turns of baseline agent {baseline!r} since {since}", ExitCode.USAGE)
    report = compare(summaries, baseline)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(render_table(report))
        print(f"results store: {shown}")
    return ExitCode.OK
