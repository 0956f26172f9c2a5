"""The daemon's one HTTP server: /metrics, /healthz and /readyz (later issues add routes)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


@dataclass(frozen=True)
class Probes:
    """Answers for the probes: each returns (ok, human-readable detail)."""

    healthy: Callable[[], tuple[bool, str]]
    ready: Callable[[], tuple[bool, str]]


def build_app(registry: CollectorRegistry, probes: Probes) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    def probe(check: Callable[[], tuple[bool, str]]) -> Callable[[web.Request], object]:
        async def handler(request: web.Request) -> web.Response:
            ok, detail = check()
            return web.Response(status=200 if ok else 503, text=detail + "\n")

        return handler

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", probe(probes.healthy))  # type: ignore[arg-type]
    app.router.add_get("/readyz", probe(probes.ready))  # type: ignore[arg-type]
    return app


class HttpBindError(Exception):
    """The HTTP server could not listen on its address (port in use, address not local, ...)."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        self.host = host
        self.port = port
        self.error = error
        # asyncio's strerror repeats the address ("error while attempting to bind on address
        # ('0.0.0.0', 9820): address already in use"): the errno's own text says it once.
        reason = os.strerror(error.errno) if error.errno else str(error)
        super().__init__(f"cannot listen on {host}:{port}: {reason.lower()}")


class HttpServer:
    """Start/stop wrapper around an aiohttp runner; `port` is the bound port (0 picks one)."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self._host = host
        self._port = port
        self.port = port

    async def start(self) -> None:
        """Listen; raises HttpBindError when the address cannot be bound."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise HttpBindError(self._host, self._port, exc) from exc
        server = site._server  # aiohttp exposes the bound sockets only here
        if server is not None and server.sockets:  # type: ignore[attr-defined]
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> HttpServer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()
