"""Retrieved documents as OpenLLMetry's LangChain and LlamaIndex instrumentations record them.

The spans are made with the real OpenTelemetry SDK carrying the attributes observed from the
real packages (a `RunnableParallel(context=<BaseRetriever>, question=RunnablePassthrough()) |
generate` chain under opentelemetry-instrumentation-langchain 0.62.4 and 0.52.6; a
`RetrieverQueryEngine` under opentelemetry-instrumentation-llamaindex 0.62.4 with
llama-index-core 0.14.25), plus the shapes their source says other versions write
(opentelemetry-instrumentation-llamaindex 0.53.3 serialises a NodeWithScore with `.json()`,
without `class_name`). The real packages run end to end in tests/test_instrumentation_e2e.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from monitor.formats.otlp import SpanRecord, decode_otlp, spans_to_trace
from monitor.models import Trace
from tests.support.otlp_spans import App, encode

QUESTION = "How much water does the Aurora kettle hold?"
ANSWER = "The Aurora kettle holds 1.7 litres of water."
CAPACITY = "The Aurora kettle holds 1.7 litres of water. It boils a full kettle in four minutes."
WARRANTY = "The Aurora kettle has a two-year warranty. Repairs under warranty are free of charge."
DOCS = [("kettle-capacity", CAPACITY, 0.9), ("kettle-warranty", WARRANTY, 0.8)]
SESSION = {"traceloop.association.properties.session_id": "conv-1"}


def _spans(app: App) -> list[SpanRecord]:
    return decode_otlp(encode(app.spans(), "otlp_proto"), "otlp_proto")


def _trace(app: App) -> Trace:
    trace = spans_to_trace(_spans(app))
    assert isinstance(trace, Trace)
    return trace


def _contexts(trace: Trace) -> list[tuple[str, str, float | None]]:
    return [(c.id, c.text, c.score) for c in trace.contexts]


@contextmanager
def _span(
    app: App, name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: Any
) -> Iterator[None]:
    with app.tracer.start_as_current_span(name, kind=kind, attributes=attributes):
        yield


def _openai_chat(app: App, prompt: str, *, indexed: bool = False) -> AbstractContextManager[None]:
    """The OpenAI instrumentation's span of the answering call: GenAI messages (0.62.4) or
    indexed `gen_ai.prompt.N.*` attributes (0.52.6)."""
    if indexed:
        messages: dict[str, Any] = {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": prompt,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": ANSWER,
        }
    else:
        messages = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
            ),
        }
    attributes = {**SESSION, "gen_ai.request.model": "gpt-4o-mini", **messages}
    return _span(app, "openai.chat", SpanKind.CLIENT, **attributes)


# ============================================================================ LangChain


def _serialised(doc_id: str | None, text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """A LangChain Document as `Document.to_json()` gives it (the instrumentations' encoder)."""
    kwargs: dict[str, Any] = {"metadata": metadata, "page_content": text, "type": "Document"}
    if doc_id is not None:
        kwargs = {"id": doc_id, **kwargs}
    return {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "document", "Document"],
        "kwargs": kwargs,
    }


def _lc_docs(docs: list[tuple[str, str, float]]) -> list[dict[str, Any]]:
    return [_serialised(i, text, {"id": i, "score": score}) for i, text, score in docs]


def _step_input(inputs: Any, name: str, tag: str) -> str:
    return json.dumps(
        {
            "inputs": inputs,
            "tags": [tag],
            "metadata": {"session_id": "conv-1"},
            "kwargs": {"run_type": None, "name": name},
        }
    )


def _step_output(outputs: Any, tag: str) -> str:
    return json.dumps({"outputs": outputs, "kwargs": {"tags": [tag]}})


CHAIN = {"traceloop.workflow.name": "RunnableSequence", **SESSION}


def _chain_root(app: App, **attributes: Any) -> AbstractContextManager[None]:
    """The chain's own span: a workflow taking the question and giving the answer."""
    return _span(
        app,
        "RunnableSequence.workflow",
        **CHAIN,
        **{
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "RunnableSequence",
            "traceloop.entity.input": _step_input(QUESTION, "RunnableSequence", "x"),
            "traceloop.entity.output": _step_output(ANSWER, "x"),
            **attributes,
        },
    )


def _prompt(documents: list[dict[str, Any]]) -> str:
    context = "\n".join(d["kwargs"]["page_content"] for d in documents)
    return f"Context:\n{context}\n\nQuestion: {QUESTION}"


