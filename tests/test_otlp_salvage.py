"""One bad span or resource in an OTLP export costs only its own trace.

Exports recorded with the real OpenTelemetry SDK and encoded with the real OTLP encoder, then
damaged the way producers damage them: a wrong JSON type in one span, invalid UTF-8 in one
protobuf string (a span's or a resource's), a malformed id. The split keeps every other trace
and rejects the damaged ones whole, with their spans as they came. Through the real broker and
daemon: `tests/test_faults_otlp_input.py`.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

from monitor.formats.otlp import OtlpDecodeError, decode_otlp
from monitor.formats.otlp_split import split_by_trace
from tests.support.otlp_spans import (
    App,
    Fmt,
    encode,
    hex_trace_id,
    openinference_rag,
    serialize,
)

MARK = "Damaged-Here"  # a span name or service name the tests damage


def three_traces(damaged_service: str = "svc-c") -> tuple[list[ReadableSpan], list[str]]:
    """Spans of three traces of three services, and their trace ids in order."""
    apps = [App("svc-a"), App("svc-b"), App(damaged_service)]
    for app in apps:
        openinference_rag(app)
    spans = [span for app in apps for span in app.spans()]
    return spans, [hex_trace_id(app.root()) for app in apps]


def json_document(spans: list[ReadableSpan]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(encode(spans, "otlp_json"))
    return document


def spans_of(document: dict[str, Any], trace_id: str) -> list[dict[str, Any]]:
    return [
        span
        for resource in document["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if span["traceId"] == trace_id
    ]


def check_kept(
    message: bytes, fmt: Fmt, kept: list[str], rejected: list[str | None], spans: int = 3
) -> Any:
    """The split keeps `kept` (each with all its `spans`) and rejects `rejected`, in order."""
    split = split_by_trace(message, fmt)
    assert [p.trace_id for p in split.parts] == kept
    assert [r.trace_id for r in split.rejected] == rejected
    for part in split.parts:
        decoded = decode_otlp(part.data, "otlp_proto")
        assert {s.trace_id for s in decoded} == {part.trace_id}
        assert len(decoded) == part.span_count == spans, "every span of a kept trace"
    return split


def test_a_wrong_json_type_in_one_span_rejects_only_its_trace() -> None:
    spans, (a, b, c) = three_traces()
    document = json_document(spans)
    spans_of(document, c)[1]["name"] = {"not": "a string"}
    split = check_kept(json.dumps(document).encode(), "otlp_json", [a, b], [c])
    (rejected,) = split.rejected
    assert "resource 2, scope 0, span 1" in rejected.detail and "name" in rejected.detail
    letter = json.loads(rejected.data)  # the dead letter: as it came, in OTLP/JSON
    sent = [s for r in letter["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    assert sorted(s["spanId"] for s in sent) == sorted(s["spanId"] for s in spans_of(document, c))
    assert {s["traceId"] for s in sent} == {c}, "the bad span and its trace's good ones, only"
    assert letter["resourceSpans"][0]["resource"] == document["resourceSpans"][2]["resource"]


def test_a_wrong_json_type_in_one_resource_rejects_the_traces_under_it() -> None:
    spans, (a, b, c) = three_traces()
    document = json_document(spans)
    document["resourceSpans"][1]["resource"]["attributes"] = "not a list"
    split = check_kept(json.dumps(document).encode(), "otlp_json", [a, c], [b])
    assert "its resource" in split.rejected[0].detail


def test_invalid_utf8_in_one_protobuf_span_rejects_only_its_trace() -> None:
    apps = [App("svc-a"), App("svc-b"), App("svc-c")]
    for app in apps:
        openinference_rag(app)
    request = encode_spans([s for app in apps for s in app.spans()])
    victim = request.resource_spans[1].scope_spans[0].spans[2]
    victim.name = MARK
    data = request.SerializeToString()
    assert data.count(MARK.encode()) == 1
    damaged = data.replace(MARK.encode(), b"\xff\xfe" * (len(MARK) // 2))
    with pytest.raises(OtlpDecodeError):
        decode_otlp(damaged, "otlp_proto")  # the whole export does not parse
    a, b, c = (hex_trace_id(app.root()) for app in apps)
    split = check_kept(damaged, "otlp_proto", [a, c], [b])
    (rejected,) = split.rejected
    assert rejected.detail.startswith("resource 1, scope 0, span 2: ")
    assert b"\xff\xfe" in rejected.data, "the span's bytes as they came"
    assert rejected.data.count(b"svc-b") == 3, "each of its 3 spans under its resource"


def test_invalid_utf8_in_one_protobuf_resource_rejects_the_traces_under_it() -> None:
    spans, (a, b, c) = three_traces(damaged_service=MARK)
    data = encode(spans, "otlp_proto")
    damaged = data.replace(MARK.encode(), b"\xc3\x28" * (len(MARK) // 2))
    split = check_kept(damaged, "otlp_proto", [a, b], [c])
    assert "its resource" in split.rejected[0].detail


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
def test_a_malformed_span_id_rejects_its_trace_and_an_unreadable_trace_id_only_its_span(
    fmt: Fmt,
) -> None:
    spans, (a, b, _) = three_traces()
    request = encode_spans(spans[:6])  # traces a and b
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"short"
    request.resource_spans[1].scope_spans[0].spans[2].trace_id = b"\x00" * 16
    split = check_kept(serialize(request, fmt), fmt, [b], [a, None], spans=2)
    by_trace = {r.trace_id: r for r in split.rejected}
    assert "span_id" in by_trace[a].detail.replace("spanId", "span_id")
    assert "trace_id" in by_trace[None].detail, "a span no trace can be told for: alone"


def test_an_export_with_no_good_trace_stays_one_dead_letter_as_it_came() -> None:
    spans, _ = three_traces()
    document = json_document(spans)
    for resource in document["resourceSpans"]:
        resource["resource"]["attributes"] = 7
    with pytest.raises(OtlpDecodeError) as raised:
        split_by_trace(json.dumps(document).encode(), "otlp_json")
    assert raised.value.reason == "schema_violation"


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from(["otlp_json", "otlp_proto"]))
def test_damaged_exports_split_or_raise_decode_error_and_keep_only_whole_good_traces(
    seed: int, fmt: Fmt
) -> None:
    rng = random.Random(seed)
    spans, _ = three_traces()
    data = bytearray(encode(spans, fmt))
    for _ in range(rng.randrange(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    try:
        split = split_by_trace(bytes(data), fmt)
    except OtlpDecodeError:
        return
    for part in split.parts:
        decoded = decode_otlp(part.data, "otlp_proto")
        assert {s.trace_id for s in decoded} == {part.trace_id}
    for rejected in split.rejected:
        assert rejected.data and rejected.detail


@pytest.mark.parametrize("time", ["-5", "99999999999999999999999", "yesterday", 1.5e30])
def test_an_absurd_timestamp_in_one_json_span_rejects_only_its_trace(time: object) -> None:
    spans, (a, b, c) = three_traces()
    document = json_document(spans)
    spans_of(document, a)[0]["endTimeUnixNano"] = time
    split = check_kept(json.dumps(document).encode(), "otlp_json", [b, c], [a])
    assert "endTimeUnixNano" in split.rejected[0].detail
