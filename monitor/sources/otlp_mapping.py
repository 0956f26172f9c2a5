"""Mapping the spans of one trace onto the `Trace` model (used by `monitor.sources.otlp`).

Three families of instrumentation are read, current and still-common older versions:
OpenInference, the OpenTelemetry GenAI semantic conventions (attributes, and events on the
span or in OTLP logs joined to it by `monitor.sources.otlp_logs`) and OpenLLMetry / Traceloop.
Every attribute name read is in the tables of `monitor.sources.otlp_conventions`; this module
decides how the pieces they find make one RAG turn (`spans_to_trace` says how).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from monitor.models import DEFAULT_AGENT, Context, Trace, Usage
from monitor.sources.native import MAX_DETAIL_CHARS
from monitor.sources.otlp_conventions import (
    AGENT_NAME,
    CONVERSATION_ID,
    DEFAULT_SERVICE_NAME,
    DOCUMENT_ID_KEYS,
    DOCUMENT_TEXT_KEYS,
    DOCUMENTS,
    EVENT_TEXT_KEYS,
    FRAMEWORK_CLASS_NAME,
    INPUT_KEYS,
    INPUT_MESSAGES,
    INPUT_TOKENS,
    LEGACY_LLM_MARKERS,
    MODEL,
    OUTPUT_KEYS,
    OUTPUT_MESSAGES,
    OUTPUT_TOKENS,
    PIPELINE_ROLES,
    RETRIEVAL_COUNT,
    RETRIEVAL_QUERY,
    RETRIEVER_NAME,
    SERVICE_NAME,
    SPAN_ROLES,
    SYSTEM_INSTRUCTIONS,
    USER_ID,
    VALUE_INPUTS,
    VALUE_OUTPUTS,
    EventDocuments,
    EventMessages,
    IndexedDocuments,
    IndexedMessages,
    JsonDocuments,
    JsonMessages,
    MessageSource,
    Role,
)

if TYPE_CHECKING:  # otlp.py imports this module; SpanRecord is only needed for annotations
    from monitor.sources.otlp import SpanRecord

__all__ = ["OtlpMappingError", "spans_to_trace"]

MAX_INSTRUCTIONS_CHARS = 4000
SPAN_KIND_CLIENT = 3  # OTLP SpanKind CLIENT: a call to another service


class OtlpMappingError(ValueError):
    """A trace that looks like a RAG turn but cannot become a `Trace`.

    `reason` is a short, bounded label: no_query, no_answer, no_timestamp or invalid_trace.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail[:MAX_DETAIL_CHARS]
        super().__init__(f"{reason}: {self.detail}")


@dataclass(frozen=True, slots=True)
class _Message:
    role: str
    text: str


# ============================================================================ value helpers

_INDEXED = re.compile(r"^(\d{1,9})\.(.+)$")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _maybe_json(value: Any) -> Any:
    """Parse a string that looks like JSON; return anything else (or unparsable text) as is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "[", '"'):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A copy fit for JSON (bytes become base64); bounded depth."""
    if depth > 32:
        return None
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, float) and (value != value or abs(value) == float("inf")):
        return None
    return value


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Group `prefix.N.rest` attributes into one dict of `rest -> value` per N, in N order."""
    groups: dict[int, dict[str, Any]] = {}
    start = len(prefix) + 1
    for key, value in attributes.items():
        if key.startswith(prefix + "."):
            match = _INDEXED.match(key[start:])
            if match:
                groups.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [groups[i] for i in sorted(groups)]


def _unwrap(value: Any) -> Any:
    """Strip framework envelopes around a value: LangChain's serialised objects
    ({"lc": 1, "kwargs": {...}}) and Traceloop's {"inputs": X} / {"outputs": X}."""
    for _ in range(8):
        if not isinstance(value, dict):
            return value
        if value.get("lc") is not None and isinstance(value.get("kwargs"), dict):
            value = value["kwargs"]
        elif "inputs" in value and len(value) <= 3 and "args" not in value:
            value = value["inputs"]
        elif "outputs" in value and len(value) <= 3:
            value = value["outputs"]
        else:
            return value
    return value


# ============================================================================ messages


def _parts_text(parts: Any) -> str | None:
    """Text of GenAI `parts` ([{type: text, content}]) or OpenAI-style content lists."""
    if isinstance(parts, str):
        return _text(parts)
    if not isinstance(parts, list):
        return None
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") in (
            "text",
            "input_text",
            "output_text",
        ):
            piece = part.get("content", part.get("text"))
            if isinstance(piece, str):
                texts.append(piece)
    return _text("\n".join(texts))


