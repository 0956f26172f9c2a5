"""A real HTTP server on loopback speaking the OpenAI chat-completions API, answering from a script.

The daemon's real ``openai`` client talks to it (no mocks). ``POST /v1/chat/completions`` and
``POST /chat/completions`` are served, and Azure OpenAI's
``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (and ``GET /v1/models``).

What each request gets, first match wins:

1. the next :class:`Reply` queued with :meth:`OpenAIServer.push`;
2. the `script` callable (sync or async), given the :class:`Received` request; returning None
   falls through;
3. the default judge: realistic verdicts computed from the prompt's ``<data>`` block for the
   judge's tasks (``ragmon_faithfulness``, ``ragmon_relevance``, ``ragmon_turn``, recognised by
   the json_schema name or the schema name in the system prompt). Answer sentences containing
   `unsupported_marker` are unsupported, context sentences containing `irrelevant_marker` are
   neither useful nor relevant; everything else is supported / useful / relevant.

``POST /v1/embeddings`` (also ``/embeddings`` and Azure's
``/openai/deployments/{deployment}/embeddings``) answers with deterministic vectors: hashed
bags of words (and CJK character bigrams), L2-normalised, so texts sharing words have a high
cosine similarity. Embedding requests are recorded in :attr:`OpenAIServer.requests` too
(``Received.embedding`` is True). They consult the `script` (a :class:`Reply` with a status,
delay, drop or whole `body` is honoured; a `content` list of vectors is sent as the
embeddings) but never the queue of pushed replies, which stays for chat. Usage is reported
like chat's (characters / 4 + 1 prompt tokens, no completion tokens); ``encoding_format``
float and base64 (the openai client's default) are both served.

A :class:`Reply` can be JSON content, raw (malformed) content, a truncated reply with
``finish_reason="length"``, an HTTP error status with headers (``Retry-After``), a delay, or a
dropped connection. Every request's path, headers and JSON body are recorded in
:attr:`OpenAIServer.requests`.

Async tests: ``await server.start()`` / ``await server.stop()`` (or ``async with``), ``server.url``.
Subprocess tests: ``server.start_in_thread()`` / ``server.stop_in_thread()`` (or ``with``) run it
on its own loop in a thread; ``python -m tests.support.openai_server --port 0`` runs it alone and
prints its URL.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import inspect
import itertools
import json
import math
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from tests.support.loop_thread import LoopThread

TASKS = ("ragmon_faithfulness", "ragmon_relevance", "ragmon_turn", "ragmon_reference")
_DATA_RE = re.compile(r"<data>\n?(.*?)\n?</data>", re.S)
_SENTENCE_RE = re.compile("(?<=[.!?])\\s+|(?<=[\u3002\uff01\uff1f])\\s*")
EMBEDDING_DIMENSIONS = 256
_CJK_RE = re.compile("[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]+")


@dataclass
class Reply:
    """What the server answers to one request.

    `content`: a dict/list is sent as JSON text, a str as is (use it for malformed output), None
    means "what the default judge would answer". `status` other than 200 sends an OpenAI-style
    error; `body` replaces the whole response JSON (error or success). `truncate` cuts the
    content to that many characters and sets ``finish_reason="length"``. `drop` closes the
    connection without answering.
    """

    content: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0
    finish_reason: str = "stop"
    drop: bool = False
    usage: tuple[int, int] | None = None
    truncate: int | None = None

    @classmethod
    def error(cls, status: int, retry_after: str | float | None = None, **kw: Any) -> Reply:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        return cls(status=status, headers=headers, **kw)

    @classmethod
    def malformed(cls, text: str = '{"statements": [ this is not json') -> Reply:
        return cls(content=text)

    @classmethod
    def truncated(cls, keep: int = 25) -> Reply:
        return cls(truncate=keep)


@dataclass
class Received:
    """One request as the server received it."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival
    usage: dict[str, int] | None = None  # what the server reported back, when it answered 200

    @property
    def embedding(self) -> bool:
        """Whether this is an embeddings request (not a chat completion)."""
        return self.path.endswith("/embeddings")

    @property
    def inputs(self) -> list[str]:
        """An embeddings request's input texts."""
        value = self.body.get("input")
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value] if isinstance(value, list) else []

    @property
    def messages(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages")
        return msgs if isinstance(msgs, list) else []

    def message(self, role: str) -> str:
        return "\n".join(
            str(m.get("content") or "") for m in self.messages if m.get("role") == role
        )

    @property
    def system(self) -> str:
        return self.message("system")

    @property
    def user(self) -> str:
        return self.message("user")

    @property
    def text(self) -> str:
        """Everything the request carried, as received (for "is X absent" checks)."""
        return json.dumps(self.body, ensure_ascii=False)

    @property
    def response_format(self) -> str | None:
        rf = self.body.get("response_format")
        return rf.get("type") if isinstance(rf, dict) else None

    @property
    def task(self) -> str | None:
        rf = self.body.get("response_format")
        if isinstance(rf, dict) and rf.get("type") == "json_schema":
            name = (rf.get("json_schema") or {}).get("name")
            if name:
                return str(name)
        system = self.system
        return next((t for t in TASKS if t in system), None)

    @property
    def data_block(self) -> str | None:
        m = _DATA_RE.search(self.user)
        return m.group(1) if m else None

    @property
    def data(self) -> dict[str, Any] | None:
        block = self.data_block
        if block is None:
            return None
        try:
            value = json.loads(block)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


Script = Callable[[Received], "Reply | Awaitable[Reply | None] | None"]


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.split(text) if s.strip()]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) > 2}


