"""The decoders the stages call, in a worker thread for a large message (`monitor.offload`),
each returning the `DecodeError` that says why a message cannot be used instead of raising it."""

from __future__ import annotations

import functools

from monitor.formats.errors import DecodeError
from monitor.formats.native import decode_native
from monitor.formats.otlp import OtlpFormat
from monitor.formats.otlp_split import LogsPart, Split, split_by_trace, split_logs_by_trace
from monitor.messages import RawMessage
from monitor.models import Trace
from monitor.offload import offload


async def decoded(msg: RawMessage, *, assembled: bool = False) -> Trace | DecodeError:
    """The native trace a message holds (`assembled`: written by the OTLP stage)."""
    try:
        return await offload(
            msg.value_size, functools.partial(decode_native, msg.value, assembled=assembled)
        )
    except DecodeError as exc:
        return exc


async def split(msg: RawMessage, fmt: OtlpFormat) -> Split | DecodeError:
    """An OTLP trace export split per trace (the traces a bad span spoils rejected alone)."""
    work = functools.partial(split_by_trace, msg.value or b"", fmt)
    try:
        return await offload(msg.value_size, work)
    except DecodeError as exc:
        return undecodable(exc)


def split_logs(msg: RawMessage, fmt: OtlpFormat) -> list[LogsPart] | DecodeError:
    """An OTLP logs export split per trace, keeping the records the mapping reads."""
    try:
        return split_logs_by_trace(msg.value or b"", fmt)
    except DecodeError as exc:
        return undecodable(exc)


def undecodable(exc: DecodeError) -> DecodeError:
    """An OTLP export the decoders cannot read, as its dead letter says it: `otlp_undecodable`,
    the decoder's own reason in the detail."""
    return DecodeError("otlp_undecodable", str(exc))
