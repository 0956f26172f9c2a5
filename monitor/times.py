"""Time conversions between the wire's integers and the model's datetimes, in one place.

OpenTelemetry gives nanoseconds since the epoch; a `Trace` holds timezone-aware datetimes (to
the microsecond); turn numbering compares microseconds since the epoch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

NANOS_PER_SECOND = 1_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_from_ns(ns: int) -> datetime:
    """The UTC moment `ns` nanoseconds after the epoch, to the microsecond (truncated). Raises
    ValueError when no datetime can hold it."""
    seconds, rest = divmod(ns, NANOS_PER_SECOND)
    try:
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=rest // 1000)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{ns} ns since 1970 is not a representable time") from None


def micros(moment: datetime) -> int:
    """Microseconds since the epoch (exact: no float rounding)."""
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def micros_from_ns(ns: int) -> int:
    return ns // 1000


def millis_from_ns(ns: int) -> float:
    """A duration in nanoseconds as milliseconds (`Trace.latency_ms`)."""
    return ns / 1e6