def _terms(text: str) -> set[str]:
    """Latin words longer than 2 characters and the character bigrams of CJK runs."""
    terms = {w for w in re.findall(r"[^\W\u3040-\u30ff\u3400-\u9fff]+", text.lower()) if len(w) > 2}
    for run in _CJK_RE.findall(text):
        terms.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return terms


def _mostly_in(sentence: str, text: str) -> bool:
    """At least half of `sentence`'s terms (see :func:`_terms`) occur in `text`."""
    terms = _terms(sentence)
    return bool(terms) and len(terms & _terms(text)) * 2 >= len(terms)


def embed(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A deterministic unit vector for `text`: hashed counts of its words longer than 2
    characters and their 5-letter stems, and of the character bigrams of its CJK runs. The
    components are counts (never negative), so the cosine of two texts is in [0, 1] and grows
    with the words they share."""
    features: list[str] = []
    for w in re.findall(r"\w+", text.lower()):
        if len(w) > 2 and not _CJK_RE.match(w):
            features.extend((w, f"{w[:5]}~"))
    for run in _CJK_RE.findall(text):
        features.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    vector = [0.0] * dimensions
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=4).digest()
        vector[int.from_bytes(digest, "little") % dimensions] += 1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [v / norm for v in vector]


class OpenAIServer:
    def __init__(
        self,
        script: Script | None = None,
        *,
        unsupported_marker: str = "UNSUPPORTED",
        irrelevant_marker: str = "IRRELEVANT",
        reject_json_schema: bool = False,
        model: str = "judge-test",
    ) -> None:
        self.script = script
        self.unsupported_marker = unsupported_marker
        self.irrelevant_marker = irrelevant_marker
        self.reject_json_schema = reject_json_schema
        self.model = model
        self.requests: list[Received] = []
        self.queue: deque[Reply] = deque()
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)
        self._in_thread: LoopThread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for the openai client (``http://127.0.0.1:PORT/v1``)."""
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self, port: int | None = None) -> str:
        """Listen on 127.0.0.1 (a free port, or `port`, or the previous one on a restart)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._handle)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/embeddings", self._embeddings)
        app.router.add_post("/openai/deployments/{deployment}/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        want = port if port is not None else (self.port or 0)
        site = web.TCPSite(runner, "127.0.0.1", want)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self.url

    async def stop(self) -> None:
        """Stop listening (connections are refused until :meth:`start` again, same port)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> OpenAIServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def start_in_thread(self, port: int | None = None) -> str:
        """Run the server on its own event loop in a daemon thread; returns the URL."""
        self._in_thread = LoopThread("openai-test-server")
        return self._in_thread.run(self.start(port))

    def stop_in_thread(self) -> None:
        in_thread, self._in_thread = self._in_thread, None
        if in_thread is None:
            return
        in_thread.run(self.stop())
        in_thread.close()

    def __enter__(self) -> OpenAIServer:
        self.start_in_thread()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_in_thread()

    # -- scripting ---------------------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order (before the script and the default)."""
        self.queue.extend(replies)

    def requests_for(self, task: str) -> list[Received]:
        return [r for r in self.requests if r.task == task]

    def reset(self) -> None:
        self.requests.clear()
        self.queue.clear()

    # -- handling ----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        )

    async def _receive(self, request: web.Request) -> Received:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        received = Received(
            path=request.path,
            query=dict(request.query),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body if isinstance(body, dict) else {"_raw": body},
            at=time.monotonic(),
        )
        self.requests.append(received)
        return received

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        reply = Reply()
        if self.script is not None:
            out = self.script(received)
            if inspect.isawaitable(out):
                out = await out
            if out is not None:
                reply = out
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        if reply.status != 200 or reply.body is not None:
            error = reply.body or {
                "error": {"message": f"scripted status {reply.status}", "type": "server_error"}
            }
            return web.json_response(error, status=reply.status, headers=reply.headers)
        texts = received.inputs
        vectors = reply.content if isinstance(reply.content, list) else [embed(t) for t in texts]
        as_base64 = received.body.get("encoding_format") == "base64"
        data = []
        for i, vector in enumerate(vectors):
            values = [float(v) for v in vector]
            encoded: Any = values
            if as_base64:
                encoded = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        prompt_tokens = sum(len(t) for t in texts) // 4 + 1
        received.usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 0}
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": str(received.body.get("model") or self.model),
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            },
            headers=reply.headers,
        )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        reply = await self._decide(received)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # nothing more to send on a dropped connection
        if reply.status != 200:
            error = reply.body or {
                "error": {
                    "message": f"scripted status {reply.status}",
                    "type": "server_error" if reply.status >= 500 else "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
            return web.json_response(error, status=reply.status, headers=reply.headers)
        if reply.body is not None:  # the whole response, as scripted
            return web.json_response(reply.body, headers=reply.headers)
        content = reply.content
        if content is None:
            content = self.judge(received)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        finish = reply.finish_reason
        if reply.truncate is not None:
            text, finish = text[: reply.truncate], "length"
        if reply.usage is not None:
            prompt_tokens, completion_tokens = reply.usage
        else:
            prompt_tokens = sum(len(str(m.get("content") or "")) for m in received.messages) // 4
            prompt_tokens += 1
            completion_tokens = len(text) // 4 + 1
        received.usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        return web.json_response(
            {
                "id": f"chatcmpl-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(received.body.get("model") or self.model),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            headers=reply.headers,
        )

    async def _decide(self, received: Received) -> Reply:
        if self.queue:
            return self.queue.popleft()
        if self.reject_json_schema and received.response_format == "json_schema":
            return Reply.error(
                400,
                body={
                    "error": {
                        "message": "response_format json_schema is not supported",
                        "type": "invalid_request_error",
                        "param": "response_format",
                        "code": None,
                    }
                },
            )
        if self.script is not None:
            out = self.script(received)
            if inspect.isawaitable(out):
                out = await out
            if out is not None:
                return out
        return Reply()

    # -- the default judge -------------------------------------------------------------------

    def judge(self, received: Received) -> dict[str, Any]:
        """Sensible verdicts for the judge's tasks, from the request's data block."""
        data = received.data or {}
        task = received.task
        if task == "ragmon_faithfulness":
            return self._faithfulness(data)
        if task == "ragmon_relevance":
            return self._relevance(data)
        if task == "ragmon_turn":
            return self._turn(data)
        if task == "ragmon_reference":
            return self._reference(data)
        return {"error": "unknown task"}

    def _contexts(self, data: dict[str, Any]) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        for c in data.get("contexts") or []:
            sentences = c.get("sentences") or {}
            ordered = [sentences[k] for k in sorted(sentences, key=int)]
            out.append((str(c.get("id")), [str(s) for s in ordered]))
        return out

    def _faithfulness(self, data: dict[str, Any]) -> dict[str, Any]:
        contexts = self._contexts(data)
        statements = []
        for sentence in split_sentences(str(data.get("answer") or "")):
            supported = self.unsupported_marker not in sentence
            evidence = None
            if supported and contexts:
                words = _words(sentence)
                evidence = max(contexts, key=lambda c: len(words & _words(" ".join(c[1]))))[0]
            statements.append(
                {
                    "statement": sentence,
                    "supported": supported,
                    "evidence": evidence,
                    "reason": "stated in the context" if supported else "not in any context",
                }
            )
        return {"statements": statements}

    def _relevance(self, data: dict[str, Any]) -> dict[str, Any]:
        answer = str(data.get("answer") or "")
        noncommittal = any(p in answer for p in ("I don't know", "わかりません", "分かりません"))
        contexts = []
        for label, sentences in self._contexts(data):
            relevant = [n for n, s in enumerate(sentences, 1) if self.irrelevant_marker not in s]
            contexts.append(
                {
                    "id": label,
                    "useful": bool(relevant),
                    "relevant_sentences": relevant,
                    "reason": "scripted",
                }
            )
        return {
            "aspects": [{"aspect": str(data.get("question") or ""), "addressed": not noncommittal}],
            "noncommittal": noncommittal,
            "relevancy_reason": "scripted",
            "contexts": contexts,
        }

    def _reference(self, data: dict[str, Any]) -> dict[str, Any]:
        reference = {str(k): str(v) for k, v in (data.get("reference") or {}).items()}
        contexts = " ".join(str(c) for c in (data.get("contexts") or {}).values())
        answer = str(data.get("answer") or "")
        reference_text = " ".join(reference.values())
        statements = [
            {
                "statement": sentence,
                "verdict": "TP"
                if self.unsupported_marker not in sentence and _mostly_in(sentence, reference_text)
                else "FP",
                "reason": "scripted",
            }
            for sentence in split_sentences(answer)
        ]
        sentences = [
            {
                "id": rid,
                "in_answer": _mostly_in(text, answer),
                "in_contexts": bool(contexts) and _mostly_in(text, contexts),
                "reason": "scripted",
            }
            for rid, text in reference.items()
        ]
        return {"answer_statements": statements, "reference_sentences": sentences}

    def _turn(self, data: dict[str, Any]) -> dict[str, Any]:
        answer = str(data.get("latest_answer") or "")
        message = str(data.get("latest_user_message") or "")
        verdicts = []
        for c in data.get("active_constraints") or []:
            cid = str(c.get("id"))
            status = "violated" if f"VIOLATE {cid}" in answer else "satisfied"
            if f"OMIT {cid}" in answer:
                status = "omitted"
            verdicts.append({"id": cid, "status": status, "reason": "scripted"})
        new: list[dict[str, Any]] = []
        m = re.search(r"at most (\d+) characters", message)
        if m:
            new.append({"text": m.group(0), "kind": "max_chars", "value": int(m.group(1))})
        if "no jargon" in message:
            new.append({"text": "no jargon", "kind": None, "value": None})
        withdrawn = re.findall(r"WITHDRAW (K\d+)", message)
        return {
            "verdicts": verdicts,
            "new_constraints": new,
            "withdrawn": withdrawn,
            "scores": {
                "relevance": 8,
                "answer_quality": 7,
                "instruction_following": 9
                if all(v["status"] == "satisfied" for v in verdicts)
                else 3,
                "coherence": 8,
            },
            "reason": "scripted",
        }


def main() -> None:
    parser = argparse.ArgumentParser(description="scripted OpenAI-compatible judge server")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = OpenAIServer()
    url = server.start_in_thread(args.port)
    print(url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop_in_thread()


if __name__ == "__main__":
    main()
