"""The mapping rules that decide question, answer, contexts, agent and whether a trace is a RAG
turn at all, on spans recorded with the real SDK in the shapes the real instrumentations emit
(attribute names and values as observed from traceloop-sdk 0.52.6 and 0.62.4,
openinference-instrumentation-langchain 0.1.80 and opentelemetry-util-genai 1.1b0; the
end-to-end runs of those packages are in tests/test_instrumentation_e2e.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from monitor.formats.otlp import OtlpMappingError, SpanRecord, decode_otlp, spans_to_trace
from monitor.models import Trace
from tests.support.otlp_spans import App, encode

QUESTION = "How long is the warranty of the Aurora kettle?"
ANSWER = "The Aurora kettle has a two-year warranty."
DOC = "The Aurora kettle has a two-year warranty. Repairs under warranty are free of charge."
RENDERED = f"Context:\n[kettle-warranty] {DOC}\n\nQuestion: {QUESTION}"
SESSION = {"traceloop.association.properties.session_id": "conv-1"}


def _spans(app: App) -> list[SpanRecord]:
    return decode_otlp(encode(app.spans(), "otlp_proto"), "otlp_proto")


def _trace(spans: list[SpanRecord], **options: Any) -> Trace:
    trace = spans_to_trace(spans, **options)
    assert isinstance(trace, Trace)
    return trace


def _lc_document(doc_id: str, text: str, score: float) -> dict[str, Any]:
    return {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "document", "Document"],
        "kwargs": {
            "id": doc_id,
            "metadata": {"id": doc_id, "score": score},
            "page_content": text,
            "type": "Document",
        },
    }


@contextmanager
def _span(
    app: App, name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: Any
) -> Iterator[None]:
    with app.tracer.start_as_current_span(name, kind=kind, attributes=attributes):
        yield


def traceloop_current(app: App, *, session: bool = True, with_root: bool = True) -> None:
    """traceloop-sdk 0.62.4: @workflow / @task spans, LangChain spans with GenAI operations
    (the chain as an invoke_agent named after its class), messages as gen_ai.input.messages."""
    common = SESSION if session else {}
    with (
        _span(
            app,
            "rag_answer.workflow",
            **common,
            **{
                "traceloop.span.kind": "workflow",
                "traceloop.entity.name": "rag_answer",
                "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
                "traceloop.entity.output": json.dumps(ANSWER),
            },
        )
        if with_root
        else _null()
    ):
        with _span(
            app,
            "vector_db_retrieve.task",
            **common,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "vector_db_retrieve",
                "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
                "traceloop.entity.output": json.dumps(
                    [_lc_document("kettle-warranty", DOC, 0.9), _lc_document("x", "Other.", 0.1)]
                ),
            },
        ):
            pass
        with (
            _span(
                app,
                "RunnableSequence.workflow",
                **common,
                **{
                    "traceloop.span.kind": "workflow",
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "RunnableSequence",
                    "traceloop.entity.input": json.dumps(
                        {"inputs": {"context": DOC, "question": QUESTION}, "tags": []}
                    ),
                    "traceloop.entity.output": json.dumps({"outputs": ANSWER, "kwargs": {}}),
                },
            ),
            _span(
                app,
                "ChatOpenAI.chat",
                SpanKind.CLIENT,
                **common,
                **{
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.system_instructions": json.dumps(
                        [{"type": "text", "content": "Answer from the context."}]
                    ),
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": RENDERED}]}]
                    ),
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
                    ),
                    "gen_ai.usage.input_tokens": 82,
                    "gen_ai.usage.output_tokens": 10,
                },
            ),
        ):
            pass


@contextmanager
def _null() -> Iterator[None]:
    yield


def test_traceloop_current() -> None:
    app = App(service="support-bot")
    traceloop_current(app)
    trace = _trace(_spans(app))
    assert trace.query == QUESTION, "the workflow's argument, not the rendered prompt"
    assert trace.answer == ANSWER
    assert [(c.id, c.text, c.score, c.rank) for c in trace.contexts] == [
        ("kettle-warranty", DOC, 0.9, 0),
        ("x", "Other.", 0.1, 1),
    ]
    assert trace.conversation_id == "conv-1"
    assert trace.agent == "support-bot", "RunnableSequence is a class name, not an agent"
    assert trace.model == "gpt-4o-mini"
    assert trace.usage is not None and trace.usage.input_tokens == 82
    assert trace.metadata is not None
    assert trace.metadata["system_instructions"] == "Answer from the context."


def test_traceloop_052_indexed_prompts() -> None:
    """traceloop-sdk 0.52.6: the OpenAI span has llm.request.type and gen_ai.prompt.N.*."""
    app = App(service="support-bot")
    with _span(
        app,
        "rag_answer.workflow",
        **SESSION,
        **{
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
            "traceloop.entity.output": json.dumps(ANSWER),
        },
    ):
        with _span(
            app,
            "vector_db_retrieve.task",
            **SESSION,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "vector_db_retrieve",
                "traceloop.entity.output": json.dumps([_lc_document("kettle-warranty", DOC, 0.9)]),
            },
        ):
            pass
        with _span(
            app,
            "openai.chat",
            SpanKind.CLIENT,
            **SESSION,
            **{
                "llm.request.type": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.prompt.0.role": "system",
                "gen_ai.prompt.0.content": "Answer from the context.",
                "gen_ai.prompt.1.role": "user",
                "gen_ai.prompt.1.content": RENDERED,
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": ANSWER,
            },
        ):
            pass
    trace = _trace(_spans(app))
    assert (trace.query, trace.answer, trace.conversation_id) == (QUESTION, ANSWER, "conv-1")
    assert [c.id for c in trace.contexts] == ["kettle-warranty"]


def test_an_intermediate_step_never_gives_the_answer() -> None:
    """Without the root span (released incomplete) the answer is the LLM call's; without the
    LLM call too there is no answer at all -- never the chain step's output."""
    app = App()
    traceloop_current(app)
    spans = _spans(app)
    no_root = [s for s in spans if s.name != "rag_answer.workflow"]
    trace = _trace(no_root)
    assert trace.answer == ANSWER
    mangled = [s for s in no_root if s.name != "ChatOpenAI.chat"]
    chain = next(s for s in mangled if s.name == "RunnableSequence.workflow")
    mangled = [
        s if s is not chain else _with(s, {"traceloop.entity.output": json.dumps(DOC)})
        for s in mangled
    ]
    with pytest.raises(OtlpMappingError) as caught:
        spans_to_trace(mangled)
    assert caught.value.reason == "no_answer"


