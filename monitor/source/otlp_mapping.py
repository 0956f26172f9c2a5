"""Mapping the spans of one trace onto the `Trace` model (used by `monitor.source.otlp`).

Two vocabularies are read (DESIGN.md section 2), current and deprecated names alike:

- OpenTelemetry GenAI semantic conventions (`gen_ai.*`): operation names chat, text_completion,
  generate_content (LLM calls), retrieval, invoke_agent / invoke_workflow (the turn), embeddings
  and execute_tool (ignored); messages from `gen_ai.input.messages` / `gen_ai.output.messages` /
  `gen_ai.system_instructions`, deprecated `gen_ai.prompt` / `gen_ai.completion` (JSON or
  indexed `.N.role` / `.N.content`) and span events; `gen_ai.retrieval.documents` and
  `gen_ai.retrieval.query.text`.
- OpenInference (`openinference.span.kind` LLM, RETRIEVER, RERANKER, CHAIN, AGENT): `input.value`,
  `output.value`, `llm.input_messages.N.*`, `llm.output_messages.N.*`,
  `retrieval.documents.N.document.*`, `reranker.output_documents.N.document.*`.

A trace holds a RAG turn when it has an LLM span, or a turn span (CHAIN/AGENT, invoke_agent)
with both an input and an output plus a retriever span or an agent span (an agent invoked
remotely, whose LLM calls are not in the trace); anything else (HTTP, database, embeddings or
tool spans only) maps to None. `spans_to_trace` documents the precedence rules.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from monitor.models import DEFAULT_AGENT, Context, Trace, Usage

if TYPE_CHECKING:  # otlp.py imports this module; SpanRecord is only needed for annotations
    from monitor.source.otlp import SpanRecord

__all__ = ["OtlpMappingError", "spans_to_trace"]

MAX_DETAIL_CHARS = 1000

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
TURN_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow"})
INPUT_KEYS = (
    "query",
    "question",
    "input",
    "user_input",
    "user_query",
    "prompt",
    "text",
    "content",
    "message",
)
OUTPUT_KEYS = (
    "answer",
    "output",
    "result",
    "response",
    "output_text",
    "text",
    "content",
    "message",
    "generation",
)
ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
MAX_INSTRUCTIONS_CHARS = 4000
_INDEXED = re.compile(r"^(\d{1,9})\.(.+)$")


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


# ---------------------------------------------------------------------------- value helpers


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


def _indexed(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Group `prefix.N.rest` attributes into one dict of `rest -> value` per N, in N order."""
    groups: dict[int, dict[str, Any]] = {}
    start = len(prefix) + 1
    for key, value in attributes.items():
        if key.startswith(prefix + "."):
            match = _INDEXED.match(key[start:])
            if match:
                groups.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [groups[i] for i in sorted(groups)]


# ---------------------------------------------------------------------------- messages


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


def _message(item: Any, default_role: str) -> _Message | None:
    if isinstance(item, str):
        text = _text(item)
        return _Message(default_role, text) if text else None
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("message"), dict):  # a gen_ai.choice body or an OpenAI choice
        return _message(item["message"], default_role)
    role = item.get("role")
    role = role if isinstance(role, str) and role else default_role
    if "parts" in item:
        text = _parts_text(item["parts"])
    else:
        text = _parts_text(item.get("content", item.get("text")))
    return _Message(role, text) if text else None


def _messages(value: Any, default_role: str) -> list[_Message]:
    """Messages from a GenAI messages value: structured, or a JSON string of one."""
    value = _maybe_json(value)
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
    found = (_message(item, default_role) for item in value)
    return [m for m in found if m is not None]


def _indexed_messages(
    attributes: dict[str, Any],
    prefix: str,
    default_role: str,
    role_key: str,
    content_key: str,
    contents_prefix: str,
) -> list[_Message]:
    result: list[_Message] = []
    for group in _indexed(attributes, prefix):
        role = group.get(role_key)
        text = _text(group.get(content_key))
        if text is None:  # OpenInference multi-part contents
            parts = _indexed(group, contents_prefix)
            text = _text(
                "\n".join(
                    p["message_content.text"]
                    for p in parts
                    if isinstance(p.get("message_content.text"), str)
                )
            )
        if text is not None:
            result.append(_Message(role if isinstance(role, str) and role else default_role, text))
    return result


def _event_text(attributes: dict[str, Any]) -> str | None:
    for key in ("content", "gen_ai.event.content", "body", "message", "message.content"):
        if key in attributes:
            message = _message(_maybe_json(attributes[key]), "user")
            if message is not None:
                return message.text
    return None


