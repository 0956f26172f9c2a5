"""`rag-monitor topics create`: create every Kafka topic the configuration needs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.command import ExitCode, Subparsers, fail, set_handler, settings_or_exit

if TYPE_CHECKING:
    from monitor.sources.topic_admin import TopicOutcome


def register(subparsers: Subparsers) -> None:
    topics = subparsers.add_parser("topics", help="the Kafka topics the configuration needs")
    commands = topics.add_subparsers(dest="topics_command", required=True)
    create = commands.add_parser(
        "create",
        help="create every topic the configuration needs (existing ones are left as they are)",
    )
    create.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(create, create_needed)


def create_needed(args: argparse.Namespace) -> ExitCode:
    import asyncio

    from aiokafka.errors import KafkaError

    from monitor.sources.topic_admin import create_topics, needed_topics

    settings = settings_or_exit(args.config)
    try:
        outcomes = asyncio.run(create_topics(settings, needed_topics(settings)))
    except (KafkaError, OSError) as exc:
        return fail(f"cannot reach Kafka: {type(exc).__name__}: {exc}", ExitCode.UNAVAILABLE)
    for outcome in outcomes:
        print(_line(outcome))
    failed = any(o.error or o.partitions is None for o in outcomes)
    return ExitCode.UNAVAILABLE if failed else ExitCode.OK


def _line(outcome: TopicOutcome) -> str:
    spec = outcome.spec
    if outcome.error or outcome.partitions is None:
        return f"failed   {spec.name}  ({spec.setting}): {outcome.error or 'not visible'}"
    state = "created" if outcome.created else "exists "
    retention = spec.configs.get("retention.ms")
    kept = f", retention {_duration(int(retention))}" if retention and outcome.created else ""
    return (
        f"{state}  {spec.name}  {outcome.partitions} partitions{kept}"
        f"  ({spec.setting}: {spec.purpose})"
    )


def _duration(ms: int) -> str:
    if ms < 0:
        return "unlimited"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"
