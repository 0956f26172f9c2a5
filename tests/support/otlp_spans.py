"""RAG traces recorded with the real OpenTelemetry SDK and encoded with the real OTLP encoder,
as an instrumented service and the Collector's Kafka exporter produce them."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

Fmt = Literal["otlp_json", "otlp_proto"]
FORMATS: tuple[Fmt, ...] = ("otlp_proto", "otlp_json")
QUESTION = "How long is the refund window?"
ANSWER = "You can ask for a refund within 30 days of delivery."
DOCS = [
    ("doc-refunds", "Refunds are accepted within 30 days of delivery.", 0.92),
    ("doc-shipping", "Orders ship within two business days.", 0.41),
]


class App:
    """A tracer and the spans it finished, like an instrumented service's SDK."""

    def __init__(self, service: str = "rag-api") -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer: Tracer = provider.get_tracer("rag-app", "1.0")

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def root(self) -> ReadableSpan:
        return next(s for s in self.spans() if s.parent is None)


def encode(spans: Sequence[ReadableSpan], fmt: Fmt, **json_options: bool) -> bytes:
    """What the Collector's Kafka exporter writes for these spans."""
    return serialize(encode_spans(spans), fmt, **json_options)


def serialize(
    request: ExportTraceServiceRequest,
    fmt: Fmt,
    *,
    snake_case: bool = False,
    int_enums: bool = True,
) -> bytes:
    if fmt == "otlp_proto":
        data: bytes = request.SerializeToString()
        return data
    document = json_format.MessageToDict(
        request, preserving_proto_field_name=snake_case, use_integers_for_enums=int_enums
    )
    for resource_spans in document.get("resource_spans" if snake_case else "resourceSpans", []):
        for scope_spans in resource_spans.get("scope_spans" if snake_case else "scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _ids_to_hex(span, snake_case)
                for link in span.get("links", []):
                    _ids_to_hex(link, snake_case)
    return json.dumps(document).encode()


def _ids_to_hex(obj: dict[str, Any], snake_case: bool) -> None:
    """OTLP/JSON carries ids as hex, unlike the plain protobuf JSON mapping (base64)."""
    names = {"trace_id": "traceId", "span_id": "spanId", "parent_span_id": "parentSpanId"}
    for snake, camel in names.items():
        key = snake if snake_case else camel
        if key in obj:
            obj[key] = base64.b64decode(obj[key]).hex()


def hex_trace_id(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return format(context.trace_id, "032x")


def end_time(span: ReadableSpan) -> datetime:
    assert span.end_time is not None
    seconds, rest = divmod(span.end_time, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest // 1000)


def openinference_rag(app: App, *, reranker: bool = False, session: str = "conv-42") -> None:
    """A LangChain-style RAG chain as openinference-instrumentation records it."""
    common = {"session.id": session, "user.id": "user-7"}
    with app.tracer.start_as_current_span(
        "RetrievalQA",
        attributes={
            **common,
            "openinference.span.kind": "CHAIN",
            "input.value": json.dumps({"query": QUESTION}),
            "input.mime_type": "application/json",
            "output.value": json.dumps({"query": QUESTION, "result": ANSWER}),
            "output.mime_type": "application/json",
            "agent.name": "support-bot",
        },
    ):
        retrieval: dict[str, Any] = {
            **common,
            "openinference.span.kind": "RETRIEVER",
            "input.value": QUESTION,
        }
        for i, (doc_id, text, score) in enumerate(DOCS):
            retrieval[f"retrieval.documents.{i}.document.id"] = doc_id
            retrieval[f"retrieval.documents.{i}.document.content"] = text
            retrieval[f"retrieval.documents.{i}.document.score"] = score
            retrieval[f"retrieval.documents.{i}.document.metadata"] = json.dumps(
                {"source": f"kb/{doc_id}.md", "page": i + 1}
            )
        with app.tracer.start_as_current_span("VectorStoreRetriever", attributes=retrieval):
            pass
        if reranker:
            rerank: dict[str, Any] = {
                **common,
                "openinference.span.kind": "RERANKER",
                "reranker.query": QUESTION,
                "reranker.top_k": 1,
            }
            doc_id, text, _ = DOCS[0]
            rerank["reranker.output_documents.0.document.id"] = doc_id
            rerank["reranker.output_documents.0.document.content"] = text
            rerank["reranker.output_documents.0.document.score"] = 7.5
            with app.tracer.start_as_current_span("CohereRerank", attributes=rerank):
                pass
        with app.tracer.start_as_current_span(
            "ChatOpenAI",
            attributes={
                **common,
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini-2024-07-18",
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "Answer only from the context: ...",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": f"Context: ...\n\nQuestion: {QUESTION}",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": ANSWER,
                "llm.token_count.prompt": 182,
                "llm.token_count.completion": 14,
                "llm.token_count.total": 196,
                "input.value": json.dumps({"messages": [{"role": "user", "content": QUESTION}]}),
                "input.mime_type": "application/json",
                "output.value": ANSWER,
            },
        ):
            pass


def openinference_rag_spans(session: str = "conv-42") -> tuple[ReadableSpan, ...]:
    app = App()
    openinference_rag(app, session=session)
    return app.spans()


def split_in_two(spans: Sequence[ReadableSpan], fmt: Fmt) -> list[bytes]:
    """The trace's spans as two export messages, as a Collector batching by time would send."""
    half = len(spans) // 2
    return [encode(spans[:half], fmt), encode(spans[half:], fmt)]
