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
    from monitor.sinks.store import Store, turns_since

    baseline: str | None = args.baseline
    settings = settings_or_exit(args.config)
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        return fail(str(exc), ExitCode.USAGE)

    async def load() -> list[dict[str, object]]:
        store = await Store.open(settings.store.url.get_secret_value())
        try:
            return await turns_since(store, since)
        finally:
            await store.close()

    configure_logging(settings.log.format, "warning")
    summaries = summarize_agents(records_from_rows(asyncio.run(load())))
    if baseline is not None and baseline not in summaries:
        return fail(f"no turns of baseline agent {baseline!r} since {since}", ExitCode.USAGE)
    report = compare(summaries, baseline)
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.json else render_table(report))
    return ExitCode.OK
