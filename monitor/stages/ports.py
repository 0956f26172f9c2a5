"""How one stage hands on to the next: through a topic on Kafka, or in process.

The re-key stage writes split exports to a `PartsOutput` (the spans topic, or the assemble stage
itself); the assemble stage writes traces to an `AssembledOutput` (the traces topic, or the
score stage itself). Either way, the messages a hand-off came from are finished by whoever
takes it, once it is safely written or processed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from monitor.formats.assembly import Release
from monitor.formats.otlp import OtlpFormat
from monitor.formats.otlp_split import LogsPart, TracePart
from monitor.messages import RawMessage
from monitor.models import Trace
from monitor.stages.parts import PartToken


@dataclass(frozen=True, slots=True)
class SplitMessage:
    """An OTLP export split per trace: span parts, or (`logs`) log-record parts."""

    message: RawMessage
    format: OtlpFormat
    parts: Sequence[TracePart] | Sequence[LogsPart]
    logs: bool = False


Assembled = tuple[Trace, Release[PartToken]]


class PartsOutput(Protocol):
    async def take_parts(self, items: Sequence[SplitMessage]) -> None:
        """Parts keyed by trace id, each message finished once all its parts are taken."""
        ...

    async def take_natives(self, items: Sequence[tuple[RawMessage, Trace]]) -> None:
        """Native traces found among the exports, to be scored in conversation order."""
        ...


class AssembledOutput(Protocol):
    async def take_assembled(self, items: Sequence[Assembled]) -> None:
        """Mapped traces with their releases (whose tokens finish once a trace is taken)."""
        ...
