"""The demo's traffic as OpenTelemetry spans (`rag-monitor demo --otlp`).

Each demo turn becomes the spans a RAG service instrumented with the OpenTelemetry GenAI
semantic conventions (1.37 and later) exports: an `invoke_agent` span carrying the agent, the
conversation and the question and answer as messages, with a `retrieval` span (the documents)
and a `chat` span (the model call) under it. They are encoded as an OTLP
`ExportTraceServiceRequest` in protobuf, what the Collector's Kafka exporter writes with its
default `otlp_proto` encoding, and go to the demo's spans topic, where the daemon's OTLP stage
splits, assembles and maps them like any instrumented service's.

What native traces carry beyond the conventions (constraints, memory tokens, explicit turn
numbers) has no span attribute: in this mode turns are numbered by their start, and the demo's
constraint drift does not show.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

SERVICE_NAME = "rag-demo-service"
SCOPE = "rag_monitor.demo"


def _attributes(values: dict[str, str | int]) -> list[KeyValue]:
    return [
        KeyValue(
            key=key,
            value=AnyValue(int_value=value)
            if isinstance(value, int)
            else AnyValue(string_value=value),
        )
        for key, value in values.items()
    ]


def _messages(role: str, text: str) -> str:
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False
    )


def otlp_export(trace: dict[str, Any], rng: random.Random, end_ns: int | None = None) -> bytes:
    """A native demo trace as the OTLP export of the spans that would have recorded it."""
    end = end_ns if end_ns is not None else time.time_ns()
    latency_ns = int(float(trace.get("latency_ms") or 300) * 1e6)
    start = end - latency_ns
    trace_id = bytes.fromhex(trace["trace_id"])
    root_id, retrieval_id, chat_id = (rng.getrandbits(64).to_bytes(8, "big") for _ in range(3))
    question, answer = trace["query"], trace["answer"]
    documents = [{"id": c["id"], "content": c["text"]} for c in trace["contexts"]]
    retrieval_end = start + latency_ns // 5
    tokens_in = 40 + sum(len(d["content"]) for d in documents) // 4
    root = Span(
        trace_id=trace_id,
        span_id=root_id,
        name=f"invoke_agent {trace['agent']}",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=_attributes(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": trace["agent"],
                "gen_ai.conversation.id": trace["conversation_id"],
                "gen_ai.input.messages": _messages("user", question),
                "gen_ai.output.messages": _messages("assistant", answer),
            }
        ),
    )
    retrieval = Span(
        trace_id=trace_id,
        span_id=retrieval_id,
        parent_span_id=root_id,
        name="retrieval demo-corpus",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start + 1_000,
        end_time_unix_nano=retrieval_end,
        attributes=_attributes(
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.query.text": question,
                "gen_ai.retrieval.documents": json.dumps(documents, ensure_ascii=False),
            }
        ),
    )
    chat = Span(
        trace_id=trace_id,
        span_id=chat_id,
        parent_span_id=root_id,
        name=f"chat {trace['model']}",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=retrieval_end + 1_000,
        end_time_unix_nano=end - 1_000,
        attributes=_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": trace["model"],
                "gen_ai.input.messages": _messages("user", question),
                "gen_ai.output.messages": _messages("assistant", answer),
                "gen_ai.usage.input_tokens": tokens_in,
                "gen_ai.usage.output_tokens": 1 + len(answer) // 4,
            }
        ),
    )
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=_attributes({"service.name": SERVICE_NAME})),
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name=SCOPE), spans=[root, retrieval, chat]
                    )
                ],
            )
        ]
    )
    encoded: bytes = request.SerializeToString()
    return encoded


def as_otlp(key: bytes, value: bytes, rng: random.Random) -> tuple[bytes, bytes]:
    """A message of the demo's native traffic as the message a Collector would write: a valid
    trace as its spans, keyed by trace id; a malformed one stays malformed (a dead letter)."""
    try:
        trace = json.loads(value)
        return bytes.fromhex(trace["trace_id"]), otlp_export(trace, rng)
    except (ValueError, KeyError, TypeError):
        return key, value
