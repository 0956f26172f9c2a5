"""Where each piece of a RAG turn is found in OTLP spans, for every instrumentation family read.

One table per thing to find (span role, messages, pipeline input and output, documents,
conversation, agent, model, usage), in precedence order; each entry names the convention it
comes from. `monitor.formats.otlp_mapping` applies them. Supporting another instrumentation, or
a renamed attribute, is an entry here:

- OpenInference: `openinference.span.kind`, `input.value` / `output.value`,
  `llm.input_messages.N.*`, `retrieval.documents.N.document.*`, `session.id`, `agent.name`.
- OpenTelemetry GenAI semantic conventions, current and deprecated: `gen_ai.operation.name`,
  `gen_ai.input.messages` / `gen_ai.output.messages`, indexed `gen_ai.prompt.N.*` /
  `gen_ai.completion.N.*`, events on the span or in OTLP logs (joined to their span by
  `monitor.formats.otlp_logs`), `gen_ai.retrieval.*`, `gen_ai.conversation.id`.
- OpenLLMetry / Traceloop: `traceloop.span.kind`, `traceloop.entity.input` / `.output`,
  `traceloop.association.properties.*`, `llm.request.type`; its LangChain and LlamaIndex
  instrumentations record documents as LangChain documents or LlamaIndex nodes in those
  values (`monitor.formats.otlp_documents` recognises them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Role = Literal["llm", "retriever", "reranker", "pipeline", "agent", "task", "other"]


@dataclass(frozen=True, slots=True)
class RoleRule:
    """Spans whose `attribute` has one of `values` (case-insensitive) play that role."""

    convention: str
    attribute: str
    values: Mapping[str, Role]


# Span roles, first matching rule wins: an OpenInference kind is authoritative, then the GenAI
# operation, then Traceloop's span kind (Traceloop's LangChain spans carry both a GenAI
# operation and a Traceloop kind), then the older OpenLLMetry request type.
SPAN_ROLES: tuple[RoleRule, ...] = (
    RoleRule(
        "OpenInference",
        "openinference.span.kind",
        {
            "llm": "llm",
            "retriever": "retriever",
            "reranker": "reranker",
            "chain": "pipeline",
            "agent": "agent",
        },
    ),
    RoleRule(
        "GenAI",
        "gen_ai.operation.name",
        {
            "chat": "llm",
            "text_completion": "llm",
            "generate_content": "llm",
            "completion": "llm",
            "retrieval": "retriever",
            "invoke_agent": "agent",
            "invoke_workflow": "pipeline",
            # Traceloop's own operation names (its LangChain instrumentation 0.62.4: a
            # retriever's span, a chain step's span; LlamaIndex: a reranker's span)
            "vector_db_retrieve": "retriever",
            "execute_task": "task",
            "rerank": "reranker",
        },
    ),
    RoleRule(
        "Traceloop",
        "traceloop.span.kind",
        {"workflow": "pipeline", "agent": "agent", "task": "task"},
    ),
    RoleRule("OpenLLMetry < 0.40", "llm.request.type", {"chat": "llm", "completion": "llm"}),
)
# A span with none of the attributes above but one of these is an LLM call (GenAI < 1.27).
LEGACY_LLM_MARKERS = ("gen_ai.system", "gen_ai.provider.name", "gen_ai.request.model")
# Roles whose span is the pipeline of a turn (its input is the user's question).
PIPELINE_ROLES: frozenset[Role] = frozenset({"pipeline", "agent"})


@dataclass(frozen=True, slots=True)
class JsonMessages:
    """Messages as one attribute: a JSON string or structured list of {role, parts|content}."""

    convention: str
    attribute: str


@dataclass(frozen=True, slots=True)
class IndexedMessages:
    """Messages flattened as `prefix.N.<role>` / `prefix.N.<content>` attributes; multi-part
    contents as `prefix.N.<parts>.M.<part_text>`."""

    convention: str
    prefix: str
    role: str
    content: str
    parts: str = ""
    part_text: str = ""


@dataclass(frozen=True, slots=True)
class EventMessages:
    """Messages in an event's attribute (span events, or OTLP log records joined as events)."""

    convention: str
    event: str
    attribute: str


@dataclass(frozen=True, slots=True)
class RoleEvents:
    """One event per message, the role given by the event's name and the text in its body."""

    convention: str
    events: Mapping[str, str]


MessageSource = JsonMessages | IndexedMessages | EventMessages | RoleEvents