_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _message(item: Any, default_role: str) -> _Message | None:
    item = _unwrap(item)
    if isinstance(item, str):
        text = _text(item)
        return _Message(default_role, text) if text else None
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("message"), dict):  # a gen_ai.choice body or an OpenAI choice
        return _message(item["message"], default_role)
    role = item.get("role") or _LANGCHAIN_ROLES.get(str(item.get("type", "")))
    role = role if isinstance(role, str) and role else default_role
    if "parts" in item:
        text = _parts_text(item["parts"])
    else:
        text = _parts_text(item.get("content", item.get("text")))
    return _Message(role, text) if text else None


def _messages(value: Any, default_role: str) -> list[_Message]:
    """Messages from a messages value: structured, or a JSON string of one."""
    value = _unwrap(_maybe_json(value))
    if isinstance(value, dict):
        if isinstance(value.get("messages"), list):
            value = value["messages"]
        elif isinstance(value.get("choices"), list):
            value = value["choices"]
        else:
            value = [value]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    if len(value) == 1 and isinstance(value[0], list):  # LangChain batches: [[messages]]
        value = value[0]
    found = (_message(item, default_role) for item in value)
    return [m for m in found if m is not None]


def _indexed_messages(
    attributes: Mapping[str, Any], source: IndexedMessages, default_role: str
) -> list[_Message]:
    result: list[_Message] = []
    for group in _indexed(attributes, source.prefix):
        role = group.get(source.role)
        text = _text(group.get(source.content))
        if text is None and source.parts:
            parts = _indexed(group, source.parts)
            text = _text(
                "\n".join(
                    p[source.part_text] for p in parts if isinstance(p.get(source.part_text), str)
                )
            )
        if text is not None:
            result.append(_Message(role if isinstance(role, str) and role else default_role, text))
    return result


def _event_text(attributes: Mapping[str, Any]) -> str | None:
    for key in EVENT_TEXT_KEYS:
        if key in attributes:
            message = _message(_maybe_json(attributes[key]), "user")
            if message is not None:
                return message.text
    return None


def _read_messages(
    span: SpanRecord, sources: tuple[MessageSource, ...], default_role: str
) -> list[_Message]:
    """The messages of the first source that has any."""
    for source in sources:
        found: list[_Message] = []
        if isinstance(source, JsonMessages):
            found = _messages(span.attributes.get(source.attribute), default_role)
        elif isinstance(source, IndexedMessages):
            found = _indexed_messages(span.attributes, source, default_role)
        elif isinstance(source, EventMessages):
            for event in span.events:
                if event.name == source.event:
                    found += _messages(event.attributes.get(source.attribute), default_role)
        else:
            for event in span.events:
                role = source.events.get(event.name)
                if role is not None and (text := _event_text(event.attributes)):
                    found.append(_Message(role, text))
        if found:
            return found
    return []


def _input_messages(span: SpanRecord) -> list[_Message]:
    return _read_messages(span, INPUT_MESSAGES, "user")


def _output_messages(span: SpanRecord) -> list[_Message]:
    return _read_messages(span, OUTPUT_MESSAGES, "assistant")


def _last_text(messages: list[_Message], role: str) -> str | None:
    for message in reversed(messages):
        if message.role == role:
            return message.text
    return None


def _value_text(value: Any, keys: tuple[str, ...], role: str, depth: int = 0) -> str | None:
    """The useful text of an input or output value: plain text, or dug out of JSON."""
    if depth > 6:
        return None
    value = _unwrap(_maybe_json(value))
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        if "args" in value and "kwargs" in value:  # Traceloop's record of a function call
            kwargs = value["kwargs"] if isinstance(value["kwargs"], dict) else {}
            args = value["args"] if isinstance(value["args"], list) else []
            for key in keys:
                if key in kwargs and (found := _value_text(kwargs[key], keys, role, depth + 1)):
                    return found
            texts = [t for a in args if (t := _value_text(a, keys, role, depth + 1))]
            return texts[0] if len(texts) == 1 else None
        for key in keys:
            if key in value:
                found = _value_text(value[key], keys, role, depth + 1)
                if found:
                    return found
        if isinstance(value.get("messages"), list) or isinstance(value.get("choices"), list):
            return _last_text(_messages(value, role), role)
        strings = [v for v in value.values() if _text(v)]
        return strings[0] if len(strings) == 1 else None
    if isinstance(value, list):
        return _last_text(_messages(value, role), role)
    return None