def _with(span: SpanRecord, attributes: dict[str, Any]) -> SpanRecord:
    return replace(span, attributes={**span.attributes, **attributes})


def test_a_rendered_prompt_is_never_the_question() -> None:
    """Only the LLM call's user message says what was asked, and it holds the retrieved
    document: it is the filled-in template, so the trace cannot say what the user asked."""
    app = App()
    with _span(
        app,
        "retrieve",
        **{"openinference.span.kind": "RETRIEVER", "session.id": "c"},
        **{"retrieval.documents.0.document.content": DOC, "retrieval.documents.0.document.id": "d"},
    ):
        pass
    with _span(
        app,
        "llm",
        **{"openinference.span.kind": "LLM", "session.id": "c"},
        **{
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": RENDERED,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": ANSWER,
        },
    ):
        pass
    spans = _spans(app)
    trace_id = spans[0].trace_id
    same_trace = [s if s.trace_id == trace_id else _retrace(s, trace_id) for s in spans]
    with pytest.raises(OtlpMappingError) as caught:
        spans_to_trace(same_trace)
    assert caught.value.reason == "no_query"
    assert "rendered prompt" in caught.value.detail


def _retrace(span: SpanRecord, trace_id: str) -> SpanRecord:
    return replace(span, trace_id=trace_id)


def _chat(app: App, **attributes: Any) -> None:
    with _span(
        app,
        "ChatCompletion",
        SpanKind.CLIENT,
        **{
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": QUESTION,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": ANSWER,
            **attributes,
        },
    ):
        pass


@pytest.mark.parametrize(
    ("pipeline", "session", "is_turn"),
    [
        (False, False, False),  # a bare LLM call
        (False, True, False),  # OpenInference's own trace of an OpenAI call inside a chain
        (True, False, False),  # a chain without retrieval or conversation
        (True, True, True),  # a chat turn of a conversation, without retrieval
    ],
)
def test_plain_llm_calls_are_not_rag_turns_unless_asked(
    pipeline: bool, session: bool, is_turn: bool
) -> None:
    app = App()
    attributes = {"session.id": "conv-9"} if session else {}
    if pipeline:
        with _span(
            app,
            "chat_chain",
            **{"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": ANSWER},
            **attributes,
        ):
            _chat(app, **attributes)
    else:
        _chat(app, **attributes)
    spans = _spans(app)
    assert (spans_to_trace(spans) is not None) == is_turn
    trace = _trace(spans, score_plain_llm_calls=True)
    assert (trace.query, trace.answer, trace.contexts) == (QUESTION, ANSWER, [])