INPUT_MESSAGES: tuple[MessageSource, ...] = (
    JsonMessages("GenAI >= 1.37, Traceloop >= 0.50", "gen_ai.input.messages"),
    IndexedMessages(
        "OpenInference",
        "llm.input_messages",
        role="message.role",
        content="message.content",
        parts="message.contents",
        part_text="message_content.text",
    ),
    IndexedMessages("GenAI < 1.28, Traceloop < 0.50", "gen_ai.prompt", "role", "content"),
    JsonMessages("GenAI < 1.27 (JSON prompt)", "gen_ai.prompt"),
    EventMessages(
        "GenAI >= 1.37 events", "gen_ai.client.inference.operation.details", "gen_ai.input.messages"
    ),
    EventMessages("GenAI 1.26 events", "gen_ai.content.prompt", "gen_ai.prompt"),
    RoleEvents(
        "GenAI 1.27-1.36 events",
        {
            "gen_ai.system.message": "system",
            "gen_ai.user.message": "user",
            "gen_ai.assistant.message": "assistant",
            "gen_ai.tool.message": "tool",
        },
    ),
)
OUTPUT_MESSAGES: tuple[MessageSource, ...] = (
    JsonMessages("GenAI >= 1.37, Traceloop >= 0.50", "gen_ai.output.messages"),
    IndexedMessages(
        "OpenInference",
        "llm.output_messages",
        role="message.role",
        content="message.content",
        parts="message.contents",
        part_text="message_content.text",
    ),
    IndexedMessages("GenAI < 1.28, Traceloop < 0.50", "gen_ai.completion", "role", "content"),
    JsonMessages("GenAI < 1.27 (JSON completion)", "gen_ai.completion"),
    EventMessages(
        "GenAI >= 1.37 events",
        "gen_ai.client.inference.operation.details",
        "gen_ai.output.messages",
    ),
    EventMessages("GenAI 1.26 events", "gen_ai.content.completion", "gen_ai.completion"),
    RoleEvents("GenAI 1.27-1.36 events", {"gen_ai.choice": "assistant"}),
)
# Where the text of a role event is (older SDKs put it in attributes, newer in the body).
EVENT_TEXT_KEYS = ("content", "gen_ai.event.content", "body", "message", "message.content")
SYSTEM_INSTRUCTIONS = ("gen_ai.system_instructions",)  # GenAI >= 1.37, Traceloop >= 0.50

