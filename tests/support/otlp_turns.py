"""RAG turns as LangChain with OpenInference records them, made with the real OpenTelemetry SDK
at chosen times (so turns can overlap and end in any order), encoded with the real OTLP encoder.

Each turn is a `RunnableSequence` (the root, session.id on it) with a `RunnableParallel` step
(whose output dict's only string is the question: the step a careless mapper takes for the
answer), a retriever under it, and the `ChatOpenAI` LLM span holding the real answer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan

from tests.support.otlp_spans import App, Fmt, encode, hex_trace_id

MS = 1_000_000


@dataclass(frozen=True)
class Turn:
    n: int
    trace_id: str
    question: str
    answer: str
    start_ns: int
    spans: tuple[ReadableSpan, ...]  # in the order they ended (= the order the SDK exports)

    def early(self) -> list[ReadableSpan]:
        """What ends before the LLM answers: the retriever and the parallel step."""
        return [s for s in self.spans if s.name in ("VectorStoreRetriever", "RunnableParallel")]

    def late(self) -> list[ReadableSpan]:
        return [s for s in self.spans if s not in self.early()]


def langchain_turn(
    app: App,
    n: int,
    *,
    session: str | None,
    start_ns: int,
    llm_ns: int = 300 * MS,
    answered: bool = True,
) -> Turn:
    """`answered` False: no span holds an answer (content capture off), so the trace cannot
    be mapped."""
    tracer = app.tracer
    question = f"How many days does plan {n} give for a refund?"
    answer = f"Plan {n} gives {n + 10} days for a refund."
    docs = [
        (f"plan-{n}", f"Plan {n} gives {n + 10} days for a refund after delivery."),
        ("shipping", "Orders ship within two business days."),
    ]
    common = {"session.id": session} if session else {}
    root = tracer.start_span(
        "RunnableSequence",
        start_time=start_ns,
        attributes={
            **common,
            "openinference.span.kind": "CHAIN",
            "input.value": question,
            **({"output.value": answer} if answered else {}),
        },
    )
    in_root = otel_trace.set_span_in_context(root)
    parallel = tracer.start_span(
        "RunnableParallel",
        context=in_root,
        start_time=start_ns + MS,
        attributes={
            **common,
            "openinference.span.kind": "CHAIN",
            "input.value": question,
            **(
                {
                    "output.value": json.dumps(
                        {"context": [{"page_content": t} for _, t in docs], "question": question}
                    )
                }
                if answered
                else {}
            ),
        },
    )
    retrieval: dict[str, object] = {
        **common,
        "openinference.span.kind": "RETRIEVER",
        "input.value": question,
    }
    for i, (doc_id, text) in enumerate(docs):
        retrieval[f"retrieval.documents.{i}.document.id"] = doc_id
        retrieval[f"retrieval.documents.{i}.document.content"] = text
        retrieval[f"retrieval.documents.{i}.document.score"] = 0.9 - i / 2
    retriever = tracer.start_span(
        "VectorStoreRetriever",
        context=otel_trace.set_span_in_context(parallel),
        start_time=start_ns + 2 * MS,
        attributes=retrieval,  # type: ignore[arg-type]
    )
    retriever.end(end_time=start_ns + 40 * MS)
    parallel.end(end_time=start_ns + 41 * MS)
    llm_attributes: dict[str, object] = {
        **common,
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Answer from the context only.",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": f"Context: {docs[0][1]}\n\nQuestion: {question}",
        "llm.token_count.prompt": 120,
        "llm.token_count.completion": 12,
    }
    if answered:
        llm_attributes["llm.output_messages.0.message.role"] = "assistant"
        llm_attributes["llm.output_messages.0.message.content"] = answer
    llm = tracer.start_span(
        "ChatOpenAI",
        context=in_root,
        start_time=start_ns + 42 * MS,
        attributes=llm_attributes,  # type: ignore[arg-type]
    )
    llm.end(end_time=start_ns + 42 * MS + llm_ns)
    root.end(end_time=start_ns + 43 * MS + llm_ns)
    context = root.get_span_context()
    trace_id = format(context.trace_id, "032x")
    spans = tuple(s for s in app.spans() if hex_trace_id(s) == trace_id)
    app.exporter.clear()  # the turn keeps its spans; the app starts afresh
    return Turn(n, trace_id, question, answer, start_ns, spans)


def concurrent_turns(
    count: int, session: str, start_ns: int, rng: random.Random, app: App | None = None
) -> list[Turn]:
    """`count` turns of one conversation started 5 ms apart, lasting 0.2-2 s each (so they
    overlap and end in a different order than they started)."""
    app = app or App()
    return [
        langchain_turn(
            app,
            n,
            session=session,
            start_ns=start_ns + n * 5 * MS,
            llm_ns=rng.randint(200, 2000) * MS,
        )
        for n in range(1, count + 1)
    ]


def exported_messages(turns: Sequence[Turn], fmt: Fmt, spans_per_message: int = 3) -> list[bytes]:
    """Every span of these turns in the order they ended (an SDK's batch export order), cut
    into export messages that mix the turns, as a Collector batching by count writes them."""
    spans = sorted((span for turn in turns for span in turn.spans), key=lambda s: s.end_time or 0)
    return [
        encode(spans[i : i + spans_per_message], fmt)
        for i in range(0, len(spans), spans_per_message)
    ]
