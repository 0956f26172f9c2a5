"""The ragas side of :mod:`monitor.evaluate.ragas_adapter`: lazy import, telemetry off, clients.

- :func:`load_ragas` imports ragas on first use (the package works without the ``ragas`` extra)
  and raises :class:`RagasUnavailableError` naming ``pip install 'rag-monitor[ragas]'`` when it
  is missing or broken. Before the import it forces ``RAGAS_DO_NOT_TRACK=true`` (and clears
  ragas's cached reading of it, in case ragas was imported earlier), so ragas's usage analytics
  never leave the process.
- :func:`make_openai_client` builds the ``openai`` async client ragas talks through, from
  :class:`~monitor.evaluate.judge_config.JudgeConfig`: base URL (never the environment's
  ``OPENAI_BASE_URL``), API key, extra headers, Azure api_version, an explicit timeout
  (``timeout_seconds``) and retry count (``max_retries``: the openai client's own retries on
  429 / 5xx / connection errors, honouring Retry-After).
- Every HTTP response of that client is accounted (httpx response hook): request outcome and
  latency, and ``usage`` tokens into :class:`JudgeMetrics` (evaluator ``ragas``) and into the
  :class:`UsageTally` of the evaluation running in the current asyncio context.

Everything ragas-typed is ``Any`` here: ragas is an optional, untyped-at-the-boundary dependency.
"""

from __future__ import annotations

import contextvars
import importlib
import json
import os
import sys
import time
import weakref
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from monitor.evaluate.judge_client import TokenTally
from monitor.evaluate.judge_config import JudgeConfig
from monitor.evaluate.judge_metrics import JudgeMetrics, RequestOutcome
from monitor.evaluate.token_budget import TokenBudget

RAGAS_EXTRA_HINT = "pip install 'rag-monitor[ragas]'"
DO_NOT_TRACK_ENV = "RAGAS_DO_NOT_TRACK"
NO_KEY = "EMPTY"  # sent when no api_key is configured (vLLM / Ollama ignore it)
OPENAI_BASE_URL = "https://api.openai.com/v1"


class RagasUnavailableError(ImportError):
    """ragas (the ``ragas`` extra) is not installed or does not import."""


@dataclass(frozen=True)
class RagasModules:
    """What the adapter uses of ragas (all ``Any``)."""

    version: str
    collections: Any  # ragas.metrics.collections
    llm_factory: Any  # ragas.llms.llm_factory
    embeddings: Any  # ragas.embeddings.OpenAIEmbeddings (modern interface)


def force_no_tracking() -> None:
    """Set ``RAGAS_DO_NOT_TRACK=true`` and make an already imported ragas re-read it."""
    os.environ[DO_NOT_TRACK_ENV] = "true"
    analytics = _loaded("ragas._analytics")
    if analytics is not None:
        cached = getattr(analytics, "do_not_track", None)
        cache_clear = getattr(cached, "cache_clear", None)
        if callable(cache_clear):
            cache_clear()


def _loaded(name: str) -> Any:
    return sys.modules.get(name)


def load_ragas() -> RagasModules:
    """Import ragas (telemetry forced off first); :class:`RagasUnavailableError` if missing."""
    force_no_tracking()
    try:
        ragas = importlib.import_module("ragas")
        collections = importlib.import_module("ragas.metrics.collections")
        llms = importlib.import_module("ragas.llms")
        embeddings = importlib.import_module("ragas.embeddings")
    except ImportError as exc:  # ModuleNotFoundError included
        raise RagasUnavailableError(
            "the ragas evaluator needs the optional ragas extra, which is not installed or does "
            f"not import ({type(exc).__name__}: {exc}); install it with: {RAGAS_EXTRA_HINT}"
        ) from exc
    force_no_tracking()  # ragas's analytics module is loaded now: clear its cached flag
    return RagasModules(
        version=str(getattr(ragas, "__version__", "unknown")),
        collections=collections,
        llm_factory=llms.llm_factory,
        embeddings=embeddings.OpenAIEmbeddings,
    )