def _input_messages(span: SpanRecord) -> list[_Message]:
    a = span.attributes
    candidates: list[list[_Message]] = [
        _messages(a.get("gen_ai.input.messages"), "user"),
        _indexed_messages(
            a, "llm.input_messages", "user", "message.role", "message.content", "message.contents"
        ),
        _indexed_messages(a, "gen_ai.prompt", "user", "role", "content", "contents"),
        _messages(a.get("gen_ai.prompt"), "user"),
    ]
    from_events: list[_Message] = []
    for event in span.events:
        if event.name == "gen_ai.client.inference.operation.details":
            from_events += _messages(event.attributes.get("gen_ai.input.messages"), "user")
        elif event.name == "gen_ai.content.prompt":
            from_events += _messages(event.attributes.get("gen_ai.prompt"), "user")
        elif event.name in ROLE_EVENTS:
            text = _event_text(event.attributes)
            if text:
                from_events.append(_Message(ROLE_EVENTS[event.name], text))
    candidates.append(from_events)
    return next((c for c in candidates if c), [])


def _output_messages(span: SpanRecord) -> list[_Message]:
    a = span.attributes
    candidates: list[list[_Message]] = [
        _messages(a.get("gen_ai.output.messages"), "assistant"),
        _indexed_messages(
            a,
            "llm.output_messages",
            "assistant",
            "message.role",
            "message.content",
            "message.contents",
        ),
        _indexed_messages(a, "gen_ai.completion", "assistant", "role", "content", "contents"),
        _messages(a.get("gen_ai.completion"), "assistant"),
    ]
    from_events: list[_Message] = []
    for event in span.events:
        if event.name == "gen_ai.client.inference.operation.details":
            from_events += _messages(event.attributes.get("gen_ai.output.messages"), "assistant")
        elif event.name == "gen_ai.content.completion":
            from_events += _messages(event.attributes.get("gen_ai.completion"), "assistant")
        elif event.name == "gen_ai.choice":
            text = _event_text(event.attributes)
            if text:
                from_events.append(_Message("assistant", text))
    candidates.append(from_events)
    return next((c for c in candidates if c), [])


