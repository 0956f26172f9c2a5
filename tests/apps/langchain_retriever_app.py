"""A LangChain RAG chain with a `BaseRetriever`, instrumented with OpenLLMetry (traceloop-sdk).

`RunnableParallel(context=<retriever>, question=RunnablePassthrough()) | generate`, where
`generate` asks the model with the `openai` client; the conversation is LangChain run metadata
(`{"session_id": ...}`), which the instrumentation turns into association properties. Per
conversation one plain OpenAI call outside the chain (a title) that must not be scored.

What each version records: 0.62.4 a `vector_db_retrieve PlanRetriever` span with the documents
(page_content and metadata, no Document.id) and `execute_task` chain steps; 0.52.6 no
retriever span, only the chain steps the documents pass through as serialised Documents.
Runs with the current traceloop-sdk (.venv) and with 0.52.6 (.cache/venvs/traceloop-old).
"""

from __future__ import annotations

from typing import Any

from langchain_common import plan_retriever
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
from openai import OpenAI
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from rag_common import SYSTEM_PROMPT, load_plan, retriever, turns
from traceloop.sdk import Traceloop
from traceloop_common import init_traceloop

plan = load_plan()
init_traceloop(plan, LangchainInstrumentor())
client = OpenAI(base_url=plan["openai_base_url"], api_key="test-key")


def generate(inputs: dict[str, Any]) -> str:
    context = "\n\n".join(f"[{d.metadata['id']}] {d.page_content}" for d in inputs["context"])
    response = client.chat.completions.create(
        model=plan["model"],
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {inputs['question']}"},
        ],
        temperature=0,
    )
    return response.choices[0].message.content or ""


chain = RunnableParallel(
    context=plan_retriever(retriever(plan)), question=RunnablePassthrough()
) | RunnableLambda(generate)

for turn in turns(plan):
    chain.invoke(turn.question, config={"metadata": {"session_id": turn.conversation}})
    if turn.index == 1 and plan.get("stray_llm_calls", True):
        client.chat.completions.create(
            model=plan["model"],
            messages=[{"role": "user", "content": f"A title for: {turn.question}"}],
        )

Traceloop.flush() if hasattr(Traceloop, "flush") else None
