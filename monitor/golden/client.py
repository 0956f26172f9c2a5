"""HTTP client for the service under evaluation: one request per query, retries, latency.

A request is built from the suite's request template (:mod:`monitor.config.golden.template`) and the
response is read with its mapping (:mod:`monitor.config.golden.jsonpath`).

Retries (:mod:`monitor.retry`): a connection error, a timeout (``timeout_seconds`` per attempt,
body included) or a status in ``retry_statuses`` is retried up to ``retries`` times, waiting a
random time up to ``backoff_seconds * 2**(n-1)`` before retry ``n`` (capped at
``backoff_max_seconds``; a ``Retry-After`` header, in seconds or as an HTTP date, is the least
wait, honoured up to that cap). Other HTTP errors and responses the mapping cannot read fail at
once -- repeating them would not help.

Latency is ``time.perf_counter()`` around the successful attempt: from sending the request to
having read the whole body, in milliseconds. Failed attempts and backoff waits are not part of
it (``attempts`` says how many there were).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from pydantic import JsonValue

from monitor.config.golden import ServiceConfig
from monitor.config.golden.jsonpath import PathError, extract, parse_path
from monitor.config.golden.template import TemplateError, query_parameters, render
from monitor.retry import Backoff, RetriesExhausted, RetryMetrics, RetryPolicy, parse_retry_after

Kind = Literal["retrieval", "generation"]
Sleep = Callable[[float], Awaitable[None]]

_EXCERPT = 200


class ServiceError(Exception):
    """A query that failed for good; ``attempts`` requests were made."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class ServiceReply:
    """What one query's successful request returned."""

    latency_ms: float
    attempts: int
    doc_ids: tuple[str, ...] = ()
    duplicates_dropped: int = 0
    answer: str | None = None
    contexts: tuple[str, ...] | None = None


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list):
        out: list[Any] = []
        for item in value:
            out.extend(_flatten(item))
        return out
    return [value]


def read_doc_ids(document: Any, path: str, *, dedupe: bool) -> tuple[tuple[str, ...], int]:
    """Ranked document ids at ``path`` and how many repeats were dropped."""
    value = extract(parse_path(path), document)
    if value is None:
        return (), 0
    if not isinstance(value, list):
        raise PathError(f"path {path!r} holds {type(value).__name__}, not a list of ids")
    ids: list[str] = []
    seen: set[str] = set()
    dropped = 0
    for item in _flatten(value):
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise PathError(f"path {path!r}: a document id is {type(item).__name__}: {item!r}")
        doc_id = str(item)
        if doc_id in seen:
            if not dedupe:
                raise PathError(f"path {path!r}: document id {doc_id!r} repeats")
            dropped += 1
            continue
        seen.add(doc_id)
        ids.append(doc_id)
    return tuple(ids), dropped


def read_answer(document: Any, path: str) -> str:
    value = extract(parse_path(path), document)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PathError(f"path {path!r} holds {type(value).__name__}, not a string")
    return value


def read_contexts(document: Any, path: str) -> tuple[str, ...]:
    value = extract(parse_path(path), document)
    if value is None:
        return ()
    items = _flatten(value)
    for item in items:
        if not isinstance(item, str):
            raise PathError(f"path {path!r}: a context is {type(item).__name__}, not a string")
    return tuple(items)


