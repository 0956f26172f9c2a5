"""A LangChain RAG app instrumented with OpenLLMetry (traceloop-sdk), as its docs show.

`Traceloop.init` exports OTLP/HTTP to the Collector (`api_endpoint`); the answer is a
`@workflow`, the vector search a `@task` named `vector_db_retrieve` returning LangChain
documents, the conversation an association property (`session_id`). The LangChain chain
(prompt | ChatOpenAI | parser, context and question in one user message) is traced by the
SDK's LangChain and OpenAI instrumentations. Runs with the current traceloop-sdk (.venv) and
with 0.52.6 (.cache/venvs/traceloop-old), whose OpenAI spans use indexed prompt attributes.
"""

from __future__ import annotations

from langchain_core.documents import Document as LCDocument
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI
from rag_common import SYSTEM_PROMPT, load_plan, retriever, turns
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import task, workflow
from traceloop_common import init_traceloop

plan = load_plan()
init_traceloop(plan)
lookup = retriever(plan)
prompt = ChatPromptTemplate.from_messages(
    [("system", SYSTEM_PROMPT), ("human", "Context:\n{context}\n\nQuestion: {question}")]
)
llm = ChatOpenAI(
    model=plan["model"], base_url=plan["openai_base_url"], api_key="test-key", temperature=0
)
chain = prompt | llm | StrOutputParser()


@task(name="vector_db_retrieve")
def vector_db_retrieve(question: str) -> list[LCDocument]:
    return [
        LCDocument(page_content=d.text, metadata={"id": d.id, "score": d.score}, id=d.id)
        for d in lookup(question)
    ]


@workflow(name="rag_answer")
def rag_answer(question: str) -> str:
    documents = vector_db_retrieve(question)
    context = "\n\n".join(f"[{d.metadata['id']}] {d.page_content}" for d in documents)
    answer: str = chain.invoke({"context": context, "question": question})
    return answer


for turn in turns(plan):
    Traceloop.set_association_properties({"session_id": turn.conversation})
    rag_answer(turn.question)

Traceloop.flush() if hasattr(Traceloop, "flush") else None
