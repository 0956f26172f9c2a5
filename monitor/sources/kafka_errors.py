"""Kafka connection failures as one line for a person.

aiokafka's errors name their class in ``str()`` already (``KafkaConnectionError:
KafkaConnectionError: ...`` when printed with it; a broker's error with its code too,
``[Error 58] SaslAuthenticationFailed: ...``), list addresses as ``('127.0.0.1', 41999,
<AddressFamily.AF_INET: 2>)``, and keep the reason a bootstrap failed out of the exception: it
is only in the log record ``Unable connect to "host:port": <error>``. :func:`bootstrap_failures`
keeps that reason so the command's one line can give it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
from collections.abc import Iterator

_ERROR_CODE = re.compile(r"^\[Error -?\d+\] ")
_ADDRESS = re.compile(r"\('([^']*)', (\d+), <AddressFamily\.\w+: \d+>\)")
_CONNECT_FAILED = 'Unable connect to "%s:%s": %s'  # aiokafka.client's message, verbatim


def error_text(exc: BaseException) -> str:
    """`Class: message`, the class named once and addresses written `host:port`."""
    name = type(exc).__name__
    text = _ERROR_CODE.sub("", str(exc))  # a broker's error code: "[Error 58] "
    if text.startswith(f"{name}: "):
        text = text[len(name) + 2 :]
    text = _ADDRESS.sub(r"\1:\2", text).strip()
    return name if text in ("", name) else f"{name}: {text}"


def cause_text(error: BaseException) -> str:
    """Why one connection failed: `connection refused`, `cannot resolve the host name ...`."""
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host name ({error.strerror or error})"
    if isinstance(error, ConnectionError | TimeoutError | asyncio.TimeoutError) and error.errno:
        return os.strerror(error.errno).lower()
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    return error_text(error)


class BootstrapFailures(logging.Filter):
    """Keeps the reason of aiokafka's last failed connection to a bootstrap server, and drops
    the log record when `quiet` (a one-shot command says it in its own line instead)."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.quiet = quiet
        self.last: tuple[str, str] | None = None  # (host:port, why)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.msg == _CONNECT_FAILED and isinstance(args, tuple) and len(args) == 3:
            host, port, error = args
            why = cause_text(error) if isinstance(error, BaseException) else str(error)
            self.last = (f"{host}:{port}", why)
            return not self.quiet
        return True

    def describe(self, exc: BaseException, servers: str) -> str:
        """`host:port: why` for `exc`, a client's error: the last connection failure when the
        client could not bootstrap, else the error itself (at `servers`)."""
        if "Unable to bootstrap" not in str(exc):
            return f"{servers}: {error_text(exc)}"
        if self.last is None:
            return f"{servers}: no broker answered"
        return f"{self.last[0]}: {self.last[1]}"


@contextlib.contextmanager
def bootstrap_failures(quiet: bool = False) -> Iterator[BootstrapFailures]:
    """Watch aiokafka's connection failures for as long as the block runs."""
    logger = logging.getLogger("aiokafka")
    failures = BootstrapFailures(quiet)
    logger.addFilter(failures)
    try:
        yield failures
    finally:
        logger.removeFilter(failures)
