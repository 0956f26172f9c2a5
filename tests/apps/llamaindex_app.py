"""A LlamaIndex RAG query engine instrumented with OpenLLMetry (traceloop-sdk).

A `RetrieverQueryEngine` over a `BaseRetriever` that returns the plan's documents as nodes
(`id_` = the document id), answering with llama-index's OpenAI LLM (the `openai` client
underneath, traced by OpenLLMetry's OpenAI instrumentation); the conversation an association
property (`session_id`). Per conversation one plain OpenAI call outside the engine (a title)
that must not be scored. OpenLLMetry records each retriever call as `PlanRetriever.task` spans
whose output is the NodeWithScores, one JSON string each.
"""

from __future__ import annotations

from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.llms.openai import OpenAI as LlamaIndexOpenAI
from openai import OpenAI
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from rag_common import load_plan, retriever, turns
from traceloop.sdk import Traceloop
from traceloop_common import init_traceloop

plan = load_plan()
init_traceloop(plan, LlamaIndexInstrumentor())

lookup = retriever(plan)


class PlanRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(id_=d.id, text=d.text), score=d.score)
            for d in lookup(query_bundle.query_str)
        ]


llm = LlamaIndexOpenAI(
    model=plan["model"], api_base=plan["openai_base_url"], api_key="test-key", temperature=0
)
engine = RetrieverQueryEngine.from_args(PlanRetriever(), llm=llm)
client = OpenAI(base_url=plan["openai_base_url"], api_key="test-key")

for turn in turns(plan):
    Traceloop.set_association_properties({"session_id": turn.conversation})
    engine.query(turn.question)
    if turn.index == 1 and plan.get("stray_llm_calls", True):
        client.chat.completions.create(
            model=plan["model"],
            messages=[{"role": "user", "content": f"A title for: {turn.question}"}],
        )

Traceloop.flush() if hasattr(Traceloop, "flush") else None
