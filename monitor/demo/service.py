"""A small RAG service over the bundled English and Japanese corpus, for the demo and tests.

`POST /search {"query", "mode", "top_k"}` ranks documents (BM25); `POST /answer {"query",
"mode"}` answers extractively from the best document. Modes: `A`
ranks the text, `B` the title and text (the better mode), `E` is deliberately worse (it
returns the top candidates in reverse), so a golden suite has a difference to find.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from monitor.evaluators.text import content_tokens, split_sentences


@dataclass(frozen=True)
class Document:
    id: str
    lang: str
    title: str
    text: str


def load_corpus() -> list[Document]:
    raw = resources.files("monitor.demo").joinpath("corpus.json").read_text(encoding="utf-8")
    return [Document(**doc) for doc in json.loads(raw)]


class Retriever:
    """BM25 (k1 1.2, b 0.75) over token lists; one index per mode."""

    def __init__(self, docs: list[Document], with_title: bool) -> None:
        self.docs = docs
        self._tokens = [
            content_tokens(f"{d.title} {d.text}" if with_title else d.text) for d in docs
        ]
        self._avg = sum(len(t) for t in self._tokens) / max(1, len(self._tokens))
        df: Counter[str] = Counter()
        for tokens in self._tokens:
            df.update(set(tokens))
        n = len(docs)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self._tf = [Counter(t) for t in self._tokens]

    def search(self, query: str, top_k: int) -> list[tuple[Document, float]]:
        terms = content_tokens(query)
        scored = []
        for doc, tf, tokens in zip(self.docs, self._tf, self._tokens, strict=True):
            score = 0.0
            for term in terms:
                if term in tf:
                    f = tf[term]
                    norm = 1.2 * (1 - 0.75 + 0.75 * len(tokens) / self._avg)
                    score += self._idf[term] * f * 2.2 / (f + norm)
            if score > 0:
                scored.append((doc, score))
        scored.sort(key=lambda pair: (-pair[1], pair[0].id))
        return scored[:top_k]


class RagService:
    def __init__(self, docs: list[Document] | None = None) -> None:
        docs = docs if docs is not None else load_corpus()
        self._plain = Retriever(docs, with_title=False)
        self._titled = Retriever(docs, with_title=True)

    def search(self, query: str, mode: str = "B", top_k: int = 5) -> list[tuple[Document, float]]:
        if mode == "A":
            return self._plain.search(query, top_k)
        if mode == "E":
            return list(reversed(self._plain.search(query, top_k)))
        return self._titled.search(query, top_k)

    def answer(self, query: str, mode: str = "B") -> tuple[str, list[Document]]:
        hits = self.search(query, mode, top_k=3)
        if not hits:
            return "I don't know: nothing in the knowledge base covers that.", []
        best = hits[0][0]
        wanted = set(content_tokens(query))
        sentences = split_sentences(best.text)
        sentence = max(sentences, key=lambda s: len(wanted & set(content_tokens(s))))
        return sentence, [doc for doc, _ in hits]

    def app(self) -> web.Application:
        async def search(request: web.Request) -> web.Response:
            body = await _json(request)
            started = time.perf_counter()
            hits = self.search(
                str(body.get("query", "")), str(body.get("mode", "B")), int(body.get("top_k", 10))
            )
            return web.json_response(
                {
                    "results": [
                        {"id": d.id, "text": d.text, "score": round(s, 4)} for d, s in hits
                    ],
                    "latency_ms": round((time.perf_counter() - started) * 1000, 3),
                }
            )

        async def answer(request: web.Request) -> web.Response:
            body = await _json(request)
            text, docs = self.answer(str(body.get("query", "")), str(body.get("mode", "B")))
            return web.json_response(
                {
                    "answer": text,
                    "doc_ids": [d.id for d in docs],
                    "contexts": [{"id": d.id, "text": d.text} for d in docs],
                }
            )

        async def index(request: web.Request) -> web.Response:
            return web.json_response(
                {
                    "service": "rag-monitor demo RAG service",
                    "endpoints": {
                        "POST /search": '{"query": "...", "mode": "A|B|E", "top_k": 10}',
                        "POST /answer": '{"query": "...", "mode": "A|B|E"}',
                    },
                    "documents": len(self._titled.docs),
                }
            )

        app = web.Application()
        app.router.add_get("/", index)
        app.router.add_post("/search", search)
        app.router.add_post("/answer", answer)
        return app


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="body must be JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    return body