# A pipeline span's (or retriever's) own input and output, after its messages: plain text,
# or JSON from which the text is dug out (see _value_text).
VALUE_INPUTS = (
    "input.value",  # OpenInference
    "traceloop.entity.input",  # Traceloop: {"args": [...], "kwargs": {...}} or {"inputs": ...}
)
VALUE_OUTPUTS = (
    "output.value",  # OpenInference
    "traceloop.entity.output",  # Traceloop
)
# Keys of a JSON input or output that hold the question or the answer, in precedence order.
INPUT_KEYS = (
    "query",
    "str_or_query_bundle",  # LlamaIndex: a query engine's or retriever's argument
    "query_bundle",
    "query_str",  # LlamaIndex: a QueryBundle's text
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
RETRIEVAL_QUERY = (
    "gen_ai.retrieval.query.text",  # GenAI
    "input.value",  # OpenInference retriever
    "traceloop.entity.input",  # Traceloop task
)


@dataclass(frozen=True, slots=True)
class IndexedDocuments:
    """Documents flattened as `prefix.N.document.{id,content,score,metadata}` attributes."""

    convention: str
    prefix: str
    role: Role


@dataclass(frozen=True, slots=True)
class JsonDocuments:
    """Documents as one attribute: a JSON list of {id, score, content|text|page_content, ...}."""

    convention: str
    attribute: str


@dataclass(frozen=True, slots=True)
class EventDocuments:
    """One event per document; `fields` maps our field names to the event's attribute names."""

    convention: str
    event: str
    fields: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class OutputDocuments:
    """A retriever's or task's output that is a list of documents: LangChain documents or
    LlamaIndex nodes whatever the span, dicts or strings from a retriever span or a task whose
    name says it retrieves. Also read as `{"documents": [...]}` (Traceloop's LangChain
    retriever span) or `{"outputs": [...]}` (a LangChain step)."""

    convention: str
    attribute: str


DocumentSource = IndexedDocuments | JsonDocuments | EventDocuments | OutputDocuments

DOCUMENTS: tuple[DocumentSource, ...] = (
    IndexedDocuments("OpenInference reranker", "reranker.output_documents", "reranker"),
    IndexedDocuments("OpenInference", "retrieval.documents", "retriever"),
    JsonDocuments("GenAI", "gen_ai.retrieval.documents"),
    EventDocuments(
        "OpenLLMetry vector stores",
        "db.query.result",
        {
            "id": "db.query.result.id",
            "content": "db.query.result.document",
            "score": "db.query.result.score",
            "metadata": "db.query.result.metadata",
            "distance": "db.query.result.distance",
        },
    ),
    OutputDocuments("Traceloop retriever or task", "traceloop.entity.output"),
)
# When no retriever recorded a document with text: documents handed to a later step, as
# LangChain documents or LlamaIndex nodes anywhere in its input value (Traceloop's LangChain
# instrumentation 0.52.6 records no retriever span, only the chain steps the documents pass
# through, e.g. `{"inputs": {"context": [<Document>...], "question": ...}}`).
HANDED_DOCUMENTS = VALUE_INPUTS


def mapped_event_names() -> frozenset[str]:
    """Every event name the tables above read (as span events, or as OTLP log records joined
    to their span): the log records worth forwarding from a logs topic."""
    names: set[str] = set()
    for source in (*INPUT_MESSAGES, *OUTPUT_MESSAGES, *DOCUMENTS):
        if isinstance(source, EventMessages | EventDocuments):
            names.add(source.event)
        elif isinstance(source, RoleEvents):
            names.update(source.events)
    return frozenset(names)


# Document fields inside JSON documents and LangChain documents.
DOCUMENT_TEXT_KEYS = ("content", "text", "page_content")
DOCUMENT_ID_KEYS = ("id", "document_id", "doc_id")
# A document's id in its metadata, when the document carries none itself (Traceloop's LangChain
# retriever span keeps only `page_content` and `metadata`, dropping `Document.id`): the first
# of these keys with a value. `id`, `doc_id`, `document_id` and `chunk_id` are the names
# applications give it; `_id` is where the Qdrant and MongoDB Atlas LangChain stores put the
# point's / record's id, `pk` where the Milvus store puts its primary key. Never `source`: a
# file or URL shared by all the chunks cut from it (it becomes the context's `source`).
METADATA_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "_id", "pk")
# A document's score in its metadata (`relevance_score`: LangChain's rerank compressors).
METADATA_SCORE_KEYS = ("score", "relevance_score")
# LangChain's serialised Document: {"lc": 1, "type": "constructor", "id": [..., "Document"],
# "kwargs": {"page_content", "metadata", "id"}}; recorded unserialised it is
# {"page_content", "metadata"}.
LANGCHAIN_DOCUMENT_CLASS = "Document"
LANGCHAIN_DOCUMENT_TEXT = "page_content"
# LlamaIndex's NodeWithScore ({"node": {...}, "score"}) and nodes ({"id_", "text" or
# "text_resource": {"text"}, "metadata"}), recorded by OpenLLMetry as one JSON string each.
LLAMAINDEX_NODE = "node"
LLAMAINDEX_NODE_ID = "id_"
LLAMAINDEX_NODE_TEXT = "text"
LLAMAINDEX_TEXT_RESOURCE = "text_resource"
# A task whose name matches this and whose output is a list of texts or dicts is a retriever.
RETRIEVER_NAME = re.compile(r"retriev|search|vector|fetch_doc|lookup|knowledge", re.I)
# When a retrieval span records no documents at all (content capture off), how many it found.
RETRIEVAL_COUNT = ("gen_ai.request.top_k",)

CONVERSATION_ID = (
    "session.id",  # OpenInference
    "gen_ai.conversation.id",  # GenAI
    "traceloop.association.properties.session_id",  # Traceloop
    "traceloop.association.properties.conversation_id",  # Traceloop
)
AGENT_NAME = (
    "gen_ai.agent.name",  # GenAI
    "agent.name",  # OpenInference
)
# Agent names that instrumentations fill in from the framework's class, not the user's
# pipeline (Traceloop's LangChain instrumentation sets gen_ai.agent.name = RunnableSequence).
FRAMEWORK_CLASS_NAME = re.compile(
    r"^(?:Runnable[A-Z]\w*|AgentExecutor|LangGraph|CompiledStateGraph|CompiledGraph|StateGraph"
    r"|Pregel|LLMChain|RetrievalQA\w*|ConversationalRetrievalChain|StuffDocumentsChain"
    r"|MapReduceDocumentsChain|SequentialChain)$"
)
SERVICE_NAME = "service.name"  # resource attribute: the agent when no agent attribute names one
DEFAULT_SERVICE_NAME = re.compile(r"^unknown_service")
USER_ID = ("user.id", "traceloop.association.properties.user_id")
MODEL = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
