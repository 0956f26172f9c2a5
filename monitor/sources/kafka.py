"""The Kafka consumer: group membership, fetching, commits of finished offsets, rebalances."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from monitor.config import KafkaConfig, aiokafka_security_kwargs
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.sources.offsets import OffsetTracker, ReplayFilter
from monitor.typing import PartitionListener

log = structlog.get_logger(__name__)

REVOKE_WAIT_SECONDS = 5.0
FETCH_WAIT_MS = 500  # a fetch with nothing to read returns empty after this, for the ticks
MIN_FETCH_WAIT_MS = 10


def producer_kwargs(config: KafkaConfig) -> dict[str, Any]:
    """Connection settings for producers that talk to the same cluster (dead letters, results)."""
    return {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": f"{config.client_id}-producer",
        **aiokafka_security_kwargs(config),
    }


def partition_share(
    owned: Collection[TopicPartition], partitions: Mapping[str, Collection[int]]
) -> float:
    """The share of the topics' partitions (`partitions`: each topic's partition numbers) that
    `owned` holds; 0 when it holds none of them."""
    mine = {tp for tp in owned if tp.topic in partitions}
    every = {TopicPartition(t, p) for t, numbers in partitions.items() for p in numbers} | mine
    return len(mine) / len(every) if mine else 0.0


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._source.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._source.on_assigned(set(assigned))


class KafkaSource:
    """Consumes a consumer group's topics; commits only offsets the tracker says are finished.

    The daemon runs two: the scoring stage's group (`kafka.group_id`: native topics and the
    assembled-traces topic) and the OTLP stage's (OTLP topics and the spans topic). `busy` tells
    revocation which partitions still have work being finished (default: any unfinished
    offset); work that is merely held back (traces being assembled) is re-read by the next owner.
    """

    def __init__(
        self,
        config: KafkaConfig,
        tracker: OffsetTracker,
        metrics: Metrics,
        listener: PartitionListener | None = None,
        *,
        group_id: str | None = None,
        topics: list[str] | None = None,
        name: str = "scoring",
        busy: Callable[[set[TopicPartition]], bool] | None = None,
        skip_finished: bool = False,
        expects_every_partition: bool = False,
        on_share: Callable[[float], None] | None = None,
    ) -> None:
        """`listener` hears of rebalances (the consume loop); `skip_finished`: commits say which
        later offsets are unfinished, and a new owner skips the others (for topics whose
        messages finish out of order: the spans topic); `expects_every_partition`: this
        consumer must be the group's only member (a single replica assembling OTLP in
        process), so an assignment of part of the partitions is logged as an error;
        `on_share` hears this consumer's share of its topics' partitions (`share`) after every
        assignment and revocation."""
        self._config = config
        self.name = name
        self.group_id = group_id or config.group_id
        self.topics = topics if topics is not None else list(config.topics)
        self._tracker = tracker
        self._metrics = metrics
        self._listener = listener
        self._busy = busy or (lambda tps: any(tracker.pending(tp) for tp in tps))
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap_servers,
            group_id=self.group_id,
            client_id=f"{config.client_id}-{name}",
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            max_partition_fetch_bytes=max(config.max_message_bytes * 2, 1_048_576),
            fetch_max_bytes=max(config.max_message_bytes * 4, 52_428_800),
            fetch_min_bytes=config.fetch_min_bytes,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            **aiokafka_security_kwargs(config),
        )
        self._skip_finished = skip_finished
        self._expects_every_partition = expects_every_partition
        self._on_share = on_share
        self._replay = ReplayFilter()
        self._last_commit_at = time.monotonic()
        self._lag_labels: set[tuple[str, str]] = set()

    async def start(self) -> None:
        self._consumer.subscribe(topics=self.topics, listener=_Rebalance(self))
        await self._consumer.start()

    async def __aenter__(self) -> KafkaSource:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        """Commit what finished (never more), then leave the group."""
        try:
            await self.commit()
        finally:
            await self.stop()

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self._consumer.assignment())

    def share(self, owned: set[TopicPartition]) -> float:
        """The share of the subscribed topics' partitions that `owned` holds."""
        partitions = {
            topic: self._consumer.partitions_for_topic(topic) or set() for topic in self.topics
        }
        return partition_share(owned, partitions)

    def _tell_share(self, owned: set[TopicPartition]) -> float:
        share = self.share(owned)
        if self._on_share is not None:
            self._on_share(share)
        return share

    @property
    def coordinator_known(self) -> bool:
        """False while the group coordinator is unreachable (aiokafka marks it dead then).

        aiokafka keeps the assignment through a broker outage, so this is what tells readiness
        that consumption has stopped.
        """
        coordinator = getattr(self._consumer, "_coordinator", None)
        return getattr(coordinator, "coordinator_id", None) is not None

    def fetch_response_age(self) -> float | None:
        """Seconds since the broker last answered a fetch for any assigned partition; None
        before the first answer after an assignment.

        aiokafka's fetcher asks for every assigned partition without buffered records about
        every ``kafka.fetch_max_wait_ms`` (500 ms), records or not, so on a healthy connection
        this stays under a second. It grows while the connection is stalled (nothing fails until the
        40 s request timeout) -- and while buffered records wait for the daemon to read them,
        which the caller must tell apart (backpressure).
        """
        stamps: list[int] = [
            stamp
            for tp in self._consumer.assignment()
            if (stamp := self._consumer.last_poll_timestamp(tp)) is not None
        ]
        if not stamps:
            return None
        return max(0.0, time.time() - max(stamps) / 1000.0)

    async def fetch(self, wait_at_most: float | None = None) -> list[RawMessage]:
        """What the consumer has, waiting up to 500 ms for something (less when `wait_at_most`
        says a stage has work due sooner; at least 10 ms, so that work due but not done yet
        cannot spin the loop)."""
        timeout_ms = FETCH_WAIT_MS
        if wait_at_most is not None:
            timeout_ms = max(MIN_FETCH_WAIT_MS, min(FETCH_WAIT_MS, math.ceil(wait_at_most * 1000)))
        batches = await self._consumer.getmany(
            timeout_ms=timeout_ms, max_records=self._config.fetch_max_records
        )
        messages: list[RawMessage] = []
        for tp, records in batches.items():
            for rec in records:
                if self._skip_finished and self._replay.done(tp, rec.offset):
                    continue  # the partition's previous owner finished it
                messages.append(
                    RawMessage(
                        topic=rec.topic,
                        partition=rec.partition,
                        offset=rec.offset,
                        key=rec.key,
                        value=rec.value,
                        headers=tuple(rec.headers or ()),
                        timestamp_ms=rec.timestamp,
                    )
                )
        return messages

    async def commit_if_due(self) -> None:
        if time.monotonic() - self._last_commit_at >= self._config.commit_interval_seconds:
            await self.commit()

    async def commit(self, partitions: set[TopicPartition] | None = None) -> bool:
        """Commit every finished offset (of `partitions`, or all); False when the commit failed."""
        self._last_commit_at = time.monotonic()
        owned = self.assignment if partitions is None else partitions & self.assignment
        self._update_lag(owned)
        return await self._commit_offsets(owned, "offset commit failed; will retry")

    async def _commit_offsets(self, partitions: set[TopicPartition], on_failure: str) -> bool:
        """Commit the finished offsets of these partitions and count the outcome; False
        (logged) when the broker refused."""
        if self._skip_finished:
            pairs = self._tracker.to_commit_with_metadata(partitions)
        else:
            pairs = {tp: (o, "") for tp, o in self._tracker.to_commit(partitions).items()}
        if not pairs:
            return True
        offsets = {tp: offset for tp, (offset, _) in pairs.items()}
        try:
            await self._consumer.commit(
                {tp: OffsetAndMetadata(o, m) for tp, (o, m) in pairs.items()}
            )
        except KafkaError as exc:
            self._metrics.commits.labels("error").inc()
            log.warning(on_failure, error=f"{type(exc).__name__}: {exc}")
            return False
        self._tracker.mark_committed(offsets, {tp: m for tp, (_, m) in pairs.items()})
        self._metrics.commits.labels("ok").inc()
        self._metrics.last_commit.set(time.time())
        log.debug(
            "offsets committed",
            offsets={f"{tp.topic}/{tp.partition}": o for tp, o in offsets.items()},
        )
        return True

    def _update_lag(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            end = self._consumer.highwater(tp)
            position = self._tracker.committable(tp)
            if end is None or position is None:
                continue
            # Some brokers (Tansu) report a high watermark behind the real end: never negative.
            labels = (tp.topic, str(tp.partition))
            self._lag_labels.add(labels)
            self._metrics.consumer_lag.labels(*labels).set(max(0, end - position))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._metrics.rebalances.inc()
        self._metrics.set_assigned(self.name, len(self.assignment))
        share = self._tell_share(assigned | self.assignment)
        log.info(
            "partitions assigned",
            group=self.group_id,
            partitions=sorted(f"{t.topic}/{t.partition}" for t in assigned),
            share=round(share, 4),
        )
        if self._expects_every_partition:
            self._check_whole_assignment()
        if self._skip_finished:
            await self._load_replay_filter(assigned)
        if self._listener is not None:
            await self._listener.on_assigned(assigned | self.assignment)

    def read_before(self, msg: RawMessage) -> bool:
        """The message was read by the partition's previous owner (a process before a crash,
        or a replica before a rebalance) and is read again: known where commits carry what
        was read (`skip_finished`)."""
        return self._replay.read_before(msg.tp, msg.offset)

    def missing_partitions(self) -> list[TopicPartition]:
        """Partitions of the subscribed topics that another member of the group holds."""
        owned = self.assignment
        return [
            tp
            for topic in self.topics
            for partition in sorted(self._consumer.partitions_for_topic(topic) or ())
            if (tp := TopicPartition(topic, partition)) not in owned
        ]

    def _check_whole_assignment(self) -> None:
        missing = self.missing_partitions()
        if missing:
            log.error(
                "kafka.single_replica is on but another process shares the consumer group: "
                "traces whose spans came in partitions it holds are assembled incomplete here; "
                "run one replica, or turn kafka.single_replica off in every replica",
                group=self.group_id,
                elsewhere=sorted(f"{t.topic}/{t.partition}" for t in missing),
            )

    async def _load_replay_filter(self, assigned: set[TopicPartition]) -> None:
        """Read what the previous owners said about the offsets beyond their commits."""
        coordinator = getattr(self._consumer, "_coordinator", None)
        if coordinator is None or not assigned:
            return
        try:
            committed = await asyncio.wait_for(
                coordinator.fetch_committed_offsets(assigned), REVOKE_WAIT_SECONDS
            )
        except (KafkaError, TimeoutError) as exc:
            log.warning("could not read commit metadata; re-reading", error=type(exc).__name__)
            return
        for tp, meta in committed.items():
            if meta.offset >= 0:
                self._replay.load(tp, meta.offset, meta.metadata or "")

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Let the revoked partitions' in-flight work finish briefly, commit, then forget them."""
        if not revoked:
            return
        if self._listener is not None:
            await self._listener.on_revoked(revoked)
        deadline = time.monotonic() + REVOKE_WAIT_SECONDS
        while self._busy(revoked) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await self._commit_offsets(revoked, "commit on revocation failed; the next owner re-reads")
        self._tracker.forget(revoked)
        self._replay.forget(revoked)
        for tp in revoked:
            labels = (tp.topic, str(tp.partition))
            if labels in self._lag_labels:
                self._metrics.consumer_lag.remove(*labels)
                self._lag_labels.discard(labels)
        kept = self.assignment - revoked
        self._metrics.set_assigned(self.name, len(kept))
        share = self._tell_share(kept)
        log.info(
            "partitions revoked",
            group=self.group_id,
            partitions=sorted(f"{t.topic}/{t.partition}" for t in revoked),
            share=round(share, 4),
        )

    async def stop(self) -> None:
        """Leave the group (the caller commits first)."""
        await self._consumer.stop()
