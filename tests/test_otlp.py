"""OTLP input: decoding, mapping GenAI / OpenInference spans onto Trace, assembling traces.

Spans come from the real OpenTelemetry SDK and are encoded with the real OTLP encoder, as an
instrumented RAG service and the Collector's Kafka exporter would produce them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.trace import SpanKind

from monitor.config import KafkaConfig
from monitor.formats.assembly import Release, TraceAssembler
from monitor.formats.otlp import (
    OtlpDecodeError,
    OtlpMappingError,
    SpanRecord,
    decode_otlp,
    detect_format,
    spans_to_trace,
)
from monitor.formats.otlp_split import TracePart, encode_request, merge_parts, split_by_trace
from monitor.models import Trace
from monitor.stages.assemble import configured_assembler
from tests.support.otlp_spans import (
    ANSWER,
    DOCS,
    FORMATS,
    QUESTION,
    App,
    Fmt,
    encode,
    end_time,
    hex_trace_id,
    openinference_rag,
    openinference_rag_spans,
    serialize,
)


def genai_rag(app: App) -> None:
    """A RAG service instrumented with the current GenAI semantic conventions."""
    with (
        app.tracer.start_as_current_span(
            "POST /chat",
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": "POST",
                "url.path": "/chat",
                "http.response.status_code": 200,
            },
        ),
        app.tracer.start_as_current_span(
            "invoke_agent support-bot",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support-bot",
                "gen_ai.conversation.id": "conv-9",
            },
        ),
    ):
        with app.tracer.start_as_current_span(
            "embeddings text-embedding-3-small",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "embeddings",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "text-embedding-3-small",
                "gen_ai.usage.input_tokens": 9,
            },
        ):
            pass
        with app.tracer.start_as_current_span(
            "retrieval kb-prod",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "retrieval",
                "gen_ai.data_source.id": "kb-prod",
                "gen_ai.retrieval.query.text": QUESTION,
                "gen_ai.retrieval.documents": json.dumps(
                    [{"id": d, "score": s, "content": t, "title": d.upper()} for d, t, s in DOCS]
                    + [{"id": "doc-no-text", "score": 0.1}]
                ),
            },
        ):
            pass
        with app.tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.usage.input_tokens": 210,
                "gen_ai.usage.output_tokens": 19,
                "gen_ai.system_instructions": json.dumps(
                    [{"type": "text", "content": "Answer only from the documents."}]
                ),
                "gen_ai.input.messages": json.dumps(
                    [
                        {"role": "user", "parts": [{"type": "text", "content": "Hi"}]},
                        {"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}]},
                        {"role": "user", "parts": [{"type": "text", "content": QUESTION}]},
                    ]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": ANSWER}],
                            "finish_reason": "stop",
                        },
                    ]
                ),
            },
        ):
            pass


def decoded(app: App, fmt: Fmt) -> list[SpanRecord]:
    return decode_otlp(encode(app.spans(), fmt), fmt)


def mapped(app: App, fmt: Fmt) -> Trace:
    trace = spans_to_trace(decoded(app, fmt))
    assert isinstance(trace, Trace)
    return trace


# ---------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("fmt", FORMATS)
def test_decodes_sdk_spans(fmt: Fmt) -> None:
    app = App()
    openinference_rag(app)
    spans = decoded(app, fmt)
    assert len(spans) == 3
    root = next(s for s in spans if s.parent_span_id is None)
    sdk_root = app.root()
    assert root.trace_id == hex_trace_id(sdk_root)
    context = sdk_root.get_span_context()
    assert context is not None
    assert root.span_id == format(context.span_id, "016x")
    assert root.start_time_unix_nano == sdk_root.start_time
    assert root.end_time_unix_nano == sdk_root.end_time
    assert root.resource_attributes["service.name"] == "rag-api"
    assert root.scope_name == "rag-app"
    llm = next(s for s in spans if s.name == "ChatOpenAI")
    assert llm.parent_span_id == root.span_id
    assert llm.attributes["llm.token_count.prompt"] == 182
    assert isinstance(llm.attributes["llm.token_count.prompt"], int)


def test_decoded_spans_are_the_records_their_constructor_makes() -> None:
    """Decoding passes the fields positionally to the written-out constructor (which mypyc
    compiles): every field in its place, the index unset, as by keyword."""
    app = App()
    openinference_rag(app)
    for span in decoded(app, "otlp_proto"):
        values = {f.name: getattr(span, f.name) for f in dataclasses.fields(span) if f.init}
        made = SpanRecord(**values)
        assert made == span and repr(made) == repr(span)
        assert span._index is None
        assert span.indexed("llm.input_messages") == made.indexed("llm.input_messages")


@pytest.mark.parametrize(("snake_case", "int_enums"), [(False, True), (True, False), (True, True)])
def test_json_variants_decode_like_protobuf(snake_case: bool, int_enums: bool) -> None:
    app = App()
    with app.tracer.start_as_current_span(
        "s",
        kind=SpanKind.SERVER,
        attributes={
            "tags": ["a", "b"],
            "flags": [True, False],
            "ratio": 0.25,
            "n": 3,
        },
    ) as span:
        span.add_event("gen_ai.user.message", {"content": QUESTION})
    request = encode_spans(app.spans())
    from_proto = decode_otlp(serialize(request, "otlp_proto"), "otlp_proto")
    from_json = decode_otlp(
        serialize(request, "otlp_json", snake_case=snake_case, int_enums=int_enums), "otlp_json"
    )
    assert from_json == from_proto
    assert from_proto[0].attributes["tags"] == ["a", "b"]
    assert from_proto[0].kind == 2  # SERVER
    assert from_proto[0].events[0].attributes == {"content": QUESTION}


@pytest.mark.parametrize(
    ("fmt", "data", "reason"),
    [
        ("otlp_proto", b"", "empty_message"),
        ("otlp_proto", b"\xff\xff\xff\xff", "invalid_protobuf"),
        ("otlp_proto", b"\x08\x01", "schema_violation"),  # valid wire format, not a trace export
        ("otlp_proto", b"garbage, not protobuf", "invalid_protobuf"),
        ("otlp_json", b"\xff{}", "invalid_utf8"),
        ("otlp_json", b"{not json", "invalid_json"),
        ("otlp_json", b"[1, 2]", "schema_violation"),
        ("otlp_json", b'{"trace_id": "x"}', "schema_violation"),
        ("otlp_json", b'{"resourceSpans": 5}', "schema_violation"),
        (
            "otlp_json",
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "'
            + b"z" * 32
            + b'", "spanId": "0102030405060708"}]}]}]}',
            "invalid_id",
        ),
        ("otlp_json", b"[" * 100_000, "invalid_json"),
    ],
)
def test_garbage_is_a_decode_error(fmt: Fmt, data: bytes, reason: str) -> None:
    with pytest.raises(OtlpDecodeError) as caught:
        decode_otlp(data, fmt)
    assert caught.value.reason == reason
    assert isinstance(caught.value, ValueError)


def test_zero_ids_are_rejected() -> None:
    app = App()
    with app.tracer.start_as_current_span("s"):
        pass
    request = encode_spans(app.spans())
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = bytes(16)
    with pytest.raises(OtlpDecodeError, match="trace_id"):
        decode_otlp(request.SerializeToString(), "otlp_proto")


def test_detect_format() -> None:
    app = App()
    openinference_rag(app)
    request = encode_spans(app.spans())
    assert detect_format(serialize(request, "otlp_proto")) == "otlp_proto"
    assert detect_format(serialize(request, "otlp_json")) == "otlp_json"
    assert detect_format(serialize(request, "otlp_json", snake_case=True)) == "otlp_json"
    native = {
        "trace_id": "t1",
        "timestamp": "2025-01-01T00:00:00Z",
        "query": "q",
        "contexts": [],
        "answer": "a",
    }
    assert detect_format(json.dumps(native).encode()) == "native"
    assert detect_format(b'  {"broken json') == "native"
    assert detect_format(b"\x00\x01garbage\xff") == "otlp_proto"
    assert detect_format(b"") == "native", "the native decoder reports the empty message"
    assert detect_format(b'{"trace_id": "\xff\xfe"}') == "native", "invalid UTF-8 is still JSON"


# ---------------------------------------------------------------------------- mapping


@pytest.mark.parametrize("fmt", FORMATS)
def test_openinference_chain_retriever_llm(fmt: Fmt) -> None:
    app = App()
    openinference_rag(app)
    trace = mapped(app, fmt)
    root = app.root()
    assert trace.trace_id == hex_trace_id(root)
    assert trace.timestamp == end_time(root)
    assert trace.query == QUESTION  # from the CHAIN's JSON input, not the templated LLM prompt
    assert trace.answer == ANSWER
    assert [(c.id, c.text, c.score, c.rank) for c in trace.contexts] == [
        (d, t, s, i) for i, (d, t, s) in enumerate(DOCS)
    ]
    assert trace.contexts[0].metadata == {"source": "kb/doc-refunds.md", "page": 1}
    assert trace.contexts[0].source == "kb/doc-refunds.md"
    assert trace.conversation_id == "conv-42"
    assert trace.agent == "support-bot"
    assert trace.model == "gpt-4o-mini-2024-07-18"
    assert trace.usage is not None
    assert (trace.usage.input_tokens, trace.usage.output_tokens) == (182, 14)
    assert root.end_time is not None and root.start_time is not None
    assert trace.latency_ms == pytest.approx((root.end_time - root.start_time) / 1e6)
    assert trace.metadata is not None
    assert trace.metadata["user_id"] == "user-7"
    assert trace.metadata["service_name"] == "rag-api"


def test_openinference_reranker_output_is_what_the_model_saw() -> None:
    app = App()
    openinference_rag(app, reranker=True)
    trace = mapped(app, "otlp_proto")
    assert [(c.id, c.score, c.rank) for c in trace.contexts] == [("doc-refunds", 7.5, 0)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_genai_current_conventions(fmt: Fmt) -> None:
    app = App()
    genai_rag(app)
    trace = mapped(app, fmt)
    root = app.root()
    assert root.name == "POST /chat"
    assert trace.trace_id == hex_trace_id(root)
    assert trace.timestamp == end_time(root)
    assert trace.query == QUESTION  # the last user message of the chat span
    assert trace.answer == ANSWER
    assert [(c.id, c.text, c.score, c.rank) for c in trace.contexts] == [
        (d, t, s, i) for i, (d, t, s) in enumerate(DOCS)
    ]
    assert trace.contexts[1].metadata == {"title": "DOC-SHIPPING"}
    assert trace.agent == "support-bot"
    assert trace.conversation_id == "conv-9"
    assert trace.model == "gpt-4o-2024-08-06"
    assert trace.usage is not None  # the embeddings call's tokens are not the answer's
    assert (trace.usage.input_tokens, trace.usage.output_tokens) == (210, 19)
    assert trace.metadata is not None
    assert trace.metadata["system_instructions"] == "Answer only from the documents."
    assert trace.contexts_without_text == 1
    assert trace.metadata["root_span"] == "POST /chat"


def _structured(value: Any) -> AnyValue:
    """A JSON-like value as a structured OTLP AnyValue (kvlist / array)."""
    result = AnyValue()
    if isinstance(value, dict):
        for key, item in value.items():
            result.kvlist_value.values.add(key=key).value.CopyFrom(_structured(item))
    elif isinstance(value, list):
        for item in value:
            result.array_value.values.add().CopyFrom(_structured(item))
    elif isinstance(value, bool):
        result.bool_value = value
    elif isinstance(value, int):
        result.int_value = value
    elif isinstance(value, float):
        result.double_value = value
    else:
        result.string_value = value
    return result


@pytest.mark.parametrize("fmt", FORMATS)
def test_genai_structured_attribute_values(fmt: Fmt) -> None:
    """The Python SDK records messages as JSON strings; other SDKs send them structured."""
    app = App()
    genai_rag(app)
    request = encode_spans(app.spans())
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                for kv in span.attributes:
                    if kv.key in (
                        "gen_ai.output.messages",
                        "gen_ai.input.messages",
                        "gen_ai.retrieval.documents",
                        "gen_ai.system_instructions",
                    ):
                        kv.value.CopyFrom(_structured(json.loads(kv.value.string_value)))
    spans = decode_otlp(serialize(request, fmt), fmt)
    chat = next(s for s in spans if s.name == "chat gpt-4o")
    assert chat.attributes["gen_ai.output.messages"][0]["parts"][0]["content"] == ANSWER
    trace = spans_to_trace(spans)
    assert isinstance(trace, Trace)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert [c.id for c in trace.contexts] == [d for d, _, _ in DOCS]
    assert trace.metadata is not None
    assert trace.metadata["system_instructions"] == "Answer only from the documents."


@pytest.mark.parametrize("fmt", FORMATS)
def test_genai_deprecated_indexed_attributes(fmt: Fmt) -> None:
    """OpenLLMetry-style: gen_ai.prompt.N.* / gen_ai.completion.N.*, prompt/completion tokens."""
    app = App()
    with app.tracer.start_as_current_span(
        "rag.workflow",
        attributes={
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "rag",
        },
    ):
        with app.tracer.start_as_current_span(
            "chroma.query", kind=SpanKind.CLIENT, attributes={"db.system": "chroma"}
        ) as query:
            for doc_id, text, _ in DOCS:
                query.add_event(
                    "db.query.result",
                    {
                        "db.query.result.id": doc_id,
                        "db.query.result.distance": 0.3,
                        "db.query.result.document": text,
                        "db.query.result.metadata": json.dumps({"source": f"{doc_id}.md"}),
                    },
                )
        with app.tracer.start_as_current_span(
            "openai.chat",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.system": "openai",
                "llm.request.type": "chat",
                "gen_ai.request.model": "gpt-3.5-turbo",
                "gen_ai.response.model": "gpt-3.5-turbo-0125",
                "gen_ai.prompt.0.role": "system",
                "gen_ai.prompt.0.content": "Use the context.",
                "gen_ai.prompt.1.role": "user",
                "gen_ai.prompt.1.content": QUESTION,
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": ANSWER,
                "gen_ai.completion.0.finish_reason": "stop",
                "gen_ai.usage.prompt_tokens": 57,
                "gen_ai.usage.completion_tokens": 12,
            },
        ):
            pass
    trace = mapped(app, fmt)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert [c.id for c in trace.contexts] == [d for d, _, _ in DOCS]
    assert trace.contexts[0].metadata == {"source": "doc-refunds.md", "distance": 0.3}
    assert trace.contexts[0].source == "doc-refunds.md"
    assert trace.model == "gpt-3.5-turbo-0125"
    assert trace.usage is not None
    assert (trace.usage.input_tokens, trace.usage.output_tokens) == (57, 12)
    assert trace.agent == "rag-api", "no agent attribute: the service is the agent"
    assert trace.conversation_id is None
    assert trace.metadata is not None
    assert trace.metadata["system_instructions"] == "Use the context."


def _old_events(app: App, style: str) -> None:
    with app.tracer.start_as_current_span(
        "chat gpt-4",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4",
            "gen_ai.usage.input_tokens": 30,
            "gen_ai.usage.output_tokens": 10,
        },
    ) as span:
        if style == "content_events":  # semantic conventions 1.26
            span.add_event(
                "gen_ai.content.prompt",
                {
                    "gen_ai.prompt": json.dumps(
                        [
                            {"role": "system", "content": "Be brief."},
                            {"role": "user", "content": QUESTION},
                        ]
                    )
                },
            )
            span.add_event(
                "gen_ai.content.completion",
                {"gen_ai.completion": json.dumps([{"role": "assistant", "content": ANSWER}])},
            )
        elif style == "message_events":  # 1.27 - 1.36 events, recorded on the span
            span.add_event("gen_ai.system.message", {"content": "Be brief."})
            span.add_event("gen_ai.user.message", {"content": QUESTION})
            span.add_event(
                "gen_ai.choice",
                {"index": 0, "finish_reason": "stop", "message": json.dumps({"content": ANSWER})},
            )
        else:  # whole-prompt attributes
            span.set_attribute("gen_ai.prompt", json.dumps([{"role": "user", "content": QUESTION}]))
            span.set_attribute("gen_ai.completion", ANSWER)


@pytest.mark.parametrize("style", ["content_events", "message_events", "prompt_attributes"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_genai_deprecated_prompt_forms(fmt: Fmt, style: str) -> None:
    app = App()
    _old_events(app, style)
    assert spans_to_trace(decoded(app, fmt)) is None, "a plain LLM call is not a RAG turn"
    trace = spans_to_trace(decoded(app, fmt), score_plain_llm_calls=True)
    assert isinstance(trace, Trace)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert trace.contexts == []
    assert trace.model == "gpt-4"
    assert trace.usage is not None
    assert (trace.usage.input_tokens, trace.usage.output_tokens) == (30, 10)


def test_remote_agent_turn_without_llm_spans() -> None:
    app = App()
    with app.tracer.start_as_current_span(
        "invoke_agent faq-agent",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "aws.bedrock",
            "gen_ai.agent.name": "faq-agent",
            "gen_ai.request.model": "faq-model-v2",
            "gen_ai.usage.input_tokens": 40,
            "gen_ai.usage.output_tokens": 9,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
            ),
        },
    ):
        pass
    trace = mapped(app, "otlp_json")
    assert (trace.query, trace.answer, trace.agent) == (QUESTION, ANSWER, "faq-agent")
    assert trace.contexts == []
    assert trace.model == "faq-model-v2"
    assert trace.usage is not None
    assert (trace.usage.input_tokens, trace.usage.output_tokens) == (40, 9)


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_rag_trace_maps_to_none(fmt: Fmt) -> None:
    app = App()
    with (
        app.tracer.start_as_current_span(
            "GET /health",
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": "GET",
                "http.response.status_code": 200,
            },
        ),
        app.tracer.start_as_current_span(
            "SELECT users",
            kind=SpanKind.CLIENT,
            attributes={
                "db.system": "postgresql",
                "db.query.text": "SELECT 1",
            },
        ),
        app.tracer.start_as_current_span(
            "embeddings",
            attributes={
                "gen_ai.operation.name": "embeddings",
                "gen_ai.request.model": "e5",
            },
        ),
    ):
        pass
    assert spans_to_trace(decoded(app, fmt)) is None


def test_llm_span_without_content_is_a_mapping_error() -> None:
    app = App()
    with app.tracer.start_as_current_span(
        "chat gpt-4o",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 12,
        },
    ):
        pass
    with pytest.raises(OtlpMappingError) as caught:
        spans_to_trace(decoded(app, "otlp_proto"), score_plain_llm_calls=True)
    assert caught.value.reason == "no_answer"


# ---------------------------------------------------------------------------- assembling


def parts_of(spans: Any, fmt: Fmt = "otlp_proto") -> list[TracePart]:
    return split_by_trace(encode(spans, fmt), fmt).parts


def assembler(**bounds: Any) -> TraceAssembler[str]:
    values: dict[str, Any] = {
        "max_seconds": 60.0,
        "grace_seconds": 30.0,
        "max_traces": 100,
        "max_bytes": 10**9,
        "settle_seconds": 0.0,
    }
    values.update(bounds)
    return TraceAssembler(**values)


def add(target: TraceAssembler[str], part: TracePart, token: str, now: float) -> str:
    return target.add(part.trace_id, part.data, part.shapes, token, now)


def mapped_release(release: Release[str]) -> Trace:
    trace = spans_to_trace(decode_otlp(merge_parts(list(release.parts)), "otlp_proto"))
    assert isinstance(trace, Trace)
    return trace


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_trace_is_released_the_moment_its_root_and_every_parent_are_there(fmt: Fmt) -> None:
    app = App()
    openinference_rag(app)
    spans = app.spans()  # children end first: retriever, llm, then the chain (the root)
    (first,) = parts_of(spans[:2], fmt)
    (second,) = parts_of(spans[2:], fmt)
    target = assembler()
    assert add(target, first, "m10", now=100.0) == "held"
    assert target.pop_ready(159.9) == [], "children without their root wait for it"
    assert add(target, second, "m11", now=159.9) == "held"
    (done,) = target.pop_ready(159.9)
    assert done.trace_id == hex_trace_id(app.root())
    assert done.complete and done.reason == "complete" and done.revision == 1
    assert done.tokens == ("m10", "m11") and done.origin == "m10"
    assert done.start_ns == app.root().start_time
    trace = mapped_release(done)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert len(trace.contexts) == 2
    assert (target.pending, target.kept) == (0, 1)


def test_a_complete_trace_settles_so_a_child_read_just_after_its_root_still_joins() -> None:
    app = App()
    openinference_rag(app)
    retriever, llm, root = app.spans()
    target = assembler(settle_seconds=1.0)
    for token, spans, now in (("m1", [llm], 0.0), ("m2", [root], 0.5)):
        (part,) = parts_of(spans)
        add(target, part, token, now=now)
    assert target.pop_ready(1.4) == [], "complete since 0.5 s: settling"
    (part,) = parts_of([retriever])  # from another partition, read a little later
    add(target, part, "m3", now=1.4)
    (done,) = target.pop_ready(1.5)
    assert done.complete and done.tokens == ("m1", "m2", "m3")
    assert len(mapped_release(done).contexts) == 2


def test_the_assembler_says_when_its_next_release_is_due() -> None:
    """What the consume loop bounds its fetch's wait by: a settling trace is released when it
    has settled, not up to a whole empty fetch later."""
    app = App()
    openinference_rag(app)
    retriever, llm, root = app.spans()
    target = assembler(settle_seconds=1.0, max_seconds=60.0)
    assert target.due_in(0.0) is None, "nothing held"
    (part,) = parts_of([retriever, llm])
    add(target, part, "m1", now=0.0)
    assert target.due_in(0.5) == 59.5, "pending: due at its maximum wait"
    (part,) = parts_of([root])
    add(target, part, "m2", now=2.0)
    assert target.due_in(2.25) == 0.75, "complete at 2.0: settled at 3.0"
    assert target.pop_ready(2.9) == [] and target.due_in(2.9) == pytest.approx(0.1)
    (done,) = target.pop_ready(3.0)
    assert done.complete
    assert target.due_in(3.0) is None, "released; kept for late spans, nothing is due"


def test_a_missing_parent_keeps_a_trace_waiting_until_the_maximum() -> None:
    app = App()
    tracer = app.tracer
    with (
        tracer.start_as_current_span("root"),
        tracer.start_as_current_span("middle"),
        tracer.start_as_current_span("leaf"),
    ):
        pass
    leaf, middle, root = app.spans()
    target = assembler(max_seconds=10.0)
    for token, spans in (("m1", [leaf]), ("m2", [root])):
        (part,) = parts_of(spans)
        add(target, part, token, now=0.0)
    assert target.pop_ready(9.9) == [], "the root ended but the leaf's parent is missing"
    (late,) = target.pop_ready(10.0)
    assert not late.complete and late.reason == "max_wait"
    (part,) = parts_of([middle])
    assert add(target, part, "m3", now=11.0) == "held"
    (revised,) = target.pop_ready(11.0)
    assert revised.complete and revised.revision == 2 and revised.tokens == ("m3",)
    assert len(revised.parts) == 3, "a revision carries every span so far"


def test_spans_after_the_grace_period_are_late_and_exact_redeliveries_are_duplicates() -> None:
    app = App()
    openinference_rag(app)
    spans = app.spans()
    (whole,) = parts_of(spans)
    target = assembler(grace_seconds=5.0)
    add(target, whole, "m1", now=0.0)
    (done,) = target.pop_ready(0.0)
    assert done.complete
    assert add(target, whole, "m1-again", now=1.0) == "duplicate", "nothing new: finish it now"
    assert target.pop_ready(4.9) == []
    assert target.pop_ready(5.0) == [] and target.kept == 0, "the grace period ended"
    assert add(target, whole, "m1-later", now=6.0) == "late"


def test_the_pending_bound_releases_the_oldest_early_and_leaves_kept_traces_alone() -> None:
    shed: list[str] = []
    target = TraceAssembler(
        max_seconds=600.0, grace_seconds=600.0, max_traces=2, max_bytes=10**9, on_shed=shed.append
    )
    apps = [App() for _ in range(4)]
    for app in apps:
        openinference_rag(app)
    (whole,) = parts_of(apps[0].spans())
    add(target, whole, "whole", now=0.0)
    assert target.pop_ready(0.0)[0].complete
    for n, app in enumerate(apps[1:], start=1):  # children only: they stay pending
        (part,) = parts_of(app.spans()[:2])
        add(target, part, f"m{n}", now=float(n))
    assert shed == ["pending_limit"], "the kept trace does not count against pending ones"
    assert (target.pending, target.kept) == (2, 1)
    (early,) = target.pop_ready(3.0)
    assert early.trace_id == hex_trace_id(apps[1].root()) and not early.complete
    assert early.reason == "pending_limit"
    flushed = target.flush(4.0)
    assert [r.trace_id for r in flushed] == [hex_trace_id(a.root()) for a in apps[2:]]
    assert target.flush(5.0) == [] and target.bytes == 0


def test_the_kept_bound_forgets_the_oldest_kept_trace_and_no_pending_one() -> None:
    shed: list[str] = []
    target = TraceAssembler(
        max_seconds=600.0,
        grace_seconds=600.0,
        max_traces=10,
        max_kept=2,
        max_bytes=10**9,
        on_shed=shed.append,
    )
    apps = [App() for _ in range(5)]
    for app in apps:
        openinference_rag(app)
    (waiting,) = parts_of(apps[3].spans()[:2])
    add(target, waiting, "pending", now=0.0)
    for n, app in enumerate(apps[:3]):
        (whole,) = parts_of(app.spans())
        add(target, whole, f"m{n}", now=float(n))
        assert target.pop_ready(float(n))[0].complete
    (next_part,) = parts_of(apps[4].spans()[:2])
    add(target, next_part, "next", now=3.0)  # the bounds hold from the next part on
    assert shed == ["grace_limit"] and (target.pending, target.kept) == (2, 2)
    (first,) = parts_of(apps[0].spans()[:1])
    assert add(target, first, "late", now=4.0) == "late", "the oldest kept trace is forgotten"
    (second,) = parts_of(apps[1].spans()[:1])
    assert add(target, second, "again", now=4.0) == "held", "the next one still takes late spans"


def test_a_busy_replica_keeps_every_trace_its_grace_period_within_the_default_bounds() -> None:
    """At 600 traces/s and 30 s of grace, 18,000 released traces are kept at once: more than
    the pending bound (10,000), which once counted them too and shed some all the time."""
    shed: list[str] = []
    target: TraceAssembler[int] = configured_assembler(KafkaConfig(topics=["t"]), shed.append)
    app = App()
    openinference_rag(app)
    (whole,) = parts_of(app.spans())
    released, most_kept = 0, 0
    for n in range(60 * 600):  # a minute at 600 traces/s
        now = n / 600
        trace_id = f"{n:032x}"
        target.add(trace_id, whole.data + trace_id.encode(), whole.shapes, n, now)
        released += len(target.pop_ready(now))
        most_kept = max(most_kept, target.kept)
    assert shed == []
    assert 17_000 < most_kept < 18_500
    assert released > 35_000


def test_a_byte_bound_holds_as_well() -> None:
    app = App()
    openinference_rag(app)
    (part,) = parts_of(app.spans()[:2])
    target = assembler(max_bytes=len(part.data) - 1)
    add(target, part, "m1", now=0.0)
    (early,) = target.pop_ready(0.0)
    assert early.reason == "pending_limit" and target.bytes == 0


def test_traces_of_partitions_that_went_elsewhere_are_dropped_unreleased() -> None:
    app, other = App(), App()
    openinference_rag(app)
    openinference_rag(other)
    (part,) = parts_of(app.spans()[:1])
    (whole,) = parts_of(other.spans())
    target = assembler()
    target.add(part.trace_id, part.data, part.shapes, "m1", 0.0, group="p0")
    target.add(whole.trace_id, whole.data, whole.shapes, "m2", 0.0, group="p0")
    assert len(target.pop_ready(0.0)) == 1
    assert target.drop_pending({"p0", "p1"}) == 0
    assert target.drop_pending({"p1"}) == 1, "the unreleased trace is the new owner's"
    assert (target.pending, target.kept) == (0, 1), "a released trace keeps its grace period"
    assert target.pop_ready(1000.0) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_message_of_several_traces_splits_into_one_part_each(fmt: Fmt) -> None:
    a, b = App("svc-a"), App("svc-b")
    genai_rag(a)
    openinference_rag(b)
    message = encode([*a.spans(), *b.spans()], fmt)
    parts = split_by_trace(message, fmt).parts
    assert [p.trace_id for p in parts] == [hex_trace_id(a.root()), hex_trace_id(b.root())]
    everything = decode_otlp(message, fmt)
    for part in parts:
        alone = decode_otlp(part.data, "otlp_proto")
        assert alone == [s for s in everything if s.trace_id == part.trace_id], (
            "the same spans, resource and scope"
        )
        assert part.span_count == len(alone)
        back = encode_request(part.data, fmt)
        assert decode_otlp(back, fmt) == alone, "a dead letter is readable in the input's format"


def test_a_part_keeps_each_span_under_its_own_resource_and_scope_with_their_schema_urls() -> None:
    """Parts are written on the wire from the export's bytes: each must be the request that
    copying its spans, their resources and scopes (schema URLs, versions, attributes) into a
    new export gives."""
    request = encode_spans(openinference_rag_spans())
    template = request.resource_spans[0].scope_spans[0].spans
    other_trace = bytes(range(1, 17))
    for r in range(2):
        resource_spans = request.resource_spans.add() if r else request.resource_spans[0]
        resource_spans.resource.attributes.add(key="service.name").value.string_value = f"s{r}"
        resource_spans.schema_url = f"https://example.com/resource/{r}"
        for s in range(2):
            scope_spans = (
                resource_spans.scope_spans.add() if r or s else resource_spans.scope_spans[0]
            )
            scope_spans.scope.name, scope_spans.scope.version = f"scope-{r}-{s}", "1.2"
            scope_spans.schema_url = "" if s else f"https://example.com/scope/{r}"
            if r or s:
                scope_spans.spans.extend(template)
            scope_spans.spans.append(template[0])
            scope_spans.spans[-1].trace_id = other_trace
            scope_spans.spans[-1].span_id = bytes([r + 1, s + 1, 3, 4, 5, 6, 7, 8])
    parts = split_by_trace(request.SerializeToString(), "otlp_proto").parts
    assert len(parts) == 2
    for part in parts:
        expected = type(request)()
        for resource_spans in request.resource_spans:
            kept = expected.resource_spans.add()
            kept.resource.CopyFrom(resource_spans.resource)
            kept.schema_url = resource_spans.schema_url
            for scope_spans in resource_spans.scope_spans:
                scope = kept.scope_spans.add()
                scope.scope.CopyFrom(scope_spans.scope)
                scope.schema_url = scope_spans.schema_url
                scope.spans.extend(
                    span for span in scope_spans.spans if span.trace_id.hex() == part.trace_id
                )
        assert type(request).FromString(part.data) == expected


def test_both_signals_number_resources_scopes_and_items_as_the_split_writes_them() -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    for request_type in (ExportTraceServiceRequest, ExportLogsServiceRequest):
        (resources,) = request_type.DESCRIPTOR.fields
        assert resources.number == 1
        numbers = {f.number: f for f in resources.message_type.fields}
        assert numbers[1].name == "resource" and numbers[3].name == "schema_url"
        scope_fields = {f.number: f.name for f in numbers[2].message_type.fields}
        assert scope_fields[1] == "scope" and scope_fields[3] == "schema_url"
        assert scope_fields[2] in ("spans", "log_records")


def test_a_span_less_export_splits_into_nothing() -> None:
    request = encode_spans(openinference_rag_spans())
    del request.resource_spans[0].scope_spans[0].spans[:]
    assert split_by_trace(request.SerializeToString(), "otlp_proto").parts == []


def test_a_malformed_id_in_the_only_trace_makes_the_whole_message_undecodable() -> None:
    request = encode_spans(openinference_rag_spans())
    request.resource_spans[0].scope_spans[0].spans[1].span_id = b"short"
    with pytest.raises(OtlpDecodeError) as caught:
        split_by_trace(request.SerializeToString(), "otlp_proto")
    assert caught.value.reason == "invalid_id"


# ---------------------------------------------------------------------------- never crashes


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    for fmt in FORMATS:
        try:
            result = decode_otlp(data, fmt)
        except OtlpDecodeError:
            continue
        assert isinstance(result, list)
    assert detect_format(data) in ("native", "otlp_json", "otlp_proto")


def _real_messages() -> Iterator[bytes]:
    app = App()
    openinference_rag(app)
    genai_rag(app)
    _old_events(app, "message_events")
    yield encode(app.spans(), "otlp_proto")


REAL_PROTO = next(_real_messages())
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_real_messages_never_crash_decoding_or_mapping(data: st.DataObject) -> None:
    message = bytearray(REAL_PROTO)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(message) - 1))
        message[position] = data.draw(st.integers(0, 255))
    try:
        spans = decode_otlp(bytes(message), "otlp_proto")
    except OtlpDecodeError:
        return
    try:
        result = spans_to_trace(spans)
    except OtlpMappingError:
        return
    assert result is None or isinstance(result, Trace)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    span=st.dictionaries(
        st.sampled_from(
            [
                "traceId",
                "spanId",
                "parentSpanId",
                "name",
                "kind",
                "startTimeUnixNano",
                "endTimeUnixNano",
                "attributes",
                "events",
                "status",
            ]
        ),
        JSON_VALUES,
        max_size=6,
    ),
    attributes=st.lists(
        st.fixed_dictionaries({"key": st.text(max_size=30), "value": JSON_VALUES}), max_size=5
    ),
)
def test_odd_json_shapes_never_crash(span: dict[str, Any], attributes: list[Any]) -> None:
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "attributes": attributes,
        **span,
    }
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    try:
        spans = decode_otlp(json.dumps(document).encode(), "otlp_json")
    except OtlpDecodeError:
        return
    try:
        result = spans_to_trace(spans)
    except OtlpMappingError:
        return
    assert result is None or isinstance(result, Trace)


def test_event_parts_ride_beside_the_spans_and_decide_nothing_about_completeness() -> None:
    app = App()
    openinference_rag(app)
    spans = app.spans()
    (children,) = parts_of(spans[:2])
    (root,) = parts_of(spans[2:])
    target = assembler(max_seconds=10.0)
    trace_id = children.trace_id
    assert target.add(trace_id, b"events-1", (), "logs-1", 0.0, events=True) == "held"
    assert target.pop_ready(5.0) == [], "log records alone make no trace complete"
    add(target, children, "m1", now=5.0)
    add(target, root, "m2", now=5.0)
    (done,) = target.pop_ready(5.0)
    assert done.complete and done.event_parts == (b"events-1",) and len(done.parts) == 2
    assert done.origin == "m1", "dead-letter provenance: the spans' message, not the logs'"
    assert done.tokens == ("logs-1", "m1", "m2")
    assert target.add(trace_id, b"events-1", (), "logs-again", 6.0, events=True) == "duplicate"
    assert target.add(trace_id, b"events-2", (), "logs-2", 6.0, events=True) == "held"
    (revised,) = target.pop_ready(6.0)
    assert revised.revision == 2 and revised.event_parts == (b"events-1", b"events-2")
    assert revised.tokens == ("logs-2",)


def test_a_held_release_waits_for_its_next_part_or_the_maximum() -> None:
    app = App()
    openinference_rag(app)
    (whole,) = parts_of(app.spans())
    target = assembler(max_seconds=10.0, grace_seconds=0.0)
    add(target, whole, "m1", now=0.0)
    (first,) = target.pop_ready(1.0)
    assert target.hold(first, 1.0), "taken back: its content may still come"
    assert (target.pending, target.kept) == (1, 0)
    assert target.pop_ready(5.0) == [], "held: no release without news"
    target.add(whole.trace_id, b"events", (), "logs-1", 5.0, events=True)
    (again,) = target.pop_ready(5.0)
    assert again.revision == 1 and again.tokens == ("m1", "logs-1"), "a first release again"
    assert again.note is None
    assert target.hold(again, 6.0)
    (final,) = target.pop_ready(10.0)
    assert final.reason == "max_wait" and final.tokens == ("m1", "logs-1")
    assert not target.hold(final, 10.0), "the maximum has passed: released for good"
    target.note(final.trace_id, 7)
    assert target.pop_ready(10.0) == [] and target.kept == 0, "no grace period: forgotten"
    assert add(target, whole, "m1-later", now=11.0) == "late"


def test_forced_releases_are_never_held_and_held_traces_count_against_the_bound() -> None:
    shed: list[str] = []
    apps = [App() for _ in range(3)]
    for app in apps:
        openinference_rag(app)
    target = TraceAssembler(
        max_seconds=60.0, grace_seconds=0.0, max_traces=2, max_bytes=10**9, on_shed=shed.append
    )
    (first,) = parts_of(apps[0].spans())
    add(target, first, "m0", now=0.0)
    (release,) = target.pop_ready(0.0)
    assert target.hold(release, 0.0)
    for n, app in enumerate(apps[1:], start=1):
        (part,) = parts_of(app.spans()[:2])  # children only: pending
        add(target, part, f"m{n}", now=float(n))
    assert shed == ["pending_limit"]
    (early,) = target.pop_ready(2.0)
    assert early.trace_id == first.trace_id, "the held trace was seen first: shed first"
    assert early.reason == "pending_limit" and not target.hold(early, 2.0)
    assert all(not target.hold(r, 3.0) for r in target.flush(3.0))


def test_a_held_trace_dropped_at_a_rebalance_and_read_again_keeps_only_its_new_deadline() -> None:
    app = App()
    openinference_rag(app)
    (whole,) = parts_of(app.spans())
    target = assembler(max_seconds=10.0, grace_seconds=30.0)
    target.add(whole.trace_id, whole.data, whole.shapes, "m1", 0.0, group="p0")
    (first,) = target.pop_ready(0.0)
    assert target.hold(first, 0.0)
    assert target.drop_pending({"p1"}) == 1, "its partition went to another replica"
    assert target.pending == 0 and target.bytes == 0
    # the partition comes back: its spans are read again, from the uncommitted offset
    target.add(whole.trace_id, whole.data, whole.shapes, "m1-again", 5.0, group="p0")
    (again,) = target.pop_ready(5.0)
    assert again.tokens == ("m1-again",) and target.hold(again, 5.0)
    assert target.pop_ready(12.0) == [], "the dropped entry's deadline (10 s) is not this one's"
    (final,) = target.pop_ready(15.0)
    assert final.reason == "max_wait" and final.tokens == ("m1-again",)
