"""The openai clients of a judge configuration: one factory for the judge, golden judges and ragas.

From :class:`~monitor.config.judge.JudgeConfig`: ``AsyncAzureOpenAI`` when
``azure_api_version`` is set, else ``AsyncOpenAI`` on ``base_url`` (never the environment's
``OPENAI_BASE_URL``); the API key (``EMPTY`` when none is configured: vLLM and Ollama ignore
it); extra headers; an explicit timeout (``timeout_seconds``, connecting within 10 s at most).
The embeddings client is the chat client unless ``embedding_base_url`` names another server.

``max_retries`` is the openai SDK's own retrying (429, 408, 409, 5xx and connection errors,
honouring Retry-After): the ragas path lets the SDK retry; the judge turns it off and retries
through :mod:`monitor.retry`, because it classifies failures by kind (see
:mod:`monitor.evaluators.judge_client`). ``event_hooks`` are httpx hooks on every request and
response (how the ragas path sees the calls ragas makes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from pydantic import SecretStr

from monitor.config.judge import JudgeConfig

NO_KEY = "EMPTY"  # sent when no api_key is configured (vLLM / Ollama ignore it)
OPENAI_BASE_URL = "https://api.openai.com/v1"
CONNECT_TIMEOUT_SECONDS = 10.0
EventHooks = Mapping[str, Sequence[Callable[[Any], Awaitable[None]]]]


@dataclass(frozen=True)
class OpenAIClients:
    """The chat client and the embeddings client (the same object unless a separate embeddings
    server is configured)."""

    chat: openai.AsyncOpenAI
    embeddings: openai.AsyncOpenAI

    async def aclose(self) -> None:
        await self.chat.close()
        if self.embeddings is not self.chat:
            await self.embeddings.close()


def openai_clients(
    config: JudgeConfig, *, max_retries: int, event_hooks: EventHooks | None = None
) -> OpenAIClients:
    chat = _client(config, config.base_url, config.api_key, max_retries, event_hooks)
    embeddings = chat
    if config.embedding_base_url is not None:
        embeddings = _client(
            config, config.embedding_base_url, config.embedding_api_key, max_retries, event_hooks
        )
    return OpenAIClients(chat, embeddings)


def _client(
    config: JudgeConfig,
    base_url: str | None,
    api_key: SecretStr | None,
    max_retries: int,
    event_hooks: EventHooks | None,
) -> openai.AsyncOpenAI:
    key = api_key.get_secret_value() if api_key is not None else NO_KEY
    headers = config.header_values() or None
    timeout = httpx.Timeout(
        config.longest_request_seconds,
        connect=min(config.longest_request_seconds, CONNECT_TIMEOUT_SECONDS),
    )
    http_client = None
    if event_hooks is not None:
        hooks = {name: list(functions) for name, functions in event_hooks.items()}
        http_client = openai.DefaultAsyncHttpxClient(timeout=timeout, event_hooks=hooks)
    if config.azure_api_version:
        return openai.AsyncAzureOpenAI(
            azure_endpoint=base_url or "",
            api_version=config.azure_api_version,
            api_key=key,
            default_headers=headers,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )
    return openai.AsyncOpenAI(
        base_url=base_url or OPENAI_BASE_URL,  # never the environment's OPENAI_BASE_URL
        api_key=key,
        default_headers=headers,
        timeout=timeout,
        max_retries=max_retries,
        http_client=http_client,
    )
