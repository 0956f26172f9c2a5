"""The ragas side of :mod:`monitor.evaluators.ragas_adapter`: lazy import, telemetry off, clients.

- :func:`load_ragas` imports ragas on first use (the package works without the ``ragas`` extra)
  and raises :class:`RagasUnavailableError` naming ``pip install 'rag-monitor[ragas]'`` when it
  is missing or broken. Before the import it forces ``RAGAS_DO_NOT_TRACK=true`` (and clears
  ragas's cached reading of it, in case ragas was imported earlier), so ragas's usage analytics
  never leave the process.
- :func:`make_openai_clients` builds the ``openai`` async clients ragas talks through with the
  shared factory (:mod:`monitor.evaluators.openai_client`), the SDK's own retries on
  (``max_retries``: 429 / 5xx / connection errors, honouring Retry-After) -- ragas makes the
  calls, so this is the one place a retry can happen.
- Every HTTP response of those clients is accounted (httpx response hook): request outcome and
  latency into :class:`JudgeMetrics` (evaluator ``ragas``), and ``usage`` tokens through the
  shared :class:`~monitor.evaluators.token_usage.TokenMeter`, into the tally of the evaluation
  running in the current asyncio context.

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

from monitor.config.judge import JudgeConfig
from monitor.evaluators.judge_metrics import JudgeMetrics, RequestOutcome
from monitor.evaluators.openai_client import EventHooks, OpenAIClients, openai_clients
from monitor.evaluators.token_budget import TokenBudget
from monitor.evaluators.token_usage import TokenMeter, TokenTally

RAGAS_EXTRA_HINT = "pip install 'rag-monitor[ragas]'"
DO_NOT_TRACK_ENV = "RAGAS_DO_NOT_TRACK"


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

_CURRENT: contextvars.ContextVar[TokenTally | None] = contextvars.ContextVar(
    "ragmon_ragas_usage", default=None
)


def start_tally() -> tuple[TokenTally, contextvars.Token[TokenTally | None]]:
    """A fresh tally for the evaluation in this context (and the tasks it starts)."""
    tally = TokenTally()
    return tally, _CURRENT.set(tally)


def end_tally(token: contextvars.Token[TokenTally | None]) -> None:
    _CURRENT.reset(token)


class _Accounting:
    """httpx event hooks: outcome, latency and usage of every response."""

    def __init__(self, metrics: JudgeMetrics, meter: TokenMeter) -> None:
        self.metrics = metrics
        self.meter = meter
        self._started: weakref.WeakKeyDictionary[httpx.Request, float] = weakref.WeakKeyDictionary()

    async def on_request(self, request: httpx.Request) -> None:
        self._started[request] = time.monotonic()

    async def on_response(self, response: httpx.Response) -> None:
        started = self._started.pop(response.request, None)
        seconds = time.monotonic() - started if started is not None else 0.0
        status = response.status_code
        outcome: RequestOutcome = (
            "ok" if status < 400 else "rate_limited" if status == 429 else "error"
        )
        self.metrics.request(self.meter.evaluator, outcome, seconds)
        if status != 200:
            return
        await response.aread()
        try:
            usage = json.loads(response.content).get("usage")
        except (ValueError, AttributeError):
            return
        if isinstance(usage, dict):
            self.meter.charge(usage, _CURRENT.get())


def make_openai_clients(
    config: JudgeConfig,
    metrics: JudgeMetrics,
    evaluator: str,
    budget: TokenBudget | None = None,
) -> OpenAIClients:
    """The openai clients ragas talks through: the SDK's own retries (``max_retries``: ragas
    calls the client itself, so there is nowhere else to retry), every response counted and
    charged to `budget`."""
    accounting = _Accounting(metrics, TokenMeter(config, metrics, evaluator, budget))
    hooks: EventHooks = {"request": [accounting.on_request], "response": [accounting.on_response]}
    return openai_clients(config, max_retries=config.max_retries, event_hooks=hooks)