def _span_input(span: SpanRecord) -> str | None:
    """The last user message of a span's input, else its input value's text."""
    text = _last_text(_input_messages(span), "user")
    for attribute in VALUE_INPUTS:
        if text:
            break
        text = _value_text(span.attributes.get(attribute), INPUT_KEYS, "user")
    return text


def _span_output(span: SpanRecord) -> str | None:
    messages = _output_messages(span)
    text = _last_text(messages, "assistant") or (messages[-1].text if messages else None)
    for attribute in VALUE_OUTPUTS:
        if text:
            break
        text = _value_text(span.attributes.get(attribute), OUTPUT_KEYS, "assistant")
    return text


# ============================================================================ span roles


def _role(span: SpanRecord) -> Role:
    for rule in SPAN_ROLES:
        value = span.attributes.get(rule.attribute)
        if isinstance(value, str) and value:
            return rule.values.get(value.lower(), "other")
    if any(k in span.attributes for k in LEGACY_LLM_MARKERS):
        return "llm"
    return "other"


def _documents(span: SpanRecord, role: Role) -> list[dict[str, Any]] | None:
    """Retrieved documents as {id, content, score, metadata, source}; None if not a retriever.

    A retriever that recorded no documents and no output at all (content capture off) gives
    one empty document per document it says it retrieved (at least one): documents without
    text, so the trace says what it cannot show.
    """
    a = span.attributes
    for source in DOCUMENTS:
        if isinstance(source, IndexedDocuments):
            groups = _indexed(a, source.prefix)
            if groups:
                return [_indexed_document(g) for g in groups]
        elif isinstance(source, JsonDocuments):
            if source.attribute in a:
                docs = _maybe_json(a.get(source.attribute))
                items = docs if isinstance(docs, list) else []
                return [_json_document(d) for d in items if isinstance(d, dict)]
        elif isinstance(source, EventDocuments):
            results = [e.attributes for e in span.events if e.name == source.event]
            if results:
                return [_event_document(r, source.fields) for r in results]
        elif role == "task" and (docs := _output_documents(span, source.attribute)) is not None:
            return docs
    if role in ("retriever", "reranker"):
        return [] if _recorded_output(span) else _uncaptured(span)
    return None


def _recorded_output(span: SpanRecord) -> bool:
    return any(k in span.attributes for k in VALUE_OUTPUTS)


def _uncaptured(span: SpanRecord) -> list[dict[str, Any]]:
    count = next((c for k in RETRIEVAL_COUNT if (c := _count(span.attributes.get(k)))), 1)
    return [{} for _ in range(min(count, 1000))]


