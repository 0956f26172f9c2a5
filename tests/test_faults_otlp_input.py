"""Bad OTLP input costs only itself, through a real `rag-monitor run` on the real broker (issue 21,
finding 4).

- One span with a wrong JSON type (OTLP/JSON) or invalid UTF-8 in one protobuf string, in an
  export carrying three traces: the two good traces are scored; the bad one is dead-lettered
  alone (`otlp_undecodable`), its spans as they came, in the input's format. Before, the whole
  export was dead-lettered and the good traces never scored.
- Spans of a trace already scored whole, read again by a new process (after a crash or a
  rebalance), assemble into a fragment that cannot be mapped: skipped as `otlp_late_spans`,
  never dead-lettered `otlp_unmappable`, and the whole trace's result stands.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.support.faults import (
    DaemonProcess,
    metric_value,
    pipeline_drained,
    stored_by_evaluator,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_spans import App, Fmt, serialize
from tests.support.otlp_turns import MS, Turn, langchain_turn

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MARK = "Bad-Span-Name"


class Rig:
    def __init__(self, broker: KafkaBroker, prefix: str, workdir: Path, **env: str) -> None:
        self.bootstrap = broker.bootstrap
        self.otlp, self.dlq, self.group = f"{prefix}.otlp", f"{prefix}.dlq", f"{prefix}.group"
        results = f"{prefix}.results"
        asyncio.run(create_topics(self.bootstrap, [self.otlp, results], partitions=2))
        asyncio.run(create_topics(self.bootstrap, [self.dlq]))
        self.database = workdir / "results.db"
        self.daemon = DaemonProcess(
            {
                "RAGMON_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
                "RAGMON_KAFKA__TOPICS": "[]",
                "RAGMON_KAFKA__OTLP_TOPICS": json.dumps([self.otlp]),
                "RAGMON_KAFKA__GROUP_ID": self.group,
                "RAGMON_KAFKA__DLQ_TOPIC": self.dlq,
                "RAGMON_KAFKA__COMMIT_INTERVAL_SECONDS": "0.5",
                "RAGMON_KAFKA__INTERNAL_PARTITIONS": "2",
                "RAGMON_RESULTS__TOPIC": results,
                "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{self.database}",
                **env,
            },
            workdir,
        )

    def run(self, messages: list[bytes]) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Start, take `messages`, wait until both stages committed them; the metrics."""
        self.daemon.start()
        try:
            self.daemon.wait_ready(90)
            asyncio.run(produce(self.bootstrap, self.otlp, messages, partition=0))
            wait_until(
                lambda: pipeline_drained(self.bootstrap, self.group, otlp_inputs=[self.otlp]),
                90,
                "the messages through both stages",
                interval=0.5,
            )
            samples = self.daemon.metrics()
            assert self.daemon.terminate() == 0, self.daemon.stderr_tail()
        finally:
            self.daemon.ensure_stopped()
        return samples

    def stored(self) -> set[str]:
        return stored_by_evaluator(self.database).get("heuristic", set())


def _turns(count: int) -> list[Turn]:
    app = App()
    start = time.time_ns()
    return [langchain_turn(app, n, session=None, start_ns=start + n * MS) for n in range(count)]


def _damaged_export(turns: list[Turn], fmt: Fmt) -> bytes:
    """One export of the turns' spans, one span of the second turn damaged."""
    request = encode_spans([span for turn in turns for span in turn.spans])
    victim_trace = bytes.fromhex(turns[1].trace_id)
    victim = next(
        span
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
        if bytes(span.trace_id) == victim_trace
    )
    victim.name = MARK
    data = serialize(request, fmt)
    if fmt == "otlp_proto":  # invalid UTF-8, of the same length: the framing stays whole
        return data.replace(MARK.encode(), b"\xff" * len(MARK))
    document: dict[str, Any] = json.loads(data)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                if span["name"] == MARK:
                    span["name"] = ["not", "a", "string"]
    return json.dumps(document).encode()


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
def test_one_bad_span_in_a_good_export_costs_only_its_trace(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, fmt: Fmt
) -> None:
    turns = _turns(3)
    rig = Rig(kafka_broker, topic_prefix, tmp_path)
    samples = rig.run([_damaged_export(turns, fmt)])
    assert rig.stored() == {turns[0].trace_id, turns[2].trace_id}
    (letter,) = topic_records(rig.bootstrap, rig.dlq)
    headers = {k: v.decode("utf-8", "replace") for k, v in letter.headers}
    assert headers["ragmon.error.reason"] == "otlp_undecodable"
    assert headers["ragmon.original.topic"] == rig.otlp
    assert headers["ragmon.original.offset"] == "0"
    assert turns[1].trace_id in headers["ragmon.error.message"]
    if fmt == "otlp_json":
        letter_spans = [
            span
            for resource in json.loads(letter.value)["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        ]
        assert {s["traceId"] for s in letter_spans} == {turns[1].trace_id}
        assert len(letter_spans) == len(turns[1].spans), "all of its spans, only its spans"
    else:
        assert b"\xff" * len(MARK) in letter.value, "the bad span's bytes as they came"
    assert metric_value(samples, "ragmon_dead_letters_total") == 1
    assert metric_value(samples, "ragmon_traces_processed_total", outcome="ok") == 2


def test_a_fragment_of_a_trace_scored_whole_by_an_earlier_process_is_skipped(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    (turn,) = _turns(1)
    rig = Rig(
        kafka_broker,
        topic_prefix,
        tmp_path,
        RAGMON_KAFKA__OTLP_ASSEMBLY_MAX_SECONDS="3",
        RAGMON_KAFKA__OTLP_LATE_SPAN_GRACE_SECONDS="1",
    )
    rig.run([serialize(encode_spans(list(turn.spans)), "otlp_proto")])
    assert rig.stored() == {turn.trace_id}
    # a new process reads the retriever's spans again (as after a crash), alone
    samples = rig.run([serialize(encode_spans(turn.early()), "otlp_proto")])
    assert topic_records(rig.bootstrap, rig.dlq) == [], "never dead-lettered"
    assert metric_value(samples, "ragmon_traces_skipped_total", reason="otlp_late_spans") == 1
    assert rig.stored() == {turn.trace_id}
