"""A LangChain RAG app instrumented with OpenInference (LangChain and OpenAI instrumentors).

The chain is retriever -> prompt (context and question in one user message) -> ChatOpenAI ->
output parser; each turn runs under `using_session` so every span carries `session.id`. Per
conversation it also makes one plain OpenAI call outside any session and chain (a title for
the conversation): a trace with only an LLM span, which rag-monitor must not score as a turn.
"""

from __future__ import annotations

from langchain_common import plan_retriever
from langchain_core.documents import Document as LCDocument
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_openai import ChatOpenAI
from openai import OpenAI
from openinference.instrumentation import using_session
from openinference.instrumentation.langchain import LangChainInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from rag_common import SYSTEM_PROMPT, load_plan, retriever, turns

plan = load_plan()
provider = TracerProvider(resource=Resource.create({"service.name": plan["service"]}))
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"{plan['otlp_endpoint']}/v1/traces"), schedule_delay_millis=500
    )
)
LangChainInstrumentor().instrument(tracer_provider=provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)


def format_docs(docs: list[LCDocument]) -> str:
    return "\n\n".join(f"[{d.metadata['id']}] {d.page_content}" for d in docs)


prompt = ChatPromptTemplate.from_messages(
    [("system", SYSTEM_PROMPT), ("human", "Context:\n{context}\n\nQuestion: {question}")]
)
llm = ChatOpenAI(
    model=plan["model"], base_url=plan["openai_base_url"], api_key="test-key", temperature=0
)
chain = (
    {
        "context": plan_retriever(retriever(plan)) | RunnableLambda(format_docs),
        "question": RunnablePassthrough(),
    }
    | prompt
    | llm
    | StrOutputParser()
)
client = OpenAI(base_url=plan["openai_base_url"], api_key="test-key")

for turn in turns(plan):
    with using_session(turn.conversation):
        chain.invoke(turn.question)
    if turn.index == 1 and plan.get("stray_llm_calls", True):
        client.chat.completions.create(
            model=plan["model"],
            messages=[{"role": "user", "content": f"A title for: {turn.question}"}],
        )

provider.shutdown()