def langchain_current(
    app: App,
    retrieved: list[dict[str, Any]] | None,
    *,
    handed: list[dict[str, Any]] | None = None,
) -> None:
    """opentelemetry-instrumentation-langchain 0.62.4: a `vector_db_retrieve <Class>` span
    with the documents as {"documents": [{page_content, metadata}], "count": N} (no
    Document.id), the chain steps as `execute_task`, the OpenAI call's GenAI messages.
    `retrieved` None: content capture off on the retriever (no output recorded)."""
    handed = handed if handed is not None else _lc_docs(DOCS)
    with _chain_root(
        app, **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "RunnableSequence"}
    ):
        parallel = "RunnableParallel<context,question>"
        with _span(
            app,
            f"execute_task {parallel}",
            **CHAIN,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": parallel,
                "gen_ai.operation.name": "execute_task",
                "traceloop.entity.input": _step_input(QUESTION, parallel, "seq:step:1"),
                "traceloop.entity.output": _step_output(
                    {"context": handed, "question": QUESTION}, "seq:step:1"
                ),
            },
        ):
            retriever: dict[str, Any] = {
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "PlanRetriever",
                "gen_ai.operation.name": "vector_db_retrieve",
                "gen_ai.provider.name": "langchain",
            }
            if retrieved is not None:
                retriever["traceloop.entity.input"] = json.dumps(
                    {"query": QUESTION, "tags": ["map:key:context"], "metadata": {}, "kwargs": {}}
                )
                retriever["traceloop.entity.output"] = json.dumps(
                    {"documents": retrieved, "count": len(retrieved)}
                )
            with _span(
                app, "vector_db_retrieve PlanRetriever", SpanKind.CLIENT, **CHAIN, **retriever
            ):
                pass
        with (
            _span(
                app,
                "execute_task generate",
                **CHAIN,
                **{
                    "traceloop.span.kind": "task",
                    "traceloop.entity.name": "generate",
                    "gen_ai.operation.name": "execute_task",
                    "traceloop.entity.input": _step_input(
                        {"context": handed, "question": QUESTION}, "generate", "seq:step:2"
                    ),
                    "traceloop.entity.output": _step_output(ANSWER, "seq:step:2"),
                },
            ),
            _openai_chat(app, _prompt(handed)),
        ):
            pass


def _plain(docs: list[tuple[str, str, float]]) -> list[dict[str, Any]]:
    """Documents as the 0.62.4 retriever span records them: page_content and metadata."""
    return [{"page_content": text, "metadata": {"id": i, "score": s}} for i, text, s in docs]


def test_langchain_retriever_span_gives_the_contexts_once() -> None:
    app = App(service="support-bot")
    langchain_current(app, _plain(DOCS))
    trace = _trace(app)
    assert (trace.query, trace.answer, trace.conversation_id) == (QUESTION, ANSWER, "conv-1")
    assert _contexts(trace) == DOCS, "from the retriever span, not again from the next step"
    assert [c.rank for c in trace.contexts] == [0, 1]
    assert trace.agent == "support-bot"
    assert trace.contexts_without_text is None


def test_langchain_retriever_without_content_uses_the_documents_handed_on() -> None:
    """The retriever recorded nothing, but the generate step's input holds the documents:
    they have text, so nothing is counted without text."""
    app = App()
    langchain_current(app, None)
    trace = _trace(app)
    assert _contexts(trace) == DOCS
    assert trace.contexts_without_text is None


def test_langchain_retriever_that_found_nothing() -> None:
    app = App()
    langchain_current(app, [], handed=[])
    trace = _trace(app)
    assert trace.contexts == [] and trace.contexts_without_text is None


def test_langchain_without_text_anywhere_counts_the_documents() -> None:
    app = App()
    langchain_current(app, None, handed=[])
    trace = _trace(app)
    assert trace.contexts == [] and trace.contexts_without_text == 1


def langchain_052(app: App, steps: list[list[dict[str, Any]]]) -> None:
    """opentelemetry-instrumentation-langchain 0.52.6: no retriever span at all (it has no
    on_retriever_start); the documents only pass through the chain steps as serialised
    Document constructors. `steps`: the documents each step after the retrieval is given,
    the last one calling the model."""
    with _chain_root(app):
        with (
            _span(
                app,
                "RunnableParallel<context,question>.task",
                **CHAIN,
                **{
                    "traceloop.span.kind": "task",
                    "traceloop.entity.input": _step_input(QUESTION, "p", "seq:step:1"),
                    "traceloop.entity.output": _step_output(
                        {"context": steps[0], "question": QUESTION}, "seq:step:1"
                    ),
                },
            ),
            _span(
                app,
                "RunnablePassthrough.task",
                **CHAIN,
                **{
                    "traceloop.span.kind": "task",
                    "traceloop.entity.input": _step_input(QUESTION, "q", "map:key:question"),
                    "traceloop.entity.output": _step_output(QUESTION, "map:key:question"),
                },
            ),
        ):
            pass
        for index, documents in enumerate(steps):
            last = index == len(steps) - 1
            given = {"context": documents, "question": QUESTION}
            with _span(
                app,
                "generate.task" if last else "keep_best.task",
                **CHAIN,
                **{
                    "traceloop.span.kind": "task",
                    "traceloop.entity.input": _step_input(given, "g", f"seq:step:{index + 2}"),
                    "traceloop.entity.output": _step_output(
                        ANSWER if last else {**given, "context": steps[index + 1]},
                        f"seq:step:{index + 2}",
                    ),
                },
            ):
                if last:
                    with _openai_chat(app, _prompt(documents), indexed=True):
                        pass


