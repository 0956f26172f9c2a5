"""Mapping the spans of one trace onto the `Trace` model (used by `monitor.formats.otlp`).

Three families of instrumentation are read, current and still-common older versions:
OpenInference, the OpenTelemetry GenAI semantic conventions (attributes, and events on the
span or in OTLP logs joined to it by `monitor.formats.otlp_logs`) and OpenLLMetry / Traceloop.
Every attribute name read is in the tables of `monitor.formats.otlp_conventions`; this module
decides how the pieces they find make one RAG turn (`spans_to_trace` says how).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from monitor.formats.errors import OtlpMappingError
from monitor.formats.otlp_conventions import (
    AGENT_NAME,
    CONVERSATION_ID,
    DEFAULT_SERVICE_NAME,
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
    RETRIEVAL_QUERY,
    SERVICE_NAME,
    SPAN_ROLES,
    SYSTEM_INSTRUCTIONS,
    USER_ID,
    VALUE_INPUTS,
    VALUE_OUTPUTS,
    EventMessages,
    IndexedMessages,
    JsonMessages,
    MessageSource,
    Role,
)
from monitor.formats.otlp_documents import (
    Document,
    Retrieval,
    given_documents,
    last_handed_documents,
    retrievals,
)
from monitor.formats.otlp_records import SpanRecord
from monitor.formats.otlp_values import (
    finite_number,
    indexed_groups,
    jsonable,
    maybe_json,
    non_negative_int,
    text_or_none,
    unwrap,
)
from monitor.models import DEFAULT_AGENT, Context, Trace, Usage
from monitor.times import datetime_from_ns, millis_from_ns

__all__ = ["OtlpMappingError", "spans_to_trace"]

MAX_INSTRUCTIONS_CHARS = 4000
SPAN_KIND_CLIENT = 3  # OTLP SpanKind CLIENT: a call to another service


@dataclass(frozen=True, slots=True)
class _Message:
    role: str
    text: str


# ============================================================================ messages


def _parts_text(parts: Any) -> str | None:
    """Text of GenAI `parts` ([{type: text, content}]) or OpenAI-style content lists."""
    if isinstance(parts, str):
        return text_or_none(parts)
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
    return text_or_none("\n".join(texts))


_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _message(item: Any, default_role: str) -> _Message | None:
    item = unwrap(item)
    if isinstance(item, str):
        text = text_or_none(item)
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
    value = unwrap(maybe_json(value))
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
    span: SpanRecord, source: IndexedMessages, default_role: str
) -> list[_Message]:
    result: list[_Message] = []
    for group in span.indexed(source.prefix):
        role = group.get(source.role)
        text = text_or_none(group.get(source.content))
        if text is None and source.parts:
            parts = indexed_groups(group, source.parts)
            text = text_or_none(
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
            message = _message(maybe_json(attributes[key]), "user")
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
            found = _indexed_messages(span, source, default_role)
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
    value = unwrap(maybe_json(value))
    if isinstance(value, str):
        return text_or_none(value)
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
        strings = [v for v in value.values() if text_or_none(v)]
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


# ============================================================================ the mapping


def spans_to_trace(
    spans: Sequence[SpanRecord], *, score_plain_llm_calls: bool = False
) -> Trace | None:
    """Map the spans of one trace onto a `Trace`; None when they hold no RAG turn.

    Roles come from SPAN_ROLES: LLM calls, retrievers and rerankers, pipeline spans (a chain,
    workflow or agent: the turn), Traceloop tasks (retrievers when their output is documents;
    `monitor.formats.otlp_documents` reads the documents in every recorded shape).

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
    - contexts: the last reranker's documents if any (a reranker, or a step given documents
      that returns documents), else every retriever's, in start order; a retrieval inside
      another one is part of it and not counted again. When none has a document with text:
      the documents handed to the last step (by the answering LLM call's start) whose input
      holds LangChain documents or LlamaIndex nodes. rank = position. Documents without text
      are not contexts: their number is `contexts_without_text` (a retriever that recorded no
      documents counts what it says it found, at least one), so faithfulness is reported
      unmeasured instead of wrong.
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
    answer_llm = llms[-1] if llms else None
    found = retrievals(ordered, roles)
    documents = given_documents(found)
    if not any(text_or_none(doc.get("content")) for doc in documents):
        until_ns = (answer_llm or ordered[-1]).start_time_unix_nano
        documents = last_handed_documents(ordered, roles, until_ns) or documents
    retrieved = bool(found) or bool(documents)
    remote_agents = [
        s
        for s in pipelines
        if roles[s.span_id] == "agent" and (s is root or s.kind == SPAN_KIND_CLIENT)
    ]
    conversation_id = _first(outermost, CONVERSATION_ID)

    if not llms:
        turn = pipelines[0] if pipelines else None
        if turn is None or not (retrieved or remote_agents):
            return None
        if not (_span_input(turn) and _span_output(turn)):
            return None
    elif not (retrieved or score_plain_llm_calls) and (not pipelines or conversation_id is None):
        return None

    contexts, textless = _contexts(documents)
    query = _question(pipelines, found, answer_llm, contexts)
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
    timestamp = datetime_from_ns(end_ns)
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
        latency_ms=millis_from_ns(duration) if top.end_time_unix_nano and duration >= 0 else None,
        usage=_usage(metered),
        metadata=_metadata(top, outermost, llms),
    )


