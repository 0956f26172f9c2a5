"""Time windows of the reading commands (`review`, `agents`, `/review`): ``--since`` and
``--time``, the same way everywhere, and what to say when a window is empty.

``--since`` is a duration before now (``90m``, ``24h``, ``7d``) or an ISO time. ``--time`` says
what it counts from: ``scored`` (the default: when the monitor scored the traces, so a replay of
old traces is found right after it ran) or ``trace`` (the traces' own timestamps).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Literal

TimeBasis = Literal["scored", "trace"]
TIMES: tuple[TimeBasis, ...] = ("scored", "trace")
DEFAULT_TIME: TimeBasis = "scored"
TIME_HELP = (
    "what --since counts from: 'scored' (default; when the monitor scored the traces, so a"
    " replay of old traces is found right after it ran) or 'trace' (the traces' own timestamps)"
)

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`24h`, `90m`, `7d` before now, or an ISO timestamp."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--since must look like 24h, 90m, 7d or an ISO time, not {text!r}"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def check_time(time: str) -> TimeBasis:
    if time not in TIMES:
        raise ValueError(f"time must be one of: {', '.join(TIMES)}")
    return time


def other_time(time: TimeBasis) -> TimeBasis:
    return "trace" if time == "scored" else "scored"


def since_covering(moment: datetime, now: datetime | None = None) -> str:
    """The shortest round ``--since`` (minutes, hours or days) whose window holds `moment`."""
    age = max(0.0, ((now or datetime.now(UTC)) - moment).total_seconds())
    minutes = math.floor(age / 60) + 1
    if minutes < 120:
        return f"{minutes}m"
    hours = math.floor(age / 3600) + 1
    if hours < 48:
        return f"{hours}h"
    return f"{math.floor(age / 86_400) + 1}d"


def empty_window_hint(
    things: str,
    time: TimeBasis,
    other_basis_count: int,
    latest: datetime | None,
    now: datetime | None = None,
) -> str:
    """What to tell a user whose window holds no `things` (plural noun): whether the other
    time basis would find some (`other_basis_count` in the same window), and the ``--since``
    that holds the latest one (`latest`, by this basis); that the store holds none at all when
    neither would find any."""
    hints = []
    if other_basis_count:
        basis = "were scored" if time == "trace" else "have trace times"
        hints.append(
            f"{other_basis_count} {things} {basis} in this window: --time {other_time(time)}"
            " finds them."
        )
    if latest is not None:
        when = "scored" if time == "scored" else "trace time"
        hints.append(
            f"The latest ({when} {latest.astimezone(UTC):%Y-%m-%d %H:%M:%SZ}) is in"
            f" --since {since_covering(latest, now)}."
        )
    if not hints:
        return f"The store holds no {things}."
    return " ".join(hints)
