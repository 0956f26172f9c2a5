"""Which consume loops a daemon runs, what each reads and which stages it runs, in order.

The daemon wires its loops from these plans (the topics each consumer subscribes to, the
stages in the order the data flows, where the router sends native JSON), and
`scripts/architecture.py` draws the data-flow diagram of docs/architecture.md from the same
plans, so the picture is the wiring.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import KafkaConfig
from monitor.stages.router import ASSEMBLE, REKEY, SCORE, StageName


@dataclass(frozen=True, slots=True)
class Hop:
    """Data moving from one node of the diagram to another: a topic, a stage or a sink."""

    source: str
    target: str
    what: str


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """One consume loop: its source (consumer group and topics, or a file), its stages in the
    order the data flows, where native JSON goes, and where each stage's output goes."""

    name: str
    group_id: str | None
    topics: tuple[str, ...]
    stages: tuple[StageName, ...]
    natives_to: StageName
    hops: tuple[Hop, ...]


# What the score stage writes to (the same for every loop that scores).
STORE = "store"
RESULTS = "results topic"
DEAD_LETTERS = "dead letters"


def kafka_loops(kafka: KafkaConfig) -> list[LoopPlan]:
    """The loops of a daemon reading Kafka: the scoring group (native topics and, when OTLP can
    arrive, the traces topic; OTLP found on a native topic is re-keyed), and when OTLP can
    arrive the OTLP group (OTLP topics re-keyed by trace, the spans topic assembled); a single
    replica runs one loop instead (`single_replica_loop`)."""
    scored = _score_hops()
    if not kafka.otlp_stage_enabled:
        return [
            LoopPlan(
                "scoring",
                kafka.group_id,
                tuple(kafka.topics),
                (SCORE,),
                SCORE,
                (*(Hop(t, SCORE, "native JSON") for t in kafka.topics), *scored),
            )
        ]
    if kafka.single_replica:
        return [single_replica_loop(kafka)]
    spans, traces = kafka.effective_spans_topic, kafka.effective_traces_topic
    scoring = LoopPlan(
        "scoring",
        kafka.group_id,
        (*kafka.topics, traces),
        (REKEY, SCORE),
        SCORE,
        (
            *(Hop(t, SCORE, "native JSON") for t in kafka.topics),
            *(Hop(t, REKEY, "OTLP found there") for t in kafka.topics),
            Hop(REKEY, spans, "parts keyed by trace id"),
            Hop(traces, SCORE, "assembled traces, keyed by conversation"),
            *scored,
        ),
    )
    otlp_inputs = (*kafka.otlp_topics, *kafka.otlp_logs_topics)
    otlp = LoopPlan(
        "otlp",
        kafka.effective_otlp_group_id,
        (*otlp_inputs, spans),
        (REKEY, ASSEMBLE),
        REKEY,
        (
            *(Hop(t, REKEY, "OTLP span exports") for t in kafka.otlp_topics),
            *(Hop(t, REKEY, "OTLP log exports (GenAI events)") for t in kafka.otlp_logs_topics),
            Hop(REKEY, spans, "parts keyed by trace id"),
            Hop(REKEY, traces, "native JSON, keyed by conversation"),
            Hop(spans, ASSEMBLE, "parts of one trace"),
            Hop(ASSEMBLE, traces, "whole traces + assembly record"),
            Hop(ASSEMBLE, DEAD_LETTERS, "unmappable traces"),
        ),
    )
    return [scoring, otlp]


def single_replica_loop(kafka: KafkaConfig) -> LoopPlan:
    """One consumer group reading every input topic (`kafka.single_replica`): OTLP split,
    assembled and scored in process, the stages handing on as in a file replay. Complete only
    because this one consumer holds every partition: the spans of a trace may come in
    messages of different partitions."""
    otlp_inputs = (*kafka.otlp_topics, *kafka.otlp_logs_topics)
    return LoopPlan(
        "scoring",
        kafka.group_id,
        (*kafka.topics, *otlp_inputs),
        (REKEY, ASSEMBLE, SCORE),
        SCORE,
        (
            *(Hop(t, SCORE, "native JSON") for t in kafka.topics),
            *(Hop(t, REKEY, "OTLP found there") for t in kafka.topics),
            *(Hop(t, REKEY, "OTLP span exports") for t in kafka.otlp_topics),
            *(Hop(t, REKEY, "OTLP log exports (GenAI events)") for t in kafka.otlp_logs_topics),
            Hop(REKEY, ASSEMBLE, "parts, in process"),
            Hop(ASSEMBLE, SCORE, "whole traces, in process"),
            Hop(ASSEMBLE, DEAD_LETTERS, "unmappable traces"),
            *_score_hops(),
        ),
    )


def file_loop(kafka: KafkaConfig, path: str = "FILE") -> LoopPlan:
    """The loop of a file replay: one process, the OTLP stages handing on in process (no
    internal topics), dead letters as lines on stderr."""
    stages: tuple[StageName, ...] = (SCORE,)
    hops = [Hop(path, SCORE, "native JSON lines")]
    if kafka.otlp_stage_enabled:
        stages = (REKEY, ASSEMBLE, SCORE)
        hops += [
            Hop(path, REKEY, "OTLP/JSON lines"),
            Hop(REKEY, ASSEMBLE, "parts, in process"),
            Hop(ASSEMBLE, SCORE, "whole traces, in process"),
        ]
    scored = _score_hops(publishes=False)
    return LoopPlan("file", None, (path,), stages, SCORE, (*hops, *scored))


def _score_hops(publishes: bool = True) -> tuple[Hop, ...]:
    """Where the score stage writes (a replay publishes no results topic)."""
    published = (Hop(SCORE, RESULTS, "results"),) if publishes else ()
    return (
        Hop(SCORE, STORE, "results, conversation turns"),
        *published,
        Hop(SCORE, DEAD_LETTERS, "undecodable / faulty traces"),
    )