def _question(
    pipelines: list[SpanRecord],
    found: list[Retrieval],
    answer_llm: SpanRecord | None,
    contexts: list[Context],
) -> str | None:
    def candidates() -> Iterator[str | None]:
        if pipelines:
            yield _span_input(pipelines[0])
        for retrieval in found:
            for key in RETRIEVAL_QUERY:
                yield _value_text(retrieval.span.attributes.get(key), INPUT_KEYS, "user")
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


def _contexts(documents: list[Document]) -> tuple[list[Context], int]:
    contexts: list[Context] = []
    textless = 0
    for doc in documents:
        text = text_or_none(doc.get("content"))
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
                score=finite_number(doc.get("score")),
                rank=rank,
                source=source if isinstance(source, str) else None,
                metadata=jsonable(metadata) if metadata else None,
            )
        )
    return contexts, textless


def _first(spans: Iterable[SpanRecord], keys: tuple[str, ...]) -> str | None:
    for span in spans:
        for key in keys:
            value = text_or_none(span.attributes.get(key))
            if value:
                return value
    return None


def _agent(outermost: list[SpanRecord], top: SpanRecord) -> str:
    for span in outermost:
        for key in AGENT_NAME:
            value = text_or_none(span.attributes.get(key))
            if value and not FRAMEWORK_CLASS_NAME.match(value.strip()):
                return value.strip()
    service = text_or_none(top.resource_attributes.get(SERVICE_NAME))
    if service and not DEFAULT_SERVICE_NAME.match(service):
        return service.strip()
    return DEFAULT_AGENT


def _model(span: SpanRecord) -> str | None:
    return _first([span], MODEL)


def _usage(llms: list[SpanRecord]) -> Usage | None:
    totals: dict[str, int | None] = {"input_tokens": None, "output_tokens": None}
    for span in llms:
        for field_name, keys in (("input_tokens", INPUT_TOKENS), ("output_tokens", OUTPUT_TOKENS)):
            counts = (non_negative_int(span.attributes.get(k)) for k in keys)
            count = next((c for c in counts if c is not None), None)
            if count is not None:
                totals[field_name] = (totals[field_name] or 0) + count
    if totals["input_tokens"] is None and totals["output_tokens"] is None:
        return None
    return Usage(input_tokens=totals["input_tokens"], output_tokens=totals["output_tokens"])


def _metadata(
    top: SpanRecord, outermost: list[SpanRecord], llms: list[SpanRecord]
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"source": "otlp", "root_span": top.name}
    service = text_or_none(top.resource_attributes.get(SERVICE_NAME))
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
        value = maybe_json(span.attributes.get(attribute))
        if value is not None:
            text = _parts_text(value)
            return [_Message("system", text)] if text else []
    return [m for m in _input_messages(span) if m.role in ("system", "developer")]