def test_langchain_052_documents_handed_to_the_generate_step() -> None:
    app = App(service="support-bot")
    langchain_052(app, [_lc_docs(DOCS)])
    trace = _trace(app)
    assert (trace.query, trace.answer, trace.conversation_id) == (QUESTION, ANSWER, "conv-1")
    assert _contexts(trace) == DOCS
    assert trace.contexts_without_text is None


def test_langchain_052_the_step_nearest_the_model_decides() -> None:
    """A step that keeps the best document before generate: the model saw only that one."""
    app = App()
    langchain_052(app, [_lc_docs(DOCS), _lc_docs(DOCS[:1])])
    assert _contexts(_trace(app)) == DOCS[:1]


@pytest.mark.parametrize(
    ("doc_id", "metadata", "expected_id", "source"),
    [
        ("lc-7", {"id": "meta-id"}, "lc-7", None),  # Document.id first
        (None, {"doc_id": "d-1", "source": "kb/a.md"}, "d-1", "kb/a.md"),
        (None, {"_id": "0f3c", "_collection_name": "kb"}, "0f3c", None),  # Qdrant, MongoDB
        (None, {"pk": 451}, "451", None),  # Milvus
        (None, {"source": "kb/a.md", "page": 3}, "ctx-0", "kb/a.md"),  # a source is no id
        (None, {"id": True}, "ctx-0", None),
    ],
)
def test_document_ids_from_metadata(
    doc_id: str | None, metadata: dict[str, Any], expected_id: str, source: str | None
) -> None:
    app = App()
    langchain_052(app, [[_serialised(doc_id, CAPACITY, metadata)]])
    (context,) = _trace(app).contexts
    assert (context.id, context.text, context.source) == (expected_id, CAPACITY, source)


def test_relevance_score_in_metadata() -> None:
    app = App()
    docs = [{"page_content": CAPACITY, "metadata": {"id": "k", "relevance_score": 0.75}}]
    langchain_current(app, docs, handed=[_serialised("k", CAPACITY, docs[0]["metadata"])])
    assert _contexts(_trace(app)) == [("k", CAPACITY, 0.75)]


# ============================================================================ LlamaIndex


def _text_node(doc_id: str, text: str, *, class_name: bool = True) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id_": doc_id,
        "embedding": None,
        "metadata": {"file_name": f"{doc_id}.md"},
        "excluded_embed_metadata_keys": [],
        "excluded_llm_metadata_keys": [],
        "relationships": {},
        "metadata_template": "{key}: {value}",
        "metadata_separator": "\n",
        "text": text,
        "mimetype": "text/plain",
        "start_char_idx": None,
        "end_char_idx": None,
        "text_template": "{metadata_str}\n\n{content}",
    }
    if class_name:
        node["class_name"] = "TextNode"
    return node


def _nodes(docs: list[tuple[str, str, float]], *, class_name: bool = True) -> list[str]:
    """NodeWithScores as OpenLLMetry records them: one JSON string each (`to_json()` from
    0.62.4 with class names, `.json()` from 0.53.3 without)."""
    result = []
    for doc_id, text, score in docs:
        item: dict[str, Any] = {
            "node": _text_node(doc_id, text, class_name=class_name),
            "score": score,
        }
        if class_name:
            item["class_name"] = "NodeWithScore"
        result.append(json.dumps(item))
    return result


