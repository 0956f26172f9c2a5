"""The rejecter: every dead letter of a consume loop goes through here, with why.

What is rejected is written to the dead-letter sink (the input's origin, the reason, the error
class and detail, and the data in place of the message where only part of it is at fault),
counted in `ragmon_dead_letters_total{reason}` and, for a Kafka source, logged (a file source's
sink writes each letter as a line of its own). A rejected message is finished: its offset may
be committed once the letter is stored, never before.

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import functools

import structlog

from monitor.formats.assembly import Release
from monitor.formats.errors import DecodeError
from monitor.formats.otlp import OtlpFormat
from monitor.formats.otlp_split import Split, encode_request, merge_parts
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.models import Trace
from monitor.offload import offload
from monitor.sources.offsets import OffsetTracker
from monitor.stages.parts import PartToken
from monitor.typing import DeadLetterSink

log = structlog.get_logger(__name__)


class Rejecter:
    def __init__(
        self,
        sink: DeadLetterSink,
        metrics: Metrics,
        tracker: OffsetTracker,
        *,
        max_bytes: int,
        quiet: bool = False,
    ) -> None:
        """`max_bytes` bounds what a letter attaches of a trace's spans; `quiet`: no log line
        per letter (the sink reports each one itself)."""
        self._sink = sink
        self._metrics = metrics
        self._tracker = tracker
        self._max_bytes = max_bytes
        self._quiet = quiet

    async def reject(
        self,
        msg: RawMessage,
        error: DecodeError,
        *,
        origin: RawMessage | None = None,
        value: bytes | None = None,
    ) -> None:
        """Dead-letter a message that cannot be used (under `origin`, where its content first
        came in; with `value` in place of its own), and finish it."""
        await self.dead_letter(
            origin or msg, error.reason, type(error).__name__, error.detail, value
        )
        self._tracker.finish(msg.tp, msg.offset)

    async def dead_letter(
        self,
        origin: RawMessage,
        reason: str,
        error_class: str,
        detail: str,
        value: bytes | None = None,
    ) -> None:
        """Dead-letter (and count) what came in `origin`: its own value, or `value` in its place.
        Finishes nothing: the caller knows which messages are done."""
        if not self._quiet:
            log.warning(
                "message dead-lettered",
                topic=origin.topic,
                partition=origin.partition,
                offset=origin.offset,
                reason=reason,
                error=detail,
            )
        await self._sink.send(origin, reason, error_class, detail, value=value)
        self._metrics.dead_letters.labels(reason).inc()

    async def reject_split(self, origin: RawMessage, split: Split) -> None:
        """The traces of a message that cannot be used, each alone (the message's other traces
        go on): its spans as they came, in the input's format."""
        for rejected in split.rejected:
            what = f"trace {rejected.trace_id}" if rejected.trace_id else "spans without a trace id"
            await self.dead_letter(
                origin,
                "otlp_undecodable",
                "OtlpDecodeError",
                f"{what}: {rejected.detail}",
                rejected.data,
            )

    async def reject_release(
        self, release: Release[PartToken], reason: str, error: Exception
    ) -> None:
        """One trace the assembler released: its spans in the input's format, under the
        message its first part came in."""
        merged = merge_parts(list(release.parts))
        detail = f"trace {release.trace_id}: {error}"
        value: bytes | None = None
        if len(merged) > self._max_bytes:  # its JSON would be larger still: not worth the CPU
            detail += (
                f" (its {len(merged)} bytes of spans exceed {self._max_bytes} and are not attached)"
            )
        else:
            value = await in_input_format(merged, release.origin.fmt)
        await self.dead_letter(release.origin.origin, reason, type(error).__name__, detail, value)

    async def reject_trace(
        self, trace: Trace, tokens: tuple[RawMessage, ...], reason: str, error: Exception
    ) -> None:
        """A trace that failed for a fault of its own, as the JSON it was, under each message
        it came in (the caller finishes them and logs, throttled)."""
        detail = f"{type(error).__name__}: {error}"
        value = trace.model_dump_json().encode()
        for token in tokens:
            await self._sink.send(token, reason, type(error).__name__, detail, value=value)
            self._metrics.dead_letters.labels(reason).inc()


async def in_input_format(data: bytes, fmt: OtlpFormat) -> bytes:
    """Spans (OTLP protobuf) encoded back into the format they came in, in a worker thread for
    a large part; as they are when they cannot be (undecodable parts)."""
    return await offload(len(data), functools.partial(_encoded, data, fmt))


def _encoded(data: bytes, fmt: OtlpFormat) -> bytes:
    try:
        return encode_request(data, fmt)
    except Exception:  # undecodable parts cannot be re-encoded: keep them as they are
        return data
