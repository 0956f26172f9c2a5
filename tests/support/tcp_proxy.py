"""An asyncio TCP proxy on loopback for fault injection: pass, stall, cut and resume.

Put it between a client and a server (the daemon and the Kafka broker, the daemon and the judge
endpoint) and turn the connection bad on purpose:

- passing (the initial mode): bytes flow both ways.
- ``stall()``: nothing is forwarded any more, in either direction, on open or new connections.
  Sockets stay open and what arrives is held, like a network path that black-holes packets;
  ``resume()`` delivers what was held and carries on.
- ``cut()``: every open connection is reset (RST), and connections made while cut are accepted
  and reset at once, like a peer that is gone; ``resume()`` lets new connections through again.
- ``latency``: seconds added before each forwarded chunk (0 by default).

The proxy listens on 127.0.0.1 (a free port unless one is given). Its ``target_port`` may be set
after the proxy started: connections made before that are reset.

Async use: ``await proxy.start()`` / ``await proxy.stop()`` on the caller's loop. Tests that
block (subprocess daemons, ``urllib``) use ``proxy.start_in_thread()`` / ``stop_in_thread()``:
the proxy then runs on its own loop in a daemon thread, and ``stall``, ``cut`` and ``resume``
may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from tests.support.loop_thread import LoopThread

Mode = Literal["pass", "stall", "cut"]
CHUNK = 65536


@dataclass
class ProxyStats:
    accepted: int = 0
    reset: int = 0
    bytes_up: int = 0  # client -> target
    bytes_down: int = 0  # target -> client


class TcpProxy:
    def __init__(
        self,
        target_port: int | None = None,
        *,
        target_host: str = "127.0.0.1",
        listen_port: int = 0,
        listen_host: str = "127.0.0.1",
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.port = listen_port
        self.latency = 0.0
        self.stats = ProxyStats()
        self._mode: Mode = "pass"
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_thread: LoopThread | None = None

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._loop = asyncio.get_running_loop()
        self._flowing = asyncio.Event()
        if self._mode == "pass":
            self._flowing.set()
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self.port, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._reset_all()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    def start_in_thread(self) -> int:
        self._in_thread = LoopThread("tcp-proxy")
        return self._in_thread.run(self.start())

    def stop_in_thread(self) -> None:
        in_thread, self._in_thread = self._in_thread, None
        if in_thread is None:
            return
        in_thread.run(self.stop())
        in_thread.close()

    async def __aenter__(self) -> TcpProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def __enter__(self) -> TcpProxy:
        self.start_in_thread()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_in_thread()

    # -------------------------------------------------------------------------------- control

    def resume(self) -> None:
        self._control("pass")

    def stall(self) -> None:
        self._control("stall")

    def cut(self) -> None:
        self._control("cut")

    def _control(self, mode: Mode) -> None:
        loop = self._loop
        if loop is None:
            self._mode = mode
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._apply(mode)
            return
        done = threading.Event()

        def apply() -> None:
            try:
                self._apply(mode)
            finally:
                done.set()

        loop.call_soon_threadsafe(apply)
        if not done.wait(10):
            raise TimeoutError("the proxy's event loop did not answer")

    def _apply(self, mode: Mode) -> None:
        self._mode = mode
        assert self._flowing is not None
        if mode == "pass":
            self._flowing.set()
        else:
            self._flowing.clear()
        if mode == "cut":
            self._reset_all()

    # ------------------------------------------------------------------------------ plumbing

    def _reset_all(self) -> None:
        for link in list(self._links):
            link.reset()
            self.stats.reset += 1
        self._links.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        assert self._flowing is not None
        if self._mode == "cut" or self.target_port is None:
            _abort(writer)
            self.stats.reset += 1
            return
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._flowing.wait()  # a stalled path does not even reach the target
            if link.closed or self._mode == "cut":
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
            except OSError:
                link.reset()
                return
            link.upstream = up_writer
            link.tasks = [
                asyncio.create_task(self._pump(reader, up_writer, link, up=True)),
                asyncio.create_task(self._pump(up_reader, writer, link, up=False)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            link.close()
            self._links.discard(link)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        up: bool,
    ) -> None:
        assert self._flowing is not None
        try:
            while True:
                await self._flowing.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                if self.latency > 0:
                    await asyncio.sleep(self.latency)
                await self._flowing.wait()  # data read just before a stall is held, not lost
                writer.write(data)
                await writer.drain()
                if up:
                    self.stats.bytes_up += len(data)
                else:
                    self.stats.bytes_down += len(data)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side finished: close both so the peers see it (half-close is not needed here).
            link.close()


class _Link:
    """One proxied connection: the client's writer, the target's writer and the pump tasks."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    def reset(self) -> None:
        """Abort both sockets with RST, as a peer that vanished would."""
        self.closed = True
        _abort(self.client)
        if self.upstream is not None:
            _abort(self.upstream)
        for task in self.tasks:
            task.cancel()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for writer in (self.client, self.upstream):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


def _abort(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # SO_LINGER 0: close() sends RST instead of FIN.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
