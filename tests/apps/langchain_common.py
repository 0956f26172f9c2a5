"""What the LangChain test apps share: a `BaseRetriever` over the plan's documents."""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever
from rag_common import Document


def plan_retriever(lookup: Callable[[str], list[Document]]) -> BaseRetriever:
    """A retriever returning the plan's documents for a question, each with its id as
    `Document.id` and, with its score, in the metadata."""

    class PlanRetriever(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[LCDocument]:
            return [
                LCDocument(page_content=d.text, metadata={"id": d.id, "score": d.score}, id=d.id)
                for d in lookup(query)
            ]

    return PlanRetriever()