def _dict_or_none(value: Any, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    parsed = _maybe_json(value)
    result = dict(parsed) if isinstance(parsed, dict) else {}
    result.update({k: v for k, v in (extra or {}).items() if v is not None})
    return result or None


def _indexed_document(group: dict[str, Any]) -> dict[str, Any]:
    metadata = _dict_or_none(group.get("document.metadata"))
    doc_id = group.get("document.id")
    score = group.get("document.score")
    if metadata:  # LangChain keeps a document's id and score in its metadata
        doc_id = doc_id if doc_id is not None else metadata.get("id")
        score = score if score is not None else metadata.get("score")
    return {
        "id": doc_id,
        "content": group.get("document.content"),
        "score": score,
        "metadata": metadata,
    }


def _json_document(doc: dict[str, Any]) -> dict[str, Any]:
    known = (*DOCUMENT_ID_KEYS, "score", *DOCUMENT_TEXT_KEYS, "metadata", "source", "source_id")
    extra = {k: v for k, v in doc.items() if k not in known and k not in ("type", "lc")}
    metadata = _dict_or_none(doc.get("metadata"), extra)
    content = next((doc[k] for k in DOCUMENT_TEXT_KEYS if _text(doc.get(k))), None)
    doc_id = next((doc[k] for k in DOCUMENT_ID_KEYS if doc.get(k) is not None), None)
    score = doc.get("score")
    if metadata:
        doc_id = doc_id if doc_id is not None else metadata.get("id")
        score = score if score is not None else metadata.get("score")
    return {
        "id": doc_id,
        "content": content,
        "score": score,
        "source": doc.get("source", doc.get("source_id")),
        "metadata": metadata,
    }


def _event_document(attributes: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, Any]:
    value = {name: attributes.get(key) for name, key in fields.items()}
    extra = {k: value[k] for k in value if k not in ("id", "content", "score", "metadata")}
    return {
        "id": value.get("id"),
        "content": value.get("content"),
        "score": value.get("score"),
        "metadata": _dict_or_none(value.get("metadata"), extra),
    }


def _is_langchain_document(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    ids = item.get("id")
    if item.get("lc") is not None and isinstance(ids, list) and ids and ids[-1] == "Document":
        return True
    return "page_content" in _unwrap(item)


def _output_documents(span: SpanRecord, attribute: str) -> list[dict[str, Any]] | None:
    """A task's output when it is a list of documents: LangChain documents whatever the task
    is called, plain texts or dicts when its name says it retrieves."""
    value = _maybe_json(span.attributes.get(attribute))
    if isinstance(value, dict):
        value = value.get("documents", value.get("outputs"))
    if not isinstance(value, list) or not value:
        return None
    if all(_is_langchain_document(item) for item in value):
        return [
            _json_document(unwrapped)
            for item in value
            if isinstance(unwrapped := _unwrap(item), dict)
        ]
    name = span.attributes.get("traceloop.entity.name", span.name)
    if not RETRIEVER_NAME.search(str(name)):
        return None
    if all(isinstance(item, str) for item in value):
        return [{"content": item} for item in value]
    if all(isinstance(item, dict) and "role" not in item for item in value):
        return [_json_document(item) for item in value]
    return None


# ============================================================================ the mapping


def spans_to_trace(
    spans: Sequence[SpanRecord], *, score_plain_llm_calls: bool = False
) -> Trace | None:
    """Map the spans of one trace onto a `Trace`; None when they hold no RAG turn.

    Roles come from SPAN_ROLES: LLM calls, retrievers and rerankers, pipeline spans (a chain,
    workflow or agent: the turn), Traceloop tasks (retrievers when their output is documents).

    - Not a RAG turn (None): no LLM call, retrieval or pipeline with input and output at all
      (HTTP, database, embeddings or tool spans only); or a plain LLM call -- LLM spans, no
      retrieval, and no pipeline span or no conversation -- unless `score_plain_llm_calls`.
      (OpenInference's OpenAI instrumentor records an OpenAI call made inside a LangChain
      chain as a trace of its own that still carries the session: it is a plain LLM call.)
    - question: the first of the outermost pipeline span's input (its last user message, or
      its input value), the retrievers' query, the last-ended LLM call's last user message; a
      candidate that holds a retrieved document's text is a rendered prompt and never used.
    - answer: the root span's own output, else the last-ended LLM call's output, else the
      output of an agent span invoked remotely (kind CLIENT: its LLM calls are not in this
      trace). Never an intermediate chain step's output.
    - contexts: the last reranker's documents if any, else every retriever's, in start order;
      rank = position. Documents without text are not contexts: their number is
      `contexts_without_text` (a retriever that recorded no documents counts what it says it
      found, at least one), so faithfulness is reported unmeasured instead of wrong.
    - agent: an agent attribute (AGENT_NAME) of the outermost span carrying one that is not a
      framework class name, else the service (`service.name`), else "default".
    - conversation_id: CONVERSATION_ID, outermost span first.
    - timestamp: the root's end (UTC); latency_ms: its duration. model and usage: from the
      outermost LLM calls (a call nested in another is the same call), else the remote agent.
    - metadata: source "otlp", service name, root span name, user id, system instructions.

    Spans repeated by at-least-once delivery (same span id) count once. Raises
    OtlpMappingError (never another exception) when there is a RAG turn that cannot be mapped.
    """
    try:
        return _map(spans, score_plain_llm_calls)
    except OtlpMappingError:
        raise
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)
        )
        raise OtlpMappingError("invalid_trace", problems) from None
    except Exception as exc:  # untrusted input must never crash the consumer
        raise OtlpMappingError("invalid_trace", f"{type(exc).__name__}: {exc}") from None


