"""structlog set-up: JSON lines in production, readable console output on a terminal."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Literal

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    fmt: Literal["json", "console", "auto"] = "auto", level: str = "info"
) -> None:
    """Route structlog (and the stdlib loggers of aiokafka and aiohttp) to stderr; a library's
    line repeated word for word is shown once a minute."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Library loggers are chatty at info (every rebalance step); warnings still come through.
    root.setLevel(max(_LEVELS[level], logging.WARNING))


class CountedWarning:
    """A warning about something that can happen thousands of times a second: logged at most
    once per `interval`, with how often each kind happened since the last line.

    The first occurrence is logged at once; later ones are counted and logged with the next
    line, which `count` or `flush` writes once the interval has passed.
    """

    def __init__(
        self,
        logger: structlog.typing.FilteringBoundLogger,
        event: str,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._event = event
        self._interval = interval
        self._clock = clock
        self._counts: dict[str, int] = {}
        self._last: float | None = None

    def count(self, kind: str, **context: object) -> None:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        self.flush(**context)

    def flush(self, **context: object) -> None:
        """Log the counts when some are waiting and the interval has passed."""
        now = self._clock()
        if not self._counts or (self._last is not None and now - self._last < self._interval):
            return
        since = None if self._last is None else round(now - self._last)
        self._log.warning(self._event, counts=dict(self._counts), seconds=since, **context)
        self._counts = {}
        self._last = now


class RepeatFilter(logging.Filter):
    """Lets a library's line through at most once per `interval` (aiokafka repeats some --
    a topic missing from the metadata -- thousands of times a second while it retries)."""

    MAX_REMEMBERED = 1000

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._interval = interval
        self._clock = clock
        self._seen: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last < self._interval:
            return False
        if len(self._seen) >= self.MAX_REMEMBERED:
            self._seen.clear()
        self._seen[key] = now
        return True
