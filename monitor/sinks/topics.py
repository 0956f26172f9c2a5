"""Start-up checks that the topics the daemon writes to exist.

It creates none of them (only its own internal topics, `monitor.sinks.topic_admin`);
`rag-monitor topics create` does.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

TOPIC_CHECK_SECONDS = 20.0


class MissingTopicError(Exception):
    """A configured output topic does not exist; names the setting that points at it."""

    def __init__(self, topic: str, setting: str) -> None:
        self.topic = topic
        self.setting = setting
        super().__init__(
            f"topic {topic!r} ({setting}) does not exist or is not visible to this client; "
            "create it or change the setting"
        )


async def require_topic(producer: AIOKafkaProducer, topic: str, setting: str) -> None:
    try:
        partitions = await asyncio.wait_for(producer.partitions_for(topic), TOPIC_CHECK_SECONDS)
    except (TimeoutError, KafkaError):
        raise MissingTopicError(topic, setting) from None
    if not partitions:
        raise MissingTopicError(topic, setting)
