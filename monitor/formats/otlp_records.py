"""The decoded span, independent of the wire format: what `monitor.formats.otlp` decodes and
the mapping modules read.

A module of its own so that the mapping modules import it at run time rather than only for
their annotations (`otlp` imports the mapping): compiled by mypyc, a module whose classes hold
a `SpanRecord` needs its class made before it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.formats.otlp_values import attribute_index

__all__ = ["SpanEvent", "SpanRecord"]


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event: its name, time and flattened attributes."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, init=False)
class SpanRecord:
    """One decoded span, independent of the wire format.

    Ids are lowercase hex (32 digits for traces, 16 for spans); `parent_span_id` is None for a
    root span. Attribute values are str, bool, int, float, bytes, list (OTLP arrays) or dict
    (OTLP key-value lists), nested as the producer sent them; None for an empty value.
    `kind` and `status_code` are the OTLP enum numbers (kind 2 = SERVER, status 2 = ERROR).

    Never changed once made. Not a frozen dataclass, whose generated ``__init__`` sets each
    field through ``object.__setattr__``: this one is written out, so that mypyc compiles it
    (decoding builds every span).
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    resource_attributes: dict[str, Any]
    events: tuple[SpanEvent, ...]
    kind: int
    status_code: int
    scope_name: str
    # `attribute_index` of `attributes`, made on first use: the mapping asks for several
    # prefixes per span, each a pass over every attribute otherwise.
    _index: dict[str, list[dict[str, Any]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        parent_span_id: str | None,
        name: str,
        start_time_unix_nano: int,
        end_time_unix_nano: int,
        attributes: dict[str, Any] | None = None,
        resource_attributes: dict[str, Any] | None = None,
        events: tuple[SpanEvent, ...] = (),
        kind: int = 0,
        status_code: int = 0,
        scope_name: str = "",
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.name = name
        self.start_time_unix_nano = start_time_unix_nano
        self.end_time_unix_nano = end_time_unix_nano
        self.attributes = {} if attributes is None else attributes
        self.resource_attributes = {} if resource_attributes is None else resource_attributes
        self.events = events
        self.kind = kind
        self.status_code = status_code
        self.scope_name = scope_name
        self._index = None

    @property
    def duration_ns(self) -> int:
        return self.end_time_unix_nano - self.start_time_unix_nano

    def indexed(self, prefix: str) -> list[dict[str, Any]]:
        """The span's `prefix.N.rest` attributes as one dict per N, in N order
        (`otlp_values.indexed_groups`)."""
        index = self._index
        if index is None:
            index = self._index = attribute_index(self.attributes)
        return index.get(prefix, [])