def llamaindex(
    app: App,
    retrieved: list[str],
    *,
    reranked: list[str] | None = None,
    rerank_operation: bool = True,
) -> None:
    """opentelemetry-instrumentation-llamaindex (dispatcher, llama-index-core >= 0.10.20): a
    `<Class>.workflow` / `<Class>.task` span per dispatcher span, a retriever's `retrieve` and
    `_retrieve` both named after its class, the synthesizer given the nodes again; a node
    postprocessor between them when `reranked` (a reranker's span also says `rerank`)."""
    query = {"query_str": QUESTION, "image_path": None, "embedding": None}
    given = reranked if reranked is not None else retrieved
    with _span(
        app,
        "RetrieverQueryEngine.workflow",
        **SESSION,
        **{
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "RetrieverQueryEngine.workflow",
            "traceloop.entity.input": json.dumps({"str_or_query_bundle": QUESTION}),
            "traceloop.entity.output": json.dumps({"response": ANSWER, "metadata": {}}),
        },
    ):
        task = {"traceloop.span.kind": "task", **SESSION}
        with _span(
            app,
            "RetrieverQueryEngine.task",
            **task,
            **{
                "traceloop.entity.input": json.dumps({"query_bundle": query}),
                "traceloop.entity.output": json.dumps({"response": ANSWER, "metadata": {}}),
            },
        ):
            retrieve = {**task, "traceloop.entity.output": json.dumps(retrieved)}
            with (
                _span(
                    app,
                    "PlanRetriever.task",
                    **retrieve,
                    **{"traceloop.entity.input": json.dumps({"str_or_query_bundle": query})},
                ),
                _span(
                    app,
                    "PlanRetriever.task",
                    **retrieve,
                    **{"traceloop.entity.input": json.dumps({"query_bundle": query})},
                ),
            ):
                pass
            if reranked is not None:
                rerank = {"gen_ai.operation.name": "rerank"} if rerank_operation else {}
                with _span(
                    app,
                    "LLMRerank.task" if rerank_operation else "SimilarityPostprocessor.task",
                    **task,
                    **rerank,
                    **{
                        "traceloop.entity.input": json.dumps(
                            {"nodes": retrieved, "query_bundle": query}
                        ),
                        "traceloop.entity.output": json.dumps(reranked),
                    },
                ):
                    pass
            with (
                _span(
                    app,
                    "CompactAndRefine.task",
                    **task,
                    **{
                        "traceloop.entity.input": json.dumps({"query": query, "nodes": given}),
                        "traceloop.entity.output": json.dumps({"response": ANSWER}),
                    },
                ),
                _openai_chat(app, f"{CAPACITY}\nQuery: {QUESTION}"),
            ):
                pass


@pytest.mark.parametrize("class_name", [True, False], ids=["0.62.4", "0.53.3"])
def test_llamaindex_retriever_nodes(class_name: bool) -> None:
    app = App(service="support-bot")
    llamaindex(app, _nodes(DOCS, class_name=class_name))
    trace = _trace(app)
    assert (trace.query, trace.answer, trace.conversation_id) == (QUESTION, ANSWER, "conv-1")
    assert _contexts(trace) == DOCS, "once: retrieve and _retrieve are one retrieval"
    assert trace.contexts[0].metadata == {"file_name": "kettle-capacity.md"}


@pytest.mark.parametrize("rerank_operation", [True, False], ids=["reranker", "postprocessor"])
def test_llamaindex_postprocessed_nodes_are_what_the_model_saw(rerank_operation: bool) -> None:
    app = App()
    llamaindex(
        app,
        _nodes(DOCS),
        reranked=_nodes([("kettle-warranty", WARRANTY, 0.97)]),
        rerank_operation=rerank_operation,
    )
    assert _contexts(_trace(app)) == [("kettle-warranty", WARRANTY, 0.97)]


def test_llamaindex_text_resource_nodes() -> None:
    """Nodes of llama-index-core's newer `Node` class keep their text in `text_resource`."""
    node = {"id_": "n-1", "text_resource": {"text": CAPACITY, "mimetype": None}, "metadata": {}}
    app = App()
    llamaindex(app, [json.dumps({"node": node, "score": 0.5})])
    assert _contexts(_trace(app)) == [("n-1", CAPACITY, 0.5)]


def test_llamaindex_legacy_retrieve_task() -> None:
    """opentelemetry-instrumentation-llamaindex before the dispatcher (llama-index < 0.10.20):
    a `retrieve.task` span whose input is the call's {"args", "kwargs"}."""
    app = App()
    with _span(
        app,
        "llama_index_retriever_query.workflow",
        **SESSION,
        **{
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
            "traceloop.entity.output": json.dumps({"response": ANSWER}),
        },
    ):
        with _span(
            app,
            "retrieve.task",
            **SESSION,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "retrieve",
                "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
                "traceloop.entity.output": json.dumps(_nodes(DOCS, class_name=False)),
            },
        ):
            pass
        with _openai_chat(app, "Context..."):
            pass
    trace = _trace(app)
    assert trace.query == QUESTION
    assert _contexts(trace) == DOCS


def test_plain_strings_are_not_parsed_as_nodes() -> None:
    """A text-splitter task returns strings; one that looks like JSON is not a node."""
    app = App()
    llamaindex(app, _nodes(DOCS))
    spans = _spans(app)
    splitter = replace(
        spans[0],
        span_id="00000000000000aa",
        name="TokenTextSplitter.task",
        attributes={
            "traceloop.span.kind": "task",
            "traceloop.entity.input": json.dumps({"text": CAPACITY}),
            "traceloop.entity.output": json.dumps(['{"id_": "x"}', CAPACITY]),
        },
    )
    trace = spans_to_trace([*spans, splitter])
    assert trace is not None and _contexts(trace) == DOCS
