"""A single replica's assembler can find hundreds of traces due at once: every trace read within
one settle interval (`kafka.otlp_assembly_settle_seconds`) is released at its end. They are
handed to scoring in chunks that fit `kafka.max_in_flight`, so the bound on unfinished traces
holds. Handed on whole, a release of 400 traces was admitted once nothing else was in flight
and held all 400. Real broker, in-process daemon, SQLite store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon import Daemon, SourceSpec
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, langchain_turn
from tests.support.traces import RunningDaemon, scoring_settings, wait_for

pytestmark = [pytest.mark.kafka]

TURNS = 400
MAX_IN_FLIGHT = 50
TURNS_PER_EXPORT = 20


async def test_traces_due_at_once_are_handed_on_within_the_in_flight_bound(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = App()
    start = 1_800_000_000_000_000_000
    turns = [
        langchain_turn(app, n, session=f"conv-{n // 3}", start_ns=start + n * MS)
        for n in range(TURNS)
    ]
    exports = [
        encode(
            [span for turn in turns[i : i + TURNS_PER_EXPORT] for span in turn.spans], "otlp_proto"
        )
        for i in range(0, TURNS, TURNS_PER_EXPORT)
    ]
    otlp_topic = f"{topic_prefix}.otlp"
    await create_topics(kafka_broker.bootstrap, [otlp_topic], partitions=3)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    await produce(kafka_broker.bootstrap, otlp_topic, exports)  # all read within one settle
    settings = scoring_settings(
        kafka_broker.bootstrap,
        topic_prefix,
        tmp_path / "results.db",
        kafka={
            "topics": [],
            "format": "auto",
            "otlp_topics": [otlp_topic],
            "single_replica": True,
            "max_in_flight": MAX_IN_FLIGHT,
            "otlp_assembly_settle_seconds": 1.0,
        },
    )
    daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
    peak = [0.0]
    gauge = daemon.metrics.in_flight
    set_gauge = gauge.set

    def note_and_set(value: float) -> None:
        peak[0] = max(peak[0], value)
        set_gauge(value)

    monkeypatch.setattr(gauge, "set", note_and_set)
    running = RunningDaemon(daemon)
    await running.started()

    def processed() -> float:
        return sum(
            s.value
            for metric in daemon.metrics.registry.collect()
            if metric.name == "ragmon_traces_processed"
            for s in metric.samples
            if s.name == "ragmon_traces_processed_total" and s.labels.get("outcome") == "ok"
        )

    await wait_for(lambda: processed() == TURNS, 120, "every turn scored", 0.2)
    assert await running.stop() == 0
    assert 0 < peak[0] <= MAX_IN_FLIGHT
