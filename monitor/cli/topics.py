"""`rag-monitor topics create`: create every Kafka topic the configuration needs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.command import ExitCode, Subparsers, fail, set_handler, settings_or_exit

if TYPE_CHECKING:
    from monitor.sinks.topic_admin import TopicOutcome


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

    from monitor.sinks.topic_admin import create_topics, needed_topics
    from monitor.sources.kafka_errors import bootstrap_failures

    settings = settings_or_exit(args.config)
    try:
        with bootstrap_failures(quiet=True) as failures:
            outcomes = asyncio.run(create_topics(settings, needed_topics(settings)))
    except (KafkaError, OSError) as exc:
        where = failures.describe(exc, settings.kafka.bootstrap_servers)
        return fail(
            f"cannot reach Kafka at {where}; check kafka.bootstrap_servers"
            " (RAGMON_KAFKA__BOOTSTRAP_SERVERS) and the kafka.security settings",
            ExitCode.UNAVAILABLE,
        )
    for outcome in outcomes:
        print(_line(outcome))
    differing = [o for o in outcomes if o.differences]
    if differing:
        print(
            f"{len(differing)} of {len(outcomes)} topics differ from the configuration"
            " (topics create never changes a topic that exists)"
        )
    if any(o.partitions is not None and o.retention_ms is None for o in outcomes):
        print("retention: not checked (the broker does not answer DescribeConfigs)")
    failed = any(o.error or o.partitions is None for o in outcomes)
    return ExitCode.UNAVAILABLE if failed else ExitCode.OK


def _line(outcome: TopicOutcome) -> str:
    """One topic as the broker reports it, then how it differs from the configuration."""
    spec = outcome.spec
    if outcome.error or outcome.partitions is None:
        return f"failed   {spec.name}  ({spec.setting}): {outcome.error or 'not visible'}"
    state = "created" if outcome.created else "exists "
    found = _partitions(outcome.partitions)
    if outcome.retention_ms is not None:
        found += f", retention {_duration(int(outcome.retention_ms))}"
    if outcome.differences:
        found += "; configured: " + ", ".join(outcome.differences)
    return f"{state}  {spec.name}  {found}  ({spec.setting}: {spec.purpose})"


def _partitions(count: int) -> str:
    return f"{count} partition" + ("" if count == 1 else "s")


def _duration(ms: int) -> str:
    if ms < 0:
        return "unlimited"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"