def _map(spans: Sequence[SpanRecord], score_plain_llm_calls: bool) -> Trace | None:
    by_id = {s.span_id: s for s in spans}
    if not by_id:
        return None
    ordered = sorted(by_id.values(), key=lambda s: (s.start_time_unix_nano, s.span_id))
    depth = _depths(by_id)
    outermost = sorted(ordered, key=lambda s: depth[s.span_id])  # stable: start order within
    true_roots = [s for s in ordered if s.parent_span_id is None]
    root = true_roots[0] if true_roots else None
    top = root or outermost[0]
    roles = {s.span_id: _role(s) for s in ordered}

    llms = sorted(
        (s for s in ordered if roles[s.span_id] == "llm"),
        key=lambda s: (s.end_time_unix_nano, s.start_time_unix_nano),
    )
    pipelines = [s for s in outermost if roles[s.span_id] in PIPELINE_ROLES]
    retrievers = [(s, d) for s in ordered if (d := _documents(s, roles[s.span_id])) is not None]
    remote_agents = [
        s
        for s in pipelines
        if roles[s.span_id] == "agent" and (s is root or s.kind == SPAN_KIND_CLIENT)
    ]
    conversation_id = _first(outermost, CONVERSATION_ID)

    if not llms:
        turn = pipelines[0] if pipelines else None
        if turn is None or not (retrievers or remote_agents):
            return None
        if not (_span_input(turn) and _span_output(turn)):
            return None
    elif not (retrievers or score_plain_llm_calls) and (not pipelines or conversation_id is None):
        return None

    contexts, textless = _contexts(retrievers)
    answer_llm = llms[-1] if llms else None
    query = _question(pipelines, retrievers, answer_llm, contexts)
    answer = _answer(root, answer_llm, remote_agents)
    if answer is None:
        raise OtlpMappingError(
            "no_answer",
            f"LLM span {answer_llm.name if answer_llm else '?'!r}"
            " has no output (is content capture off?)",
        )
    if query is None:
        raise OtlpMappingError(
            "no_query",
            "no user input on the pipeline, retrieval or LLM spans"
            + (" other than the rendered prompt holding the documents" if contexts else ""),
        )

    end_ns = top.end_time_unix_nano or max(s.end_time_unix_nano for s in ordered)
    if end_ns <= 0:
        raise OtlpMappingError("no_timestamp", "no span has an end time")
    seconds, rest_ns = divmod(end_ns, 1_000_000_000)
    timestamp = datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=rest_ns // 1000)
    duration = top.duration_ns
    metered = [s for s in llms if not _has_ancestor(s, by_id, roles, "llm")] or remote_agents[:1]

    return Trace(
        trace_id=top.trace_id,
        timestamp=timestamp,
        agent=_agent(outermost, top)[:128],
        conversation_id=conversation_id,
        query=query,
        contexts=contexts,
        contexts_without_text=textless or None,
        answer=answer,
        model=_model(metered[-1]) if metered else None,
        latency_ms=duration / 1e6 if top.end_time_unix_nano and duration >= 0 else None,
        usage=_usage(metered),
        metadata=_metadata(top, outermost, llms),
    )


def _question(
    pipelines: list[SpanRecord],
    retrievers: list[tuple[SpanRecord, list[dict[str, Any]]]],
    answer_llm: SpanRecord | None,
    contexts: list[Context],
) -> str | None:
    def candidates() -> Iterator[str | None]:
        if pipelines:
            yield _span_input(pipelines[0])
        for span, _ in retrievers:
            for key in RETRIEVAL_QUERY:
                yield _value_text(span.attributes.get(key), INPUT_KEYS, "user")
        if answer_llm is not None:
            yield _last_text(_input_messages(answer_llm), "user")

    return next((t for t in candidates() if t and not _is_rendered_prompt(t, contexts)), None)


def _is_rendered_prompt(text: str, contexts: list[Context]) -> bool:
    """A question that holds a retrieved document's text is a prompt template filled in."""
    return any(len(c.text) >= 20 and c.text.strip() in text for c in contexts)


def _answer(
    root: SpanRecord | None, answer_llm: SpanRecord | None, remote_agents: list[SpanRecord]
) -> str | None:
    if root is not None and (text := _span_output(root)):
        return text
    if answer_llm is not None and (text := _span_output(answer_llm)):
        return text
    return next((t for s in remote_agents if (t := _span_output(s))), None)


def _has_ancestor(
    span: SpanRecord, by_id: dict[str, SpanRecord], roles: dict[str, Role], role: Role
) -> bool:
    seen: set[str] = set()
    parent = span.parent_span_id
    while parent is not None and parent in by_id and parent not in seen:
        if roles[parent] == role:
            return True
        seen.add(parent)
        parent = by_id[parent].parent_span_id
    return False