@pytest.mark.parametrize(
    ("attributes", "service", "agent"),
    [
        ({"gen_ai.agent.name": "billing-agent"}, "rag-api", "billing-agent"),
        ({"agent.name": "faq"}, "rag-api", "faq"),
        ({"gen_ai.agent.name": "RunnableSequence"}, "rag-api", "rag-api"),
        ({"gen_ai.agent.name": "AgentExecutor"}, "rag-api", "rag-api"),
        ({}, "unknown_service:python", "default"),
    ],
)
def test_agent_is_an_explicit_name_or_the_service(
    attributes: dict[str, Any], service: str, agent: str
) -> None:
    app = App(service=service)
    with _span(
        app,
        "chain",
        **{"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": ANSWER},
        **{"session.id": "c", **attributes},
    ):
        _chat(app)
    assert _trace(_spans(app)).agent == agent


@pytest.mark.parametrize(
    ("documents", "top_k", "expected"),
    [
        (None, 4, 4),  # content capture off: no documents recorded, top_k says how many
        (None, None, 1),
        (json.dumps([{"id": "a", "score": 0.9}, {"id": "b", "score": 0.5}]), None, 2),
    ],
)
def test_genai_retrieval_without_text_is_counted(
    documents: str | None, top_k: int | None, expected: int
) -> None:
    app = App()
    retrieval: dict[str, Any] = {"gen_ai.operation.name": "retrieval"}
    if documents is not None:
        retrieval["gen_ai.retrieval.documents"] = documents
    if top_k is not None:
        retrieval["gen_ai.request.top_k"] = top_k
    with _span(
        app,
        "invoke_workflow",
        **{
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [QUESTION]}]),
        },
    ):
        with _span(app, "retrieval", SpanKind.CLIENT, **retrieval):
            pass
        _chat(app)
    trace = _trace(_spans(app))
    assert trace.query == QUESTION
    assert trace.contexts == [] and trace.contexts_without_text == expected


def test_openinference_langchain_documents_keep_their_id_and_score_in_metadata() -> None:
    app = App()
    with _span(
        app,
        "RunnableSequence",
        **{"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": ANSWER},
    ):
        with _span(
            app,
            "PlanRetriever",
            **{
                "openinference.span.kind": "RETRIEVER",
                "input.value": QUESTION,
                "retrieval.documents.0.document.content": DOC,
                "retrieval.documents.0.document.metadata": json.dumps(
                    {"id": "kettle-warranty", "score": 0.9}
                ),
            },
        ):
            pass
        _chat(app)
    (context,) = _trace(_spans(app)).contexts
    assert (context.id, context.score) == ("kettle-warranty", 0.9)


@pytest.mark.parametrize(
    ("task", "output", "contexts"),
    [
        ("search_kb", [DOC, "Other."], [DOC, "Other."]),
        ("search_kb", [{"text": DOC, "id": "k"}], [DOC]),
        ("format_answer", [DOC], []),  # not named like a retriever: just a list of strings
        ("summarise", [_lc_document("k", DOC, 0.5)], [DOC]),  # LangChain documents anyhow
    ],
)
def test_traceloop_tasks_that_return_documents_are_retrievers(
    task: str, output: list[Any], contexts: list[str]
) -> None:
    app = App()
    with _span(
        app,
        "rag.workflow",
        **{
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"question": QUESTION}}),
            "traceloop.entity.output": json.dumps(ANSWER),
            **SESSION,
        },
    ):
        with _span(
            app,
            f"{task}.task",
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": task,
                "traceloop.entity.output": json.dumps(output),
            },
        ):
            pass
        _chat(app)
    trace = _trace(_spans(app))
    assert trace.query == QUESTION, "a keyword argument named like a question"
    assert [c.text for c in trace.contexts] == contexts


def test_the_attribute_index_gives_every_prefix_what_indexed_groups_gives() -> None:
    """The mapping reads a span's `prefix.N.rest` groups from one index made in one pass
    (issue 26): for every prefix it is what grouping the attributes for that prefix gives."""
    from monitor.formats.otlp_values import attribute_index, indexed_groups

    attributes = {
        "llm.input_messages.1.message.content": "second",
        "llm.input_messages.0.message.content": "first",
        "llm.input_messages.0.message.contents.1.message_content.text": "b",
        "llm.input_messages.0.message.contents.0.message_content.text": "a",
        "retrieval.documents.10.document.content": "ten",
        "retrieval.documents.2.document.content": "two",
        "gen_ai.request.model": "m",
        "a.2": "no rest",
        "a.3.": "empty rest",
        "a.1234567890.b": "ten digits",
        ".0.z": "empty prefix",
    }
    index = attribute_index(attributes)
    prefixes = {key[:end] for key in attributes for end in range(len(key) + 1)}
    for prefix in prefixes:
        assert index.get(prefix, []) == indexed_groups(attributes, prefix), prefix
    assert [g["message.content"] for g in index["llm.input_messages"]] == ["first", "second"]
    assert [g["document.content"] for g in index["retrieval.documents"]] == ["two", "ten"]
