"""`kafka.max_in_flight` bounds the traces one replica holds unfinished, however many arrive
at once. Two ways more arrive than the bound: a single replica's OTLP assembler releases every
trace read within one settle interval (`kafka.otlp_assembly_settle_seconds`) at its end, and a
native fetch (`kafka.fetch_max_records`) can be larger than the bound. Either is admitted in
pieces that fit; before, a batch of any size was admitted whole once nothing else was in flight
(400 traces held where the bound was 50). Real broker, in-process daemon, SQLite store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_spans import App, encode
from tests.support.otlp_turns import MS, langchain_turn
from tests.support.traces import (
    RunningDaemon,
    native_trace,
    produce_traces,
    scoring_settings,
    wait_for,
)

pytestmark = [pytest.mark.kafka]

TURNS = 400
MAX_IN_FLIGHT = 50
TURNS_PER_EXPORT = 20


async def _peak_in_flight_scoring_all(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> float:
    """Run a daemon until it has scored all `TURNS`; the most traces it held in flight."""
    daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
    peak = _recording_peak(daemon, monkeypatch)
    running = RunningDaemon(daemon)
    await running.started()
    await wait_for(lambda: _processed_ok(daemon) == TURNS, 120, f"{TURNS} traces scored", 0.2)
    assert await running.stop() == 0
    return peak[0]


def _recording_peak(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The highest value the daemon's in-flight gauge is set to, as it runs."""
    peak = [0.0]
    gauge = daemon.metrics.in_flight
    set_gauge = gauge.set

    def note_and_set(value: float) -> None:
        peak[0] = max(peak[0], value)
        set_gauge(value)

    monkeypatch.setattr(gauge, "set", note_and_set)
    return peak


def _processed_ok(daemon: Daemon) -> float:
    return sum(
        s.value
        for metric in daemon.metrics.registry.collect()
        if metric.name == "ragmon_traces_processed"
        for s in metric.samples
        if s.name == "ragmon_traces_processed_total" and s.labels.get("outcome") == "ok"
    )


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
    assert 0 < await _peak_in_flight_scoring_all(settings, monkeypatch) <= MAX_IN_FLIGHT


async def test_a_native_fetch_larger_than_the_bound_is_admitted_in_pieces(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.in"], partitions=3)
    await create_topics(kafka_broker.bootstrap, [f"{topic_prefix}.dlq"])
    await produce_traces(
        kafka_broker.bootstrap, f"{topic_prefix}.in", [native_trace(n) for n in range(TURNS)]
    )
    settings = scoring_settings(
        kafka_broker.bootstrap,
        topic_prefix,
        tmp_path / "results.db",
        kafka={"max_in_flight": MAX_IN_FLIGHT, "fetch_max_records": 500},
    )
    assert 0 < await _peak_in_flight_scoring_all(settings, monkeypatch) <= MAX_IN_FLIGHT