def _depths(by_id: dict[str, SpanRecord]) -> dict[str, int]:
    """Distance to the top of each span's chain within the set. Raises OtlpMappingError when
    parents form a cycle: no span of it can be the turn's top, so the trace is not mapped."""
    depths: dict[str, int] = {}
    for span_id in by_id:
        chain: list[str] = []
        on_chain: set[str] = set()
        current: str | None = span_id
        while current is not None and current in by_id and current not in depths:
            if current in on_chain:
                raise OtlpMappingError(
                    "invalid_trace", f"span parents form a cycle (through span {current})"
                )
            chain.append(current)
            on_chain.add(current)
            current = by_id[current].parent_span_id
        base = depths[current] + 1 if current is not None and current in depths else 0
        for offset, node in enumerate(reversed(chain)):
            depths[node] = base + offset
    return depths


def _contexts(
    retrievers: list[tuple[SpanRecord, list[dict[str, Any]]]],
) -> tuple[list[Context], int]:
    rerankers = [docs for span, docs in retrievers if _role(span) == "reranker" and docs]
    documents = (
        rerankers[-1]
        if rerankers
        else [doc for span, docs in retrievers if _role(span) != "reranker" for doc in docs]
    )
    contexts: list[Context] = []
    textless = 0
    for doc in documents:
        text = _text(doc.get("content"))
        if text is None:
            textless += 1
            continue
        rank = len(contexts)
        doc_id = doc.get("id")
        metadata = doc.get("metadata")
        source = doc.get("source") or (metadata or {}).get("source")
        contexts.append(
            Context(
                id=str(doc_id) if isinstance(doc_id, str | int) and str(doc_id) else f"ctx-{rank}",
                text=text,
                score=_number(doc.get("score")),
                rank=rank,
                source=source if isinstance(source, str) else None,
                metadata=_jsonable(metadata) if metadata else None,
            )
        )
    return contexts, textless


def _first(spans: Iterable[SpanRecord], keys: tuple[str, ...]) -> str | None:
    for span in spans:
        for key in keys:
            value = _text(span.attributes.get(key))
            if value:
                return value
    return None


def _agent(outermost: list[SpanRecord], top: SpanRecord) -> str:
    for span in outermost:
        for key in AGENT_NAME:
            value = _text(span.attributes.get(key))
            if value and not FRAMEWORK_CLASS_NAME.match(value.strip()):
                return value.strip()
    service = _text(top.resource_attributes.get(SERVICE_NAME))
    if service and not DEFAULT_SERVICE_NAME.match(service):
        return service.strip()
    return DEFAULT_AGENT


def _model(span: SpanRecord) -> str | None:
    return _first([span], MODEL)


def _usage(llms: list[SpanRecord]) -> Usage | None:
    totals: dict[str, int | None] = {"input_tokens": None, "output_tokens": None}
    for span in llms:
        for field_name, keys in (("input_tokens", INPUT_TOKENS), ("output_tokens", OUTPUT_TOKENS)):
            count = next(
                (c for k in keys if (c := _count(span.attributes.get(k))) is not None), None
            )
            if count is not None:
                totals[field_name] = (totals[field_name] or 0) + count
    if totals["input_tokens"] is None and totals["output_tokens"] is None:
        return None
    return Usage(input_tokens=totals["input_tokens"], output_tokens=totals["output_tokens"])


def _metadata(
    top: SpanRecord, outermost: list[SpanRecord], llms: list[SpanRecord]
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"source": "otlp", "root_span": top.name}
    service = _text(top.resource_attributes.get(SERVICE_NAME))
    if service:
        metadata["service_name"] = service
    user = _first(outermost, USER_ID)
    if user:
        metadata["user_id"] = user
    instructions = [m.text for s in llms for m in _system_messages(s)]
    if instructions:
        metadata["system_instructions"] = instructions[-1][:MAX_INSTRUCTIONS_CHARS]
    return metadata


def _system_messages(span: SpanRecord) -> list[_Message]:
    for attribute in SYSTEM_INSTRUCTIONS:
        value = _maybe_json(span.attributes.get(attribute))
        if value is not None:
            text = _parts_text(value)
            return [_Message("system", text)] if text else []
    return [m for m in _input_messages(span) if m.role in ("system", "developer")]
