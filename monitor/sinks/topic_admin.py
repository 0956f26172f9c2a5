"""Which topics a configuration needs, and creating them (`rag-monitor topics create`).

Input topics (`kafka.topics`, `kafka.otlp_topics`, `kafka.otlp_logs_topics`) and the results
topic get `kafka.topic_partitions` partitions, the two internal topics of the OTLP stage (span
and log-record parts keyed by trace id, assembled traces keyed by conversation id)
`kafka.internal_partitions`, all of them `kafka.retention_ms`; the dead-letter topic one
partition and the longer `kafka.dlq_retention_ms`.
The daemon creates its internal topics itself when they are missing (it owns them, as a Kafka
Streams application owns its repartition topics); every other topic it only checks.

What is reported is read back from the broker: partition counts from its metadata, retention
from DescribeConfigs where the broker answers it. Topics are looked up in the broker's list
first and only those present are described: a metadata request naming a missing topic makes a
broker with `auto.create.topics.enable` (Apache Kafka's default, and Tansu) create it with its
own default partition count.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from monitor.config import Settings, aiokafka_security_kwargs
from monitor.sinks.produce import RECORD_OVERHEAD_BYTES
from monitor.sinks.topics import MissingTopicError

TOPIC_ALREADY_EXISTS = 36
VISIBLE_SECONDS = 15.0
DEFAULT_REPLICAS = 3


@dataclass(frozen=True)
class TopicSpec:
    name: str
    setting: str
    partitions: int
    purpose: str
    internal: bool = False
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicOutcome:
    spec: TopicSpec
    created: bool
    partitions: int | None  # of the topic as it is (None when unknown)
    error: str | None = None
    retention_ms: str | None = None  # as the broker reports it (None: it does not say)

    @property
    def differences(self) -> list[str]:
        """How the topic as it is differs from the configuration: `12 partitions`, ..."""
        spec = self.spec
        found = []
        if self.partitions is not None and self.partitions != spec.partitions:
            found.append(f"{spec.partitions} partition" + ("s" if spec.partitions != 1 else ""))
        wanted = spec.configs.get("retention.ms")
        if wanted and self.retention_ms is not None and self.retention_ms != wanted:
            found.append(f"retention.ms {wanted}")
        return found


def needed_topics(settings: Settings) -> list[TopicSpec]:
    """Every topic the configuration reads or writes, with how it should be made."""
    kafka = settings.kafka
    retention = {"retention.ms": str(kafka.retention_ms)}
    # What the daemon writes may be as large as what it reads, plus what it adds (headers).
    room = {"max.message.bytes": str(kafka.max_message_bytes + RECORD_OVERHEAD_BYTES)}
    specs = [
        TopicSpec(name, "kafka.topics", kafka.topic_partitions, "native traces", configs=retention)
        for name in kafka.topics
    ]
    specs += [
        TopicSpec(
            name,
            "kafka.otlp_topics",
            kafka.topic_partitions,
            "OTLP span exports",
            configs=retention,
        )
        for name in kafka.otlp_topics
    ]
    specs += [
        TopicSpec(
            name,
            "kafka.otlp_logs_topics",
            kafka.topic_partitions,
            "OTLP log exports (GenAI events)",
            configs=retention,
        )
        for name in kafka.otlp_logs_topics
    ]
    if kafka.uses_internal_topics:
        specs += internal_topics(settings)
    specs.append(
        TopicSpec(
            kafka.dlq_topic,
            "kafka.dlq_topic",
            1,
            "dead letters",
            configs={"retention.ms": str(kafka.dlq_retention_ms), **room},
        )
    )
    if settings.results.topic:
        specs.append(
            TopicSpec(
                settings.results.topic,
                "results.topic",
                kafka.topic_partitions,
                "evaluation results",
                configs={**retention, **room},
            )
        )
    return specs


def internal_topics(settings: Settings) -> list[TopicSpec]:
    kafka = settings.kafka
    configs = {
        "retention.ms": str(kafka.retention_ms),
        "cleanup.policy": "delete",
        "max.message.bytes": str(kafka.max_message_bytes + RECORD_OVERHEAD_BYTES),
    }
    return [
        TopicSpec(
            kafka.effective_spans_topic,
            "kafka.spans_topic",
            kafka.internal_partitions,
            "spans and log records split per trace, keyed by trace id (OTLP stage)",
            internal=True,
            configs=configs,
        ),
        TopicSpec(
            kafka.effective_traces_topic,
            "kafka.traces_topic",
            kafka.internal_partitions,
            "assembled traces keyed by conversation id (scoring stage)",
            internal=True,
            configs=configs,
        ),
    ]


def _admin(settings: Settings) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka.bootstrap_servers,
        client_id=f"{settings.kafka.client_id}-admin",
        **aiokafka_security_kwargs(settings.kafka),
    )


async def create_topics(settings: Settings, specs: list[TopicSpec]) -> list[TopicOutcome]:
    """Create the topics that do not exist yet; report each one's outcome (never raises for a
    topic the broker refuses: the outcome carries the error)."""
    admin = _admin(settings)
    await admin.start()
    try:
        existing = await _partition_counts(admin, [s.name for s in specs])
        missing = [s for s in specs if s.name not in existing]
        errors: dict[str, str] = {}
        if missing:
            replication = settings.kafka.replication_factor or await _default_replication(admin)
            response: Any = await admin.create_topics(
                [
                    NewTopic(
                        spec.name,
                        num_partitions=spec.partitions,
                        replication_factor=replication,
                        topic_configs=spec.configs,
                    )
                    for spec in missing
                ]
            )
            for entry in response.topic_errors:
                name, code = entry[0], entry[1]
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    message = entry[2] if len(entry) > 2 and entry[2] else for_code(code).__name__
                    errors[name] = str(message)
            existing.update(
                await _visible(admin, [s.name for s in missing if s.name not in errors])
            )
        retentions = await _retentions(admin, list(existing))
    finally:
        await admin.close()
    made = {s.name for s in missing}
    return [
        TopicOutcome(
            spec,
            created=spec.name in made and spec.name not in errors,
            partitions=existing.get(spec.name),
            error=errors.get(spec.name),
            retention_ms=retentions.get(spec.name),
        )
        for spec in specs
    ]


async def _default_replication(admin: AIOKafkaAdminClient) -> int:
    """Three copies where the cluster has three brokers, fewer on a smaller one."""
    cluster: Any = await admin.describe_cluster()
    return max(1, min(DEFAULT_REPLICAS, len(cluster.get("brokers", [])) or 1))


async def _visible(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partition counts of just-created topics, once the broker's metadata shows them (that
    takes a moment after the controller said yes)."""
    deadline = time.monotonic() + VISIBLE_SECONDS
    counts = await _partition_counts(admin, names)
    while len(counts) < len(names) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        counts = await _partition_counts(admin, names)
    return counts


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partition counts of the topics among `names` that exist (see the module's doc on why
    the list comes first)."""
    listed = set(await admin.list_topics())
    present = [name for name in names if name in listed]
    if not present:
        return {}
    counts = {}
    for described in await admin.describe_topics(present):
        if described.get("error_code", 0) == 0 and described.get("partitions"):
            counts[described["topic"]] = len(described["partitions"])
    return counts


async def _retentions(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, str]:
    """`retention.ms` of each topic, read back; empty when the broker does not answer
    DescribeConfigs (Tansu closes the connection)."""
    if not names:
        return {}
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, {"retention.ms": None}) for name in names
    ]
    try:
        responses: Any = await asyncio.wait_for(admin.describe_configs(resources), 10)
    except (KafkaError, OSError, TimeoutError):
        return {}
    found = {}
    for response in responses:
        for resource in response.resources:
            error_code, name, entries = resource[0], resource[3], resource[4]
            for entry in entries if error_code == 0 else ():
                if entry[0] == "retention.ms" and entry[1] is not None:
                    found[name] = str(entry[1])
    return found


async def ensure_internal_topics(settings: Settings) -> list[TopicOutcome]:
    """Create the OTLP stage's internal topics when missing; MissingTopicError when that fails
    (for example the principal may not create topics: run `rag-monitor topics create`)."""
    try:
        outcomes = await create_topics(settings, internal_topics(settings))
    except KafkaError as exc:
        spec = internal_topics(settings)[0]
        raise MissingTopicError(spec.name, f"{spec.setting}; creating it failed: {exc}") from None
    for outcome in outcomes:
        if outcome.partitions is None:
            detail = outcome.error or "not visible after creation"
            raise MissingTopicError(
                outcome.spec.name,
                f"{outcome.spec.setting}; creating it failed: {detail}; "
                "run `rag-monitor topics create` with a principal that may",
            )
    return outcomes