# ---------------------------------------------------------------------------------------------
# token accounting


@dataclass
class UsageTally(TokenTally):
    """Calls and tokens of one evaluation, as reported by the endpoint's responses."""

    chat_calls: int = 0
    embedding_calls: int = 0


_CURRENT: contextvars.ContextVar[UsageTally | None] = contextvars.ContextVar(
    "ragmon_ragas_usage", default=None
)


def start_tally() -> tuple[UsageTally, contextvars.Token[UsageTally | None]]:
    """A fresh tally for the evaluation in this context (and the tasks it starts)."""
    tally = UsageTally()
    return tally, _CURRENT.set(tally)


def end_tally(token: contextvars.Token[UsageTally | None]) -> None:
    _CURRENT.reset(token)


class _Accounting:
    """httpx event hooks: outcome, latency and usage of every response."""

    def __init__(
        self,
        config: JudgeConfig,
        metrics: JudgeMetrics,
        evaluator: str,
        budget: TokenBudget | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.evaluator = evaluator
        self.budget = budget
        self._started: weakref.WeakKeyDictionary[httpx.Request, float] = weakref.WeakKeyDictionary()

    async def on_request(self, request: httpx.Request) -> None:
        self._started[request] = time.monotonic()

    async def on_response(self, response: httpx.Response) -> None:
        request = response.request
        started = self._started.pop(request, None)
        seconds = time.monotonic() - started if started is not None else 0.0
        status = response.status_code
        outcome: RequestOutcome = (
            "ok" if status < 400 else "rate_limited" if status == 429 else "error"
        )
        self.metrics.request(self.evaluator, outcome, seconds)
        tally = _CURRENT.get()
        embedding = request.url.path.endswith("/embeddings")
        if tally is not None:
            if embedding:
                tally.embedding_calls += 1
            else:
                tally.chat_calls += 1
        if status != 200:
            return
        await response.aread()
        try:
            usage = json.loads(response.content).get("usage")
        except (ValueError, AttributeError):
            return
        if not isinstance(usage, dict):
            return
        prompt = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        cost = (
            prompt * self.config.input_price_per_million
            + completion * self.config.output_price_per_million
        ) / 1_000_000
        self.metrics.tokens(self.evaluator, prompt, completion, cost)
        if self.budget is not None:
            self.budget.spend(prompt + completion, self.evaluator)
        if tally is not None:
            tally.input_tokens += prompt
            tally.output_tokens += completion
            tally.reported = True


def _int(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def make_openai_client(
    config: JudgeConfig,
    metrics: JudgeMetrics,
    evaluator: str,
    budget: TokenBudget | None = None,
    *,
    embeddings: bool = False,
) -> openai.AsyncOpenAI:
    """The async openai client for ragas: explicit timeout and retries, every response counted
    (and charged to `budget`). `embeddings`: the client of ``embedding_base_url``."""
    base_url, api_key = config.base_url, config.api_key
    if embeddings:
        base_url, api_key = config.embedding_base_url, config.embedding_api_key
    key = api_key.get_secret_value() if api_key is not None else NO_KEY
    headers = config.header_values() or None
    timeout = httpx.Timeout(config.timeout_seconds, connect=min(config.timeout_seconds, 10.0))
    accounting = _Accounting(config, metrics, evaluator, budget)
    http_client = openai.DefaultAsyncHttpxClient(
        timeout=timeout,
        event_hooks={"request": [accounting.on_request], "response": [accounting.on_response]},
    )
    if config.azure_api_version:
        return openai.AsyncAzureOpenAI(
            azure_endpoint=base_url or "",
            api_version=config.azure_api_version,
            api_key=key,
            default_headers=headers,
            timeout=timeout,
            max_retries=config.max_retries,
            http_client=http_client,
        )
    return openai.AsyncOpenAI(
        base_url=base_url or OPENAI_BASE_URL,  # never the environment's OPENAI_BASE_URL
        api_key=key,
        default_headers=headers,
        timeout=timeout,
        max_retries=config.max_retries,
        http_client=http_client,
    )