def default_body(kind: Kind, variables: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The request body without a template: query, top_k or contexts, then the parameters."""
    params = variables.get("params")
    extra: dict[str, JsonValue] = dict(params) if isinstance(params, dict) else {}
    if kind == "retrieval":
        return {"query": variables["query"], "top_k": variables["top_k"], **extra}
    return {"query": variables["query"], "contexts": variables.get("contexts"), **extra}


class ServiceClient:
    """Sends one query to the service and reads the reply (see the module docstring)."""

    def __init__(
        self,
        config: ServiceConfig,
        session: aiohttp.ClientSession,
        *,
        kind: Kind,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        retry_metrics: RetryMetrics | None = None,
    ) -> None:
        self._config = config
        self._session = session
        self._kind = kind
        self._retry = RetryPolicy(
            "golden_service",
            Backoff(config.backoff_seconds, config.backoff_max_seconds),
            retry_on=lambda exc: isinstance(exc, _Retryable),
            attempts=config.retries + 1,
            retry_after=lambda exc: exc.retry_after if isinstance(exc, _Retryable) else None,
            metrics=retry_metrics,
            log_level="info",
            sleep=sleep,
            rng=rng or random.Random(),
        )
        self._headers = {
            **config.headers,
            **{name: secret.get_secret_value() for name, secret in config.secret_headers.items()},
        }

    def build_request(self, variables: Mapping[str, JsonValue]) -> dict[str, Any]:
        """``aiohttp`` keyword arguments for one query (``TemplateError`` on a bad template)."""
        template = self._config.request_template
        body: JsonValue = (
            default_body(self._kind, variables) if template is None else render(template, variables)
        )
        kwargs: dict[str, Any] = {"headers": self._headers}
        if self._config.method == "GET":
            kwargs["params"] = query_parameters(body)
        else:
            kwargs["json"] = body
        return kwargs

    async def call(self, variables: Mapping[str, JsonValue]) -> ServiceReply:
        try:
            request = self.build_request(variables)
        except TemplateError as exc:
            raise ServiceError(f"request template: {exc}", attempts=0) from None
        timeout = aiohttp.ClientTimeout(total=self._config.timeout_seconds)
        attempts = 0

        async def attempt() -> ServiceReply:
            nonlocal attempts
            attempts += 1
            return await self._attempt(request, timeout, attempts)

        try:
            return await self._retry.call(attempt)
        except RetriesExhausted as exc:
            raise ServiceError(str(exc.last), attempts=exc.attempts) from None

    async def _attempt(
        self, request: dict[str, Any], timeout: aiohttp.ClientTimeout, attempt: int
    ) -> ServiceReply:
        config = self._config
        start = time.perf_counter()
        try:
            async with self._session.request(
                config.method,
                config.url,
                timeout=timeout,
                ssl=config.verify_tls,
                **request,
            ) as response:
                raw = await response.read()
                status = response.status
                retry_after = parse_retry_after(response.headers)
        except TimeoutError:
            raise _Retryable(f"timed out after {config.timeout_seconds:g} s") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        latency_ms = (time.perf_counter() - start) * 1000.0
        if status in config.retry_statuses:
            raise _Retryable(f"HTTP {status}", retry_after)
        if status >= 400:
            excerpt = raw[:_EXCERPT].decode("utf-8", "replace")
            raise ServiceError(f"HTTP {status}: {excerpt}", attempts=attempt)
        try:
            document = json.loads(raw)
        except ValueError:
            excerpt = raw[:_EXCERPT].decode("utf-8", "replace")
            raise ServiceError(f"response is not JSON: {excerpt!r}", attempts=attempt) from None
        try:
            return self._read(document, latency_ms, attempt)
        except PathError as exc:
            raise ServiceError(f"response mapping: {exc}", attempts=attempt) from None

    def _read(self, document: Any, latency_ms: float, attempt: int) -> ServiceReply:
        mapping = self._config.response
        doc_ids: tuple[str, ...] = ()
        dropped = 0
        if mapping.doc_ids is not None:
            doc_ids, dropped = read_doc_ids(
                document, mapping.doc_ids, dedupe=self._config.dedupe_doc_ids
            )
        answer = read_answer(document, mapping.answer) if mapping.answer is not None else None
        contexts = (
            read_contexts(document, mapping.contexts) if mapping.contexts is not None else None
        )
        return ServiceReply(
            latency_ms=latency_ms,
            attempts=attempt,
            doc_ids=doc_ids,
            duplicates_dropped=dropped,
            answer=answer,
            contexts=contexts,
        )


__all__ = [
    "ServiceClient",
    "ServiceError",
    "ServiceReply",
    "default_body",
    "read_answer",
    "read_contexts",
    "read_doc_ids",
]
