"""The daemon's garbage collector while it consumes: the start-up heap frozen and the youngest
generation collected less often (`monitor.daemon`), both undone when the daemon stops."""

from __future__ import annotations

import gc

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import YOUNG_COLLECTION_THRESHOLD, Daemon, SourceSpec, _fewer_young_collections
from monitor.models import Trace
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.traces import RunningDaemon, daemon_settings, encode, native_trace, wait_for


class ThresholdRecorder:
    """Processor that records the collector's youngest threshold as each trace is processed."""

    def __init__(self) -> None:
        self.thresholds: list[int] = []

    async def process(self, trace: Trace) -> None:
        self.thresholds.append(gc.get_threshold()[0])


@pytest.mark.kafka
async def test_a_consuming_daemon_collects_less_often_and_restores_the_thresholds(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    before = gc.get_threshold()
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in", f"{topic_prefix}.dlq"])
    await produce(
        kafka_broker.bootstrap, f"{topic_prefix}.in", [encode(native_trace(n)) for n in range(5)]
    )
    settings = daemon_settings(
        kafka_broker.bootstrap, [f"{topic_prefix}.in"], f"{topic_prefix}.g", f"{topic_prefix}.dlq"
    )
    recorder = ThresholdRecorder()
    daemon = Daemon(settings, SourceSpec("kafka"), processor=recorder, registry=CollectorRegistry())
    running = RunningDaemon(daemon)
    await running.started()
    await wait_for(lambda: len(recorder.thresholds) == 5, 60, "every trace processed")
    assert await running.stop() == 0
    assert recorder.thresholds == [max(before[0], YOUNG_COLLECTION_THRESHOLD)] * 5
    assert gc.get_threshold() == before


def test_daemons_sharing_a_process_restore_its_thresholds_whichever_stops_last() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(500, 9, 8)
        first = _fewer_young_collections()
        second = _fewer_young_collections()
        first()
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, 9, 8)  # one still consumes
        second()
        assert gc.get_threshold() == (500, 9, 8)
    finally:
        gc.set_threshold(*before)