def _value_text(value: Any, keys: tuple[str, ...], role: str, depth: int = 0) -> str | None:
    """The useful text of an `input.value` / `output.value`: plain text, or from JSON."""
    if depth > 4:
        return None
    value = _maybe_json(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
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


def _last_text(messages: list[_Message], role: str) -> str | None:
    for message in reversed(messages):
        if message.role == role:
            return message.text
    return None


def _span_input(span: SpanRecord) -> str | None:
    return _last_text(_input_messages(span), "user") or _value_text(
        span.attributes.get("input.value"), INPUT_KEYS, "user"
    )


def _span_output(span: SpanRecord) -> str | None:
    messages = _output_messages(span)
    text = _last_text(messages, "assistant") or (messages[-1].text if messages else None)
    return text or _value_text(span.attributes.get("output.value"), OUTPUT_KEYS, "assistant")


# ---------------------------------------------------------------------------- span roles


def _oi_kind(span: SpanRecord) -> str:
    kind = span.attributes.get("openinference.span.kind")
    return kind.upper() if isinstance(kind, str) else ""


def _operation(span: SpanRecord) -> str:
    op = span.attributes.get("gen_ai.operation.name")
    return op.lower() if isinstance(op, str) else ""


def _is_llm(span: SpanRecord) -> bool:
    if _oi_kind(span):
        return _oi_kind(span) == "LLM"
    op = _operation(span)
    if op:
        return op in LLM_OPERATIONS
    request_type = span.attributes.get("llm.request.type")  # OpenLLMetry, before operation.name
    if isinstance(request_type, str):
        return request_type in ("chat", "completion")
    a = span.attributes
    return any(k in a for k in ("gen_ai.system", "gen_ai.provider.name", "gen_ai.request.model"))


def _is_turn(span: SpanRecord) -> bool:
    return _oi_kind(span) in ("CHAIN", "AGENT") or _operation(span) in TURN_OPERATIONS


def _documents_of(span: SpanRecord) -> list[dict[str, Any]] | None:
    """Retrieved documents as {id, content, score, metadata, source}; None if not a retriever."""
    a = span.attributes
    if _oi_kind(span) == "RERANKER":
        return [_oi_document(g) for g in _indexed(a, "reranker.output_documents")]
    oi_docs = _indexed(a, "retrieval.documents")
    if oi_docs or _oi_kind(span) == "RETRIEVER":
        return [_oi_document(g) for g in oi_docs]
    if "gen_ai.retrieval.documents" in a or _operation(span) == "retrieval":
        docs = _maybe_json(a.get("gen_ai.retrieval.documents"))
        items = docs if isinstance(docs, list) else []
        return [_genai_document(d) for d in items if isinstance(d, dict)]
    results = [e.attributes for e in span.events if e.name == "db.query.result"]
    if results:  # OpenLLMetry vector-store instrumentations (Chroma, Pinecone, ...)
        return [
            {
                "id": r.get("db.query.result.id"),
                "content": r.get("db.query.result.document"),
                "score": r.get("db.query.result.score"),
                "metadata": _dict_or_none(
                    r.get("db.query.result.metadata"),
                    {"distance": r.get("db.query.result.distance")},
                ),
            }
            for r in results
        ]
    return None


def _dict_or_none(value: Any, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    parsed = _maybe_json(value)
    result = dict(parsed) if isinstance(parsed, dict) else {}
    result.update({k: v for k, v in (extra or {}).items() if v is not None})
    return result or None


def _oi_document(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": group.get("document.id"),
        "content": group.get("document.content"),
        "score": group.get("document.score"),
        "metadata": _dict_or_none(group.get("document.metadata")),
    }


def _genai_document(doc: dict[str, Any]) -> dict[str, Any]:
    known = ("id", "score", "content", "text", "page_content", "metadata", "source", "source_id")
    extra = {k: v for k, v in doc.items() if k not in known}
    content = next((doc[k] for k in ("content", "text", "page_content") if _text(doc.get(k))), None)
    return {
        "id": doc.get("id"),
        "content": content,
        "score": doc.get("score"),
        "source": doc.get("source", doc.get("source_id")),
        "metadata": _dict_or_none(doc.get("metadata"), extra),
    }


# ---------------------------------------------------------------------------- the mapping


def spans_to_trace(spans: Sequence[SpanRecord]) -> Trace | None:
    """Map the spans of one trace onto a `Trace`; None when they hold no RAG turn.

    - root: the span without a parent in the set (earliest if several); timestamp = its end
      (UTC), latency_ms = its duration.
    - turn span: the outermost CHAIN/AGENT (OpenInference) or invoke_agent/invoke_workflow span.
    - answer LLM span: the LLM span that ended last; model = its response, request or
      OpenInference model name.
    - query: the turn span's input, else the answer LLM span's last user message, else the
      retrieval query text. answer: the turn span's output, else the LLM span's last output.
    - contexts: the last reranker's output documents if any, else all retrievers' documents in
      start order; rank = position; documents without text are dropped (counted in metadata).
    - agent: `gen_ai.agent.name` / `agent.name` of the outermost span carrying one, else
      "default" (never `service.name`: it is a label, and a service is not a pipeline variant).
    - conversation_id: `session.id` / `gen_ai.conversation.id`, outermost first.
    - model and usage: from the LLM spans (usage summed), else from the outermost invoke_agent
      span (an agent invoked remotely).
    - metadata: source "otlp", service name, root span name, `user.id`, system instructions.

    Spans repeated by at-least-once delivery (same span id) count once. Raises
    OtlpMappingError (never another exception) when there is a RAG turn that cannot be mapped.
    """
    try:
        return _map(spans)
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


def _map(spans: Sequence[SpanRecord]) -> Trace | None:
    by_id = {s.span_id: s for s in spans}
    if not by_id:
        return None
    ordered = sorted(by_id.values(), key=lambda s: (s.start_time_unix_nano, s.span_id))
    depth = _depths(by_id)
    outermost = sorted(ordered, key=lambda s: depth[s.span_id])  # stable: start order within
    roots = [s for s in ordered if depth[s.span_id] == 0]
    root = roots[0] if roots else ordered[0]

    llms = sorted(
        (s for s in ordered if _is_llm(s)),
        key=lambda s: (s.end_time_unix_nano, s.start_time_unix_nano),
    )
    turns = [s for s in outermost if _is_turn(s)]
    retrievers = [(s, d) for s in ordered if (d := _documents_of(s)) is not None]
    answer_llm = llms[-1] if llms else None

    query = next((t for t in map(_span_input, turns) if t), None)
    answer = next((t for t in map(_span_output, turns) if t), None)
    agent_turn = any(_operation(s) in TURN_OPERATIONS or _oi_kind(s) == "AGENT" for s in turns)
    if not llms and not ((retrievers or agent_turn) and query and answer):
        return None
    if query is None and answer_llm is not None:
        query = _last_text(_input_messages(answer_llm), "user")
    if query is None:
        query = next(
            (
                q
                for s, _ in retrievers
                for k in ("gen_ai.retrieval.query.text", "input.value")
                if (q := _value_text(s.attributes.get(k), INPUT_KEYS, "user"))
            ),
            None,
        )
    if answer is None and answer_llm is not None:
        answer = _span_output(answer_llm)
    if answer is None:
        raise OtlpMappingError(
            "no_answer",
            f"LLM span {answer_llm.name if answer_llm else '?'!r}"
            " has no output (is content capture off?)",
        )
    if query is None:
        raise OtlpMappingError("no_query", "no user input on the turn, LLM or retrieval spans")

    contexts, textless = _contexts(retrievers)
    end_ns = root.end_time_unix_nano or max(s.end_time_unix_nano for s in ordered)
    if end_ns <= 0:
        raise OtlpMappingError("no_timestamp", "no span has an end time")
    seconds, rest_ns = divmod(end_ns, 1_000_000_000)
    timestamp = datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=rest_ns // 1000)
    duration = root.duration_ns
    # without LLM spans (a remotely invoked agent), the agent span reports model and usage
    metered = llms or [t for t in turns if _operation(t) in TURN_OPERATIONS][:1]

    return Trace(
        trace_id=root.trace_id,
        timestamp=timestamp,
        agent=(_first(outermost, ("gen_ai.agent.name", "agent.name")) or DEFAULT_AGENT)[:128],
        conversation_id=_first(outermost, ("session.id", "gen_ai.conversation.id")),
        query=query,
        contexts=contexts,
        answer=answer,
        model=_model(metered[-1]) if metered else None,
        latency_ms=duration / 1e6 if root.end_time_unix_nano and duration >= 0 else None,
        usage=_usage(metered),
        metadata=_metadata(root, outermost, llms, textless),
    )


def _depths(by_id: dict[str, SpanRecord]) -> dict[str, int]:
    """Distance to the top of each span's chain within the set; cycles count as roots."""
    depths: dict[str, int] = {}
    for span_id in by_id:
        chain: list[str] = []
        current: str | None = span_id
        while current is not None and current in by_id and current not in depths:
            if current in chain:  # a cycle: treat where it closes as a root
                break
            chain.append(current)
            current = by_id[current].parent_span_id
        base = depths[current] + 1 if current is not None and current in depths else 0
        for offset, node in enumerate(reversed(chain)):
            depths[node] = base + offset
    return depths


def _contexts(
    retrievers: list[tuple[SpanRecord, list[dict[str, Any]]]],
) -> tuple[list[Context], int]:
    rerankers = [docs for span, docs in retrievers if _oi_kind(span) == "RERANKER" and docs]
    documents = (
        rerankers[-1]
        if rerankers
        else [doc for span, docs in retrievers if _oi_kind(span) != "RERANKER" for doc in docs]
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


def _model(span: SpanRecord) -> str | None:
    return _first([span], ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name"))


def _usage(llms: list[SpanRecord]) -> Usage | None:
    totals: dict[str, int | None] = {"input_tokens": None, "output_tokens": None}
    names = {
        "input_tokens": (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        ),
        "output_tokens": (
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ),
    }
    for span in llms:
        for field_name, keys in names.items():
            count = next(
                (c for k in keys if (c := _count(span.attributes.get(k))) is not None), None
            )
            if count is not None:
                totals[field_name] = (totals[field_name] or 0) + count
    if totals["input_tokens"] is None and totals["output_tokens"] is None:
        return None
    return Usage(input_tokens=totals["input_tokens"], output_tokens=totals["output_tokens"])


def _metadata(
    root: SpanRecord, outermost: list[SpanRecord], llms: list[SpanRecord], textless: int
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"source": "otlp", "root_span": root.name}
    service = _text(root.resource_attributes.get("service.name"))
    if service:
        metadata["service_name"] = service
    user = _first(outermost, ("user.id",))
    if user:
        metadata["user_id"] = user
    instructions = [m.text for s in llms for m in _system_messages(s)]
    if instructions:
        metadata["system_instructions"] = instructions[-1][:MAX_INSTRUCTIONS_CHARS]
    if textless:
        metadata["contexts_without_text"] = textless
    return metadata


def _system_messages(span: SpanRecord) -> list[_Message]:
    value = _maybe_json(span.attributes.get("gen_ai.system_instructions"))
    if value is not None:
        text = _parts_text(value)
        return [_Message("system", text)] if text else []
    return [m for m in _input_messages(span) if m.role in ("system", "developer")]
