"""Huge OTLP traces, built directly as protobuf (the SDK would take minutes for 100,000 spans):
a RAG turn as OpenInference records it -- a chain at the root holding question and answer, a
retriever with a document, an LLM call -- plus as many other child spans as asked, and
optionally one huge attribute. Used by the tests of the spans-per-trace bound and by
`bench/loop_lag.py`."""

from __future__ import annotations

import json
import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

QUESTION = "How long is the refund window?"
ANSWER = "You can ask for a refund within 30 days of delivery."
DOCUMENT = "Refunds are accepted within 30 days of delivery."
START_NS = 1_790_000_000_000_000_000


def _attributes(span: Span, values: dict[str, str | int]) -> None:
    for key, value in values.items():
        any_value = (
            AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
        )
        span.attributes.append(KeyValue(key=key, value=any_value))


def wide_trace(
    spans: int, *, seed: int = 0, attribute_chars: int = 0, service: str = "rag-api"
) -> tuple[str, ExportTraceServiceRequest]:
    """(trace id as hex, an export holding one RAG trace of `spans` spans). `attribute_chars`
    puts that much text in the LLM span's prompt attribute."""
    rng = random.Random(seed)
    trace_id = rng.randbytes(16)
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value=service))
    )
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "openinference.instrumentation.langchain"

    def span(name: str, parent: bytes, offset_ms: int, values: dict[str, str | int]) -> bytes:
        made = scope.spans.add()
        made.trace_id = trace_id
        made.span_id = rng.randbytes(8)
        made.parent_span_id = parent
        made.name = name
        made.start_time_unix_nano = START_NS + offset_ms * 1_000_000
        made.end_time_unix_nano = made.start_time_unix_nano + 1_000_000
        _attributes(made, values)
        return bytes(made.span_id)

    root = span(
        "RetrievalQA",
        b"",
        0,
        {
            "openinference.span.kind": "CHAIN",
            "input.value": json.dumps({"query": QUESTION}),
            "output.value": json.dumps({"query": QUESTION, "result": ANSWER}),
        },
    )
    scope.spans[0].end_time_unix_nano = START_NS + (spans + 10) * 1_000_000
    span(
        "VectorStoreRetriever",
        root,
        1,
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": QUESTION,
            "retrieval.documents.0.document.id": "doc-refunds",
            "retrieval.documents.0.document.content": DOCUMENT,
        },
    )
    span(
        "ChatOpenAI",
        root,
        2,
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": QUESTION + " " + "x" * attribute_chars,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": ANSWER,
        },
    )
    for n in range(spans - 3):
        span(f"step-{n}", root, 3 + n, {"openinference.span.kind": "TOOL", "tool.name": f"t{n}"})
    return trace_id.hex(), request
