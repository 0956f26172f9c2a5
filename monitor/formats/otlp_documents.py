"""Retrieved documents in the shapes instrumentations record them (used by the OTLP mapping).

A document found is a dict {id, content, score, source, metadata}, any of them None. Shapes
read, every attribute and key named in `monitor.formats.otlp_conventions`:

- flattened `retrieval.documents.N.document.*` (OpenInference), a JSON list
  (`gen_ai.retrieval.documents`), one event per document (OpenLLMetry's vector stores);
- a retriever's or task's output (`traceloop.entity.output`): LangChain documents, serialised
  (`{"lc": 1, ..., "kwargs": {"page_content", "metadata", "id"}}`) or not
  (`{"page_content", "metadata"}`, Traceloop's LangChain retriever span, as
  `{"documents": [...], "count": N}`), LlamaIndex `NodeWithScore`s (one JSON string each), or
  plain texts and dicts from a span that says it retrieves;
- documents handed to a later step, anywhere in its input value (`handed_documents`).

Ids: the document's own (`id`, `id_` of a LlamaIndex node), else its metadata's
(METADATA_ID_KEYS).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.formats.otlp_conventions import (
    DOCUMENT_ID_KEYS,
    DOCUMENT_TEXT_KEYS,
    DOCUMENTS,
    HANDED_DOCUMENTS,
    LANGCHAIN_DOCUMENT_CLASS,
    LANGCHAIN_DOCUMENT_TEXT,
    LLAMAINDEX_NODE,
    LLAMAINDEX_NODE_ID,
    LLAMAINDEX_NODE_TEXT,
    LLAMAINDEX_TEXT_RESOURCE,
    METADATA_ID_KEYS,
    METADATA_SCORE_KEYS,
    RETRIEVAL_COUNT,
    RETRIEVER_NAME,
    VALUE_OUTPUTS,
    EventDocuments,
    IndexedDocuments,
    JsonDocuments,
    Role,
)
from monitor.formats.otlp_records import SpanRecord
from monitor.formats.otlp_values import (
    dict_or_none,
    maybe_json,
    non_negative_int,
    text_or_none,
    unwrap,
)

__all__ = [
    "Retrieval",
    "given_documents",
    "handed_documents",
    "last_handed_documents",
    "retrievals",
    "span_documents",
]

Document = dict[str, Any]
MAX_SEARCH_DEPTH = 6  # how deep in a step's input documents are looked for


@dataclass(frozen=True, slots=True)
class Retrieval:
    """A span that produced documents. It `refines` when it re-ranks or filters documents it
    was given: a reranker, or a step whose input already held documents (a LlamaIndex node
    postprocessor, a LangChain step that filters the retriever's output)."""

    span: SpanRecord
    documents: list[Document]
    refines: bool


def retrievals(ordered: Sequence[SpanRecord], roles: Mapping[str, Role]) -> list[Retrieval]:
    """Every span of a trace that produced documents, in `ordered`'s order, except those
    inside another that produced some: an inner call is part of the outer one's work (a
    LlamaIndex retriever's `retrieve` and `_retrieve`, a fusion retriever's sources, a
    LangChain retriever inside a step that returns its documents), and the outer one's
    documents are what the pipeline got."""
    found: dict[str, Retrieval] = {}
    for span in ordered:
        docs = span_documents(span, roles[span.span_id])
        if docs is not None:
            refines = roles[span.span_id] == "reranker" or (
                bool(docs) and handed_documents(span) is not None
            )
            found[span.span_id] = Retrieval(span, docs, refines)
    parents = {s.span_id: s.parent_span_id for s in ordered}
    producing = {span_id for span_id, r in found.items() if r.documents}
    return [r for r in found.values() if not _inside(r.span.span_id, parents, producing)]


def given_documents(found: Sequence[Retrieval]) -> list[Document]:
    """The documents the model was given: the last refining step's (when it kept any), else
    every retrieval's, in order."""
    refined = [r.documents for r in found if r.refines and r.documents]
    if refined:
        return refined[-1]
    return [doc for r in found if not r.refines for doc in r.documents]


def _inside(span_id: str, parents: Mapping[str, str | None], spans: set[str]) -> bool:
    seen: set[str] = set()
    parent = parents.get(span_id)
    while parent is not None and parent not in seen:
        if parent in spans:
            return True
        seen.add(parent)
        parent = parents.get(parent)
    return False


def span_documents(span: SpanRecord, role: Role) -> list[Document] | None:
    """The documents a span retrieved, in order; None if it is not a retrieval.

    A retriever or reranker that recorded no documents and no output at all (content capture
    off) gives one empty document per document it says it retrieved (at least one): documents
    without text, so the trace says what it cannot show.
    """
    a = span.attributes
    for source in DOCUMENTS:
        if isinstance(source, IndexedDocuments):
            groups = span.indexed(source.prefix)
            if groups:
                return [_indexed_document(g) for g in groups]
        elif isinstance(source, JsonDocuments):
            if source.attribute in a:
                docs = maybe_json(a.get(source.attribute))
                items = docs if isinstance(docs, list) else []
                return [_json_document(d) for d in items if isinstance(d, dict)]
        elif isinstance(source, EventDocuments):
            results = [e.attributes for e in span.events if e.name == source.event]
            if results:
                return [_event_document(r, source.fields) for r in results]
        elif (
            role in ("task", "retriever", "reranker")
            and (docs := _output_documents(span, source.attribute, role)) is not None
        ):
            return docs
    if role in ("retriever", "reranker"):
        return [] if any(k in a for k in VALUE_OUTPUTS) else _uncaptured(span)
    return None


def last_handed_documents(
    ordered: Sequence[SpanRecord], roles: Mapping[str, Role], until_ns: int
) -> list[Document] | None:
    """The documents handed to the last step starting by `until_ns` (the answering LLM call's
    start) whose input holds any: the step nearest the model, after any that filtered them."""
    handed = (
        docs
        for span in reversed(ordered)
        if roles[span.span_id] != "llm" and span.start_time_unix_nano <= until_ns
        if (docs := handed_documents(span)) is not None
    )
    return next(handed, None)


def handed_documents(span: SpanRecord) -> list[Document] | None:
    """The documents in a span's input value (every list of them, in order); None if none."""
    for attribute in HANDED_DOCUMENTS:
        found: list[Document] = []
        _collect(maybe_json(span.attributes.get(attribute)), found, 0)
        if found:
            return found
    return None


def _collect(value: Any, found: list[Document], depth: int) -> None:
    if depth > MAX_SEARCH_DEPTH:
        return
    value = unwrap(value)
    if isinstance(value, list):
        docs = _document_list(value)
        if docs is not None:
            found.extend(docs)
            return
        for item in value:
            _collect(item, found, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found, depth + 1)


def _document_list(items: list[Any]) -> list[Document] | None:
    """The documents of a non-empty list of LangChain documents or LlamaIndex nodes."""
    docs = [_framework_document(item) for item in items]
    if not docs or any(doc is None for doc in docs):
        return None
    return [doc for doc in docs if doc is not None]


def _framework_document(item: Any) -> Document | None:
    """A LangChain document or a LlamaIndex node (or NodeWithScore, possibly as JSON text)."""
    item = maybe_json(item)
    if not isinstance(item, dict):
        return None
    node = item.get(LLAMAINDEX_NODE)
    if isinstance(node, dict) and _is_llamaindex_node(node):
        return _llamaindex_document(node, item.get("score"))
    if _is_llamaindex_node(item):
        return _llamaindex_document(item, item.get("score"))
    class_path = item.get("id")
    serialised_document = (
        item.get("lc") is not None
        and isinstance(class_path, list)
        and class_path[-1:] == [LANGCHAIN_DOCUMENT_CLASS]
    )
    fields = unwrap(item)
    if isinstance(fields, dict) and (serialised_document or LANGCHAIN_DOCUMENT_TEXT in fields):
        return _json_document(fields)
    return None


def _is_llamaindex_node(value: dict[str, Any]) -> bool:
    return LLAMAINDEX_NODE_ID in value and (
        LLAMAINDEX_NODE_TEXT in value or LLAMAINDEX_TEXT_RESOURCE in value
    )


def _llamaindex_document(node: dict[str, Any], score: Any) -> Document:
    text = node.get(LLAMAINDEX_NODE_TEXT)
    resource = node.get(LLAMAINDEX_TEXT_RESOURCE)
    if text_or_none(text) is None and isinstance(resource, dict):
        text = resource.get(LLAMAINDEX_NODE_TEXT)
    metadata = dict_or_none(node.get("metadata"))
    return {
        "id": node.get(LLAMAINDEX_NODE_ID),
        "content": text,
        "score": score,
        "metadata": metadata,
    }


def _output_documents(span: SpanRecord, attribute: str, role: Role) -> list[Document] | None:
    """A retriever's or task's output when it is a list of documents: LangChain documents and
    LlamaIndex nodes whatever the span, plain texts or dicts from a retriever span or a task
    whose name says it retrieves."""
    value = maybe_json(span.attributes.get(attribute))
    if isinstance(value, dict):
        value = value.get("documents", value.get("outputs"))
    if not isinstance(value, list) or not value:
        return None
    docs = _document_list(value)
    if docs is not None:
        return docs
    name = span.attributes.get("traceloop.entity.name", span.name)
    if role != "retriever" and not RETRIEVER_NAME.search(str(name)):
        return None
    if all(isinstance(item, str) for item in value):
        return [{"content": item} for item in value]
    if all(isinstance(item, dict) and "role" not in item for item in value):
        return [_json_document(item) for item in value]
    return None


def _uncaptured(span: SpanRecord) -> list[Document]:
    count = next((c for k in RETRIEVAL_COUNT if (c := non_negative_int(span.attributes.get(k)))), 1)
    return [{} for _ in range(min(count, 1000))]


def _metadata_id(metadata: dict[str, Any] | None) -> Any:
    for key in METADATA_ID_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return value
    return None


def _metadata_score(metadata: dict[str, Any] | None) -> Any:
    return next(
        (v for k in METADATA_SCORE_KEYS if (v := (metadata or {}).get(k)) is not None), None
    )


def _indexed_document(group: dict[str, Any]) -> Document:
    metadata = dict_or_none(group.get("document.metadata"))
    doc_id = group.get("document.id")
    score = group.get("document.score")
    return {
        "id": doc_id if doc_id is not None else _metadata_id(metadata),
        "content": group.get("document.content"),
        "score": score if score is not None else _metadata_score(metadata),
        "metadata": metadata,
    }


def _json_document(doc: dict[str, Any]) -> Document:
    known = (*DOCUMENT_ID_KEYS, "score", *DOCUMENT_TEXT_KEYS, "metadata", "source", "source_id")
    extra = {k: v for k, v in doc.items() if k not in known and k not in ("type", "lc")}
    metadata = dict_or_none(doc.get("metadata"), extra)
    content = next((doc[k] for k in DOCUMENT_TEXT_KEYS if text_or_none(doc.get(k))), None)
    doc_id = next((doc[k] for k in DOCUMENT_ID_KEYS if doc.get(k) is not None), None)
    score = doc.get("score")
    return {
        "id": doc_id if doc_id is not None else _metadata_id(metadata),
        "content": content,
        "score": score if score is not None else _metadata_score(metadata),
        "source": doc.get("source", doc.get("source_id")),
        "metadata": metadata,
    }


def _event_document(attributes: Mapping[str, Any], fields: Mapping[str, str]) -> Document:
    value = {name: attributes.get(key) for name, key in fields.items()}
    extra = {k: value[k] for k in value if k not in ("id", "content", "score", "metadata")}
    return {
        "id": value.get("id"),
        "content": value.get("content"),
        "score": value.get("score"),
        "metadata": dict_or_none(value.get("metadata"), extra),
    }
