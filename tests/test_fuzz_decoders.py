"""Bad input, property-based: the decoders and the config loader never fail with a surprise.

Contracts under test (hypothesis):

- the router's size check then `decode_native(value)` return a Trace or raise DecodeError,
  whatever the bytes; a decoded trace can be scored by tier 0 and turned into a judge prompt.
- `detect_format` never raises; `decode_otlp` returns spans or raises OtlpDecodeError;
  `spans_to_trace` returns a Trace or None or raises OtlpMappingError.
- `load_settings` returns Settings or raises ConfigError for any YAML file and RAGMON_ values.
- `context_from_headers` (traceparent from Kafka headers) never raises.

Then the same through the real broker: a few hundred fuzzed messages (RAGMON_FUZZ_MESSAGES,
default 300) to a daemon process: every message the decoders reject reaches the dead-letter
topic with the right reason header, every good one is processed, the process keeps running.

Example counts: RAGMON_FUZZ_EXAMPLES (default 100 per property; fewer for the slow ones).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from monitor.config import ConfigError, Settings, load_settings
from monitor.config.judge import RedactionConfig
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.judge_prompts import JudgeInput, faithfulness_prompt, relevance_prompt
from monitor.evaluators.redaction import Redactor
from monitor.formats.errors import DecodeError
from monitor.formats.native import decode_native
from monitor.formats.otlp import (
    OtlpDecodeError,
    OtlpMappingError,
    SpanEvent,
    SpanRecord,
    decode_otlp,
    detect_format,
    spans_to_trace,
)
from monitor.formats.otlp_split import split_by_trace
from monitor.formats.otlp_wire import encode_varint, length_delimited
from monitor.messages import RawMessage
from monitor.models import Trace
from monitor.stages.router import size_error
from monitor.telemetry import context_from_headers
from tests.support.faults import (
    DaemonProcess,
    committed_total,
    env_int,
    kafka_env,
    pipeline_drained,
    stored_by_evaluator,
    topic_records,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.otlp_spans import App, openinference_rag
from tests.support.otlp_spans import encode as encode_otlp
from tests.support.traces import native_trace

EXAMPLES = env_int("RAGMON_FUZZ_EXAMPLES", 100)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_BYTES = 1_048_576
TIER0 = HeuristicEvaluator()
REDACTOR = Redactor(RedactionConfig())

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
TRACE_FIELDS = [
    "schema_version", "trace_id", "timestamp", "agent", "conversation_id", "turn", "query",
    "contexts", "answer", "reference", "constraints", "memory_tokens", "model", "latency_ms",
    "usage", "feedback", "language", "metadata", "unknown_field",
]  # fmt: skip
TIMESTAMP_VALUES = [
    "2026-11-01T12:00:00Z",
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "2026-02-30T00:00:00Z",
    "2026-11-01T12:00:00",
    "2026-11-01 12:00:00+09:00",
    "1970-01-01T00:00:00.123456789Z",
]
TIMESTAMPS = st.sampled_from(TIMESTAMP_VALUES)


def _decoded(data: bytes | None, max_bytes: int) -> Trace:
    """What the daemon does with a native message: the router's size check, then the decoder."""
    too_large = size_error(RawMessage("in", 0, 0, None, data), max_bytes)
    if too_large is not None:
        raise too_large
    return decode_native(data)


def _check_native(data: bytes | None, max_bytes: int = MAX_BYTES) -> Trace | None:
    """The contract: a Trace that the rest of the pipeline can take, or DecodeError."""
    try:
        trace = _decoded(data, max_bytes)
    except DecodeError as exc:
        assert exc.reason in {
            "empty_message",
            "too_large",
            "invalid_utf8",
            "invalid_json",
            "schema_violation",
            "unknown_schema_version",
        }
        assert len(exc.detail) <= 1000
        return None
    assert isinstance(trace, Trace)
    result = TIER0.evaluate(trace)  # what the scoring stage does next
    for score in result.scores.values():
        assert score.value is None or 0.0 <= score.value <= 1.0
    inp = JudgeInput.build(trace, REDACTOR, 5, 2000)
    for prompt in (faithfulness_prompt(inp), relevance_prompt(inp)):
        assert prompt.user.count("</data>") == 1, "trace text closed the data block"
    return trace


# ------------------------------------------------------------------------------------ native


@FUZZ
@given(st.binary(max_size=2000))
@example(b"\xef\xbb\xbf{}")
@example(b'{"trace_id": "\xff"}')
def test_native_decoder_takes_arbitrary_bytes(data: bytes) -> None:
    _check_native(data)


@FUZZ
@given(JSON)
def test_native_decoder_takes_arbitrary_json(value: Any) -> None:
    _check_native(json.dumps(value).encode())


@st.composite
def mutated_traces(draw: st.DrawFn) -> bytes:
    trace: dict[str, Any] = native_trace(draw(st.integers(0, 10_000)))
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(TRACE_FIELDS))
        action = draw(st.sampled_from(["replace", "delete", "nested", "timestamp"]))
        if action == "delete":
            trace.pop(name, None)
        elif action == "timestamp":
            trace["timestamp"] = draw(TIMESTAMPS)
        elif (
            action == "nested"
            and isinstance(trace.get("contexts"), list)
            and trace["contexts"]
            and isinstance(trace["contexts"][0], dict)
        ):
            context = dict(trace["contexts"][0])
            context[draw(st.sampled_from(["id", "text", "score", "rank", "metadata", "x"]))] = draw(
                JSON
            )
            trace["contexts"] = [context]
        else:
            trace[name] = draw(JSON)
    data = bytearray(json.dumps(trace, allow_nan=True).encode())
    for _ in range(draw(st.integers(0, 3))):  # byte-level damage, invalid UTF-8 included
        position = draw(st.integers(0, len(data)))
        data[position:position] = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"}", b'"']))
    return bytes(data)


@FUZZ
@given(mutated_traces())
def test_native_decoder_takes_mutated_traces(data: bytes) -> None:
    _check_native(data)


@settings(max_examples=max(10, EXAMPLES // 5), deadline=None)
@given(
    depth=st.integers(50, 50_000),
    where=st.sampled_from(["metadata", "answer", "contexts", "top"]),
    bracket=st.sampled_from(["[]", "{}"]),
)
def test_native_decoder_takes_deeply_nested_fields(depth: int, where: str, bracket: str) -> None:
    opening, closing = bracket
    inner = (
        opening * depth + closing * depth if opening == "[" else '{"a":' * depth + "1" + "}" * depth
    )
    base = json.dumps(native_trace(1))[:-1]
    if where == "top":
        data = inner
    elif where == "contexts":
        data = (
            base + f', "unused": 1, "contexts": [{{"id": "x", "text": "t", "metadata": {inner}}}]}}'
        )
    else:
        data = base + f', "{where}": {inner}}}'
    _check_native(data.encode())


@settings(max_examples=max(4, EXAMPLES // 25), deadline=None)
@given(
    field=st.sampled_from(["answer", "query", "context", "metadata"]),
    size=st.integers(100_000, 600_000),
)
def test_native_decoder_takes_huge_fields(field: str, size: int) -> None:
    trace = native_trace(1)
    blob = ("Branch 1 opens at 9:00. " * (size // 24 + 1))[:size]
    if field == "context":
        trace["contexts"] = [{"id": "big", "text": blob}] * 2
    elif field == "metadata":
        trace["metadata"] = {"blob": blob}
    else:
        trace[field] = blob
    data = json.dumps(trace).encode()
    _check_native(data, max_bytes=len(data) + 1)
    with pytest.raises(DecodeError) as caught:
        _decoded(data, max_bytes=len(data) - 1)
    assert caught.value.reason == "too_large"


# -------------------------------------------------------------------------------------- OTLP


def _check_otlp(data: bytes) -> None:
    assert detect_format(data) in ("native", "otlp_json", "otlp_proto")
    for fmt in ("otlp_proto", "otlp_json"):
        try:
            spans = decode_otlp(data, fmt)
        except OtlpDecodeError as exc:
            assert exc.reason in {
                "empty_message",
                "invalid_utf8",
                "invalid_json",
                "invalid_protobuf",
                "invalid_id",
                "schema_violation",
            }
            continue
        by_trace: dict[str, list[SpanRecord]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        for trace_spans in by_trace.values():
            _check_mapping(trace_spans)


def _check_mapping(spans: list[SpanRecord]) -> None:
    try:
        trace = spans_to_trace(spans)
    except OtlpMappingError as exc:
        assert exc.reason in {"no_query", "no_answer", "no_timestamp", "invalid_trace"}
        return
    if trace is not None:
        assert isinstance(trace, Trace)
        TIER0.evaluate(trace)


@st.composite
def protobuf_wire(draw: st.DrawFn, depth: int = 4) -> bytes:
    """Well-formed protobuf wire data with random fields: it parses as *some* message."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 5))):
        number = draw(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 15, 16, 2**20]))
        wire = draw(st.sampled_from([0, 1, 2, 5]))
        out += encode_varint(number << 3 | wire)
        if wire == 0:
            out += encode_varint(draw(st.integers(0, 2**64 - 1)))
        elif wire == 1:
            out += draw(st.binary(min_size=8, max_size=8))
        elif wire == 5:
            out += draw(st.binary(min_size=4, max_size=4))
        else:
            if depth > 0 and draw(st.booleans()):
                payload = draw(protobuf_wire(depth - 1))
            else:
                payload = draw(st.binary(max_size=24) | st.text(max_size=24).map(str.encode))
            out += encode_varint(len(payload)) + payload
    return bytes(out)


@FUZZ
@given(st.one_of(protobuf_wire(), st.binary(max_size=600)))
def test_otlp_decoder_takes_random_protobuf(data: bytes) -> None:
    _check_otlp(data)


ATTRIBUTE_KEYS = [
    "openinference.span.kind", "input.value", "output.value", "session.id", "agent.name",
    "retrieval.documents.0.document.content", "retrieval.documents.0.document.id",
    "retrieval.documents.1.document.score", "llm.input_messages.0.message.content",
    "llm.input_messages.0.message.role", "llm.output_messages.0.message.content",
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.prompt",
    "gen_ai.completion", "gen_ai.prompt.0.content", "gen_ai.completion.0.content",
    "gen_ai.retrieval.documents", "gen_ai.retrieval.query.text", "gen_ai.conversation.id",
    "gen_ai.usage.input_tokens", "gen_ai.system_instructions", "gen_ai.agent.name",
    "db.query.result", "reranker.output_documents.0.document.content", "user.id",
]  # fmt: skip
KIND_VALUES = [
    "LLM",
    "RETRIEVER",
    "CHAIN",
    "AGENT",
    "RERANKER",
    "chat",
    "retrieval",
    "invoke_agent",
]


def _attribute_value() -> st.SearchStrategy[Any]:
    text = st.sampled_from(KIND_VALUES) | st.text(max_size=60) | JSON.map(json.dumps)
    scalar = (
        text
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=True)
        | st.binary(max_size=8)
    )
    return st.recursive(
        scalar,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=8,
    )


def _any_value(value: Any, target: AnyValue) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, list):
        target.array_value.SetInParent()
        for item in value:
            _any_value(item, target.array_value.values.add())
    elif isinstance(value, dict):
        target.kvlist_value.SetInParent()
        for key, item in value.items():
            kv = target.kvlist_value.values.add(key=key)
            _any_value(item, kv.value)


@st.composite
def otlp_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    """Requests shaped like OTLP with random ids, times, attributes and events."""
    request = ExportTraceServiceRequest()
    trace_id = draw(st.sampled_from([b"\x01" * 16, b"\x02" * 16, b"", b"\x00" * 16, b"\x03" * 5]))
    for _ in range(draw(st.integers(1, 2))):
        resource_spans = request.resource_spans.add()
        for key in draw(st.lists(st.sampled_from(ATTRIBUTE_KEYS), max_size=2)):
            _any_value(
                draw(_attribute_value()), resource_spans.resource.attributes.add(key=key).value
            )
        scope = resource_spans.scope_spans.add()
        for n in range(draw(st.integers(0, 4))):
            span = scope.spans.add()
            span.trace_id = trace_id
            span.span_id = draw(st.sampled_from([bytes([n + 1]) * 8, b"", b"\x00" * 8, b"\x07"]))
            if n and draw(st.booleans()):
                span.parent_span_id = bytes([n]) * 8
            span.name = draw(st.text(max_size=20))
            span.kind = draw(st.integers(0, 6))
            span.start_time_unix_nano = draw(st.integers(0, 2**64 - 1))
            span.end_time_unix_nano = draw(st.integers(0, 2**64 - 1))
            for key in draw(st.lists(st.sampled_from(ATTRIBUTE_KEYS), max_size=6)):
                _any_value(draw(_attribute_value()), span.attributes.add(key=key).value)
            for _ in range(draw(st.integers(0, 2))):
                event = span.events.add(name=draw(st.sampled_from(
                    ["gen_ai.user.message", "gen_ai.assistant.message", "gen_ai.choice", "x"]
                )))  # fmt: skip
                event.time_unix_nano = draw(st.integers(0, 2**64 - 1))
                _any_value(draw(_attribute_value()), event.attributes.add(key="content").value)
            span.status.code = draw(st.integers(0, 2))
    return request


@settings(FUZZ, max_examples=max(10, EXAMPLES // 2))
@given(otlp_requests(), st.booleans())
def test_otlp_decoder_and_mapping_take_random_otlp_shaped_requests(
    request: ExportTraceServiceRequest, as_json: bool
) -> None:
    if as_json:
        from google.protobuf import json_format

        document = json_format.MessageToDict(request)
        for rs in document.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
        _check_otlp(json.dumps(document).encode())
    else:
        _check_otlp(request.SerializeToString())


@FUZZ
@given(
    st.lists(
        st.builds(
            SpanRecord,
            trace_id=st.just("0af7651916cd43dd8448eb211c80319c"),
            span_id=st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
            parent_span_id=st.none()
            | st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
            name=st.text(max_size=20),
            start_time_unix_nano=st.integers(-(2**63), 2**64),
            end_time_unix_nano=st.integers(-(2**63), 2**64),
            attributes=st.dictionaries(
                st.sampled_from(ATTRIBUTE_KEYS), _attribute_value(), max_size=6
            ),
            resource_attributes=st.dictionaries(
                st.sampled_from(ATTRIBUTE_KEYS), _attribute_value(), max_size=2
            ),
            events=st.lists(
                st.builds(
                    SpanEvent,
                    name=st.sampled_from(["gen_ai.user.message", "gen_ai.choice", "x"]),
                    time_unix_nano=st.integers(0, 2**64),
                    attributes=st.dictionaries(
                        st.text(max_size=10), _attribute_value(), max_size=3
                    ),
                ),
                max_size=2,
            ).map(tuple),
            kind=st.integers(-1, 10),
            status_code=st.integers(0, 3),
        ),
        max_size=5,
    )
)
def test_span_mapping_takes_arbitrary_span_records(spans: list[SpanRecord]) -> None:
    _check_mapping(spans)


@settings(max_examples=max(10, EXAMPLES // 5), deadline=None)
@given(depth=st.integers(10, 3000))
def test_otlp_decoder_takes_deeply_nested_attribute_values(depth: int) -> None:
    # Built on the wire by hand: the protobuf runtime refuses to build messages this deep.
    def field(number: int, payload: bytes) -> bytes:
        return length_delimited(number, payload)

    value = field(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):
        value = field(5, field(1, value))  # AnyValue.array_value -> ArrayValue.values
    span = field(1, b"\x01" * 16) + field(2, b"\x02" * 8) + field(5, b"deep")
    span += field(9, field(1, b"input.value") + field(2, value))  # Span.attributes: KeyValue
    data = field(1, field(2, field(2, span)))  # request.resource_spans.scope_spans.spans
    _check_otlp(data)
    text = '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "01" * 16
    text += '", "spanId": "' + "02" * 8 + '", "attributes": [{"key": "k", "value": '
    text += '{"arrayValue": {"values": [' * depth + '{"stringValue": "x"}' + "]}}" * depth
    text += "}]}]}]}]}"
    _check_otlp(text.encode())


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["traceparent", "tracestate", "TraceParent", "other"]),
            st.binary(max_size=80)
            | st.from_regex(
                r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", fullmatch=True
            ).map(str.encode),
        ),
        max_size=4,
    )
)
def test_traceparent_headers_never_break_decoding(headers: list[tuple[str, bytes]]) -> None:
    context_from_headers(headers)


# ------------------------------------------------------------------------------------ config

CONFIG_PATHS = {
    "kafka": ["bootstrap_servers", "topics", "group_id", "dlq_topic", "format", "max_in_flight",
              "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
              "commit_interval_seconds", "session_timeout_ms", "otlp_assembly_window_seconds"],
    "http": ["host", "port", "health_stall_seconds"],
    "log": ["format", "level"],
    "sampling": ["rate", "agent_rates", "queue_size", "token_budget_per_hour"],
    "store": ["url", "enabled"],
    "results": ["topic"],
    "judge": ["base_url", "api_key", "extra_headers", "timeout_seconds", "max_retries",
              "circuit_failure_threshold", "redaction", "model", "max_tokens",
              "response_format", "embedding_base_url", "embedding_api_key"],
    "conversations": ["idle_seconds", "max_conversations"],
    "scoring": ["must_not_contain"],
    "nonsense": ["x"],
}  # fmt: skip
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
YAML_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@st.composite
def config_documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from(sorted(CONFIG_PATHS)), max_size=4, unique=True)):
        if draw(st.integers(0, 9)) == 0:
            document[section] = draw(YAML_VALUES)
            continue
        keys = draw(st.lists(st.sampled_from(CONFIG_PATHS[section]), max_size=4, unique=True))
        document[section] = {key: draw(YAML_VALUES) for key in keys}
    return document


def _check_config(tmp_path: Path, content: bytes, env: dict[str, str] | None = None) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("RAGMON_")]:
            patch.delenv(key)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        try:
            loaded = load_settings(path)
        except ConfigError as exc:
            assert exc.problems, "a ConfigError names at least one field"
            return
    assert isinstance(loaded, Settings)


@FUZZ
@given(config_documents())
def test_config_loader_takes_arbitrary_yaml_documents(
    tmp_path_factory: pytest.TempPathFactory, document: dict[str, Any]
) -> None:
    content = yaml.safe_dump(document, allow_unicode=True).encode()
    _check_config(tmp_path_factory.mktemp("cfg"), content)


@FUZZ
@given(st.text(max_size=300))
@example("kafka: [1, 2\n")
@example("!!python/object/apply:os.system ['true']\n")
@example("a: &a [x]\nb: [*a, *a]\n")
def test_config_loader_takes_arbitrary_yaml_text(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    if "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        text = text.replace("\x00", "").encode("utf-8", "ignore").decode()
    _check_config(tmp_path_factory.mktemp("cfg"), text.encode("utf-8"))


ENV_NAMES = [
    "RAGMON_KAFKA__TOPICS", "RAGMON_KAFKA__GROUP_ID", "RAGMON_KAFKA__FORMAT",
    "RAGMON_KAFKA__MAX_IN_FLIGHT", "RAGMON_KAFKA__SECURITY_PROTOCOL", "RAGMON_KAFKA__SSL_CAFILE",
    "RAGMON_KAFKA", "RAGMON_HTTP__PORT", "RAGMON_HTTP", "RAGMON_LOG__LEVEL",
    "RAGMON_SAMPLING__RATE", "RAGMON_SAMPLING__AGENT_RATES", "RAGMON_STORE__URL",
    "RAGMON_JUDGE__EXTRA_HEADERS", "RAGMON_JUDGE__BASE_URL", "RAGMON_JUDGE__REDACTION__PATTERNS",
    "RAGMON_JUDGE", "RAGMON_RESULTS__TOPIC", "RAGMON_SCORING__MUST_NOT_CONTAIN",
    "RAGMON_CONVERSATIONS__IDLE_SECONDS", "RAGMON_UNKNOWN", "RAGMON_KAFKA__NOPE", "RAGMON_",
]  # fmt: skip
ENV_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60
)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(ENV_NAMES),
        ENV_TEXT | JSON.map(lambda v: json.dumps(v)[:200]),
        max_size=5,
    )
)
def test_config_loader_takes_arbitrary_environment_values(
    tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]
) -> None:
    _check_config(tmp_path_factory.mktemp("cfg"), b"", env)


def test_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    _check_config(tmp_path, b"kafka:\n  group_id: \xff\xfe\n")


def test_config_file_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    _check_config(tmp_path, b"[" * 5000 + b"]" * 5000)


def test_config_file_with_a_non_string_key_is_a_config_error(tmp_path: Path) -> None:
    _check_config(tmp_path, b"1: 2\n")


def test_environment_json_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    _check_config(tmp_path, b"", {"RAGMON_KAFKA__TOPICS": "[" * 5000 + "]" * 5000})


def test_a_tls_file_path_too_long_is_a_config_error(tmp_path: Path) -> None:
    _check_config(tmp_path, b"", {"RAGMON_KAFKA__SSL_CAFILE": "a" * 5000})


# ------------------------------------------------------------------- through the real broker


def _fuzzed_messages(rng: random.Random, count: int, max_bytes: int) -> list[bytes | None]:
    """Valid traces, damaged ones, garbage, OTLP (real SDK output, intact and damaged)."""
    messages: list[bytes | None] = []
    for n in range(count):
        kind = rng.choices(
            ["valid", "mutated", "bytes", "garbage", "json", "deep", "huge", "none", "empty",
             "otlp", "otlp_damaged", "otlp_json_junk"],
            weights=[30, 20, 12, 8, 5, 2, 2, 2, 1, 7, 7, 4],
        )[0]  # fmt: skip
        trace = native_trace(n, trace_id=f"fuzz-{n:05d}", conversation_id=f"fc-{n}")
        if kind == "valid":
            messages.append(json.dumps(trace).encode())
        elif kind == "mutated":
            name = rng.choice(TRACE_FIELDS)
            choice = rng.random()
            if choice < 0.3:
                trace.pop(name, None)
            elif choice < 0.5:
                trace["timestamp"] = rng.choice(TIMESTAMP_VALUES)
            else:
                trace[name] = rng.choice(
                    [
                        None,
                        0,
                        -1,
                        2**31 - 1,
                        2**80,  # beyond the store's columns: a schema violation since fcec9a3
                        1.5,
                        "",
                        "x" * 300,
                        [],
                        {},
                        [1, "a"],
                        {"a": {"b": []}},
                        True,
                    ]
                )
            messages.append(json.dumps(trace).encode())
        elif kind == "bytes":
            data = bytearray(json.dumps(trace).encode())
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            messages.append(bytes(data))
        elif kind == "garbage":
            messages.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
        elif kind == "json":
            messages.append(
                json.dumps(rng.choice([[], {}, 1, "s", None, [trace], {"trace": trace}])).encode()
            )
        elif kind == "deep":
            messages.append(b'{"a":' * 5000 + b"1" + b"}" * 5000)
        elif kind == "huge":
            trace["answer"] = "".join(rng.choices(string.ascii_letters + " .", k=max_bytes + 100))
            messages.append(json.dumps(trace).encode())
        elif kind == "none":
            messages.append(None)
        elif kind == "empty":
            messages.append(b"")
        else:
            app = App()
            openinference_rag(app, session=f"otlp-{n}")
            fmt = rng.choice(["otlp_proto", "otlp_json"])
            data = bytearray(encode_otlp(app.spans(), fmt))  # type: ignore[arg-type]
            if kind == "otlp_damaged":
                for _ in range(rng.randint(1, 6)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind == "otlp_json_junk":
                data = bytearray(
                    json.dumps(
                        {"resourceSpans": rng.choice([1, [1], [{"scopeSpans": "x"}], {}])}
                    ).encode()
                )
            messages.append(bytes(data))
    return messages


def _oracle(value: bytes | None, max_bytes: int) -> list[tuple[str, str]]:
    """What the daemon must do with a message, as the decoders themselves say.

    One ("ok", trace_id), ("dead", reason) or ("skip", reason) per trace the message carries.
    """
    if value is not None and len(value) > max_bytes:
        return [("dead", "too_large")]
    fmt = detect_format(value or b"")
    if fmt == "native":
        try:
            return [("ok", decode_native(value).trace_id)]
        except DecodeError as exc:
            return [("dead", exc.reason)]
    try:
        split = split_by_trace(value or b"", fmt)  # a bad trace is rejected alone
    except OtlpDecodeError:
        return [("dead", "otlp_undecodable")]
    outcomes = [("dead", "otlp_undecodable") for _ in split.rejected]
    if not split.parts and not split.rejected:
        return [("skip", "otlp_no_spans")]
    for part in split.parts:
        trace_spans = decode_otlp(part.data, "otlp_proto")
        try:
            trace = spans_to_trace(trace_spans)
        except OtlpMappingError:
            outcomes.append(("dead", "otlp_unmappable"))
            continue
        outcomes.append(("ok", trace.trace_id) if trace is not None else ("skip", "otlp_not_rag"))
    return outcomes


@pytest.mark.kafka
def test_fuzzed_messages_through_the_broker_are_dead_lettered_or_processed(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    count = env_int("RAGMON_FUZZ_MESSAGES", 300)
    seed = env_int("RAGMON_FAULT_SEED", random.randrange(1_000_000))
    max_bytes = 65_536
    rng = random.Random(seed)
    messages = _fuzzed_messages(rng, count, max_bytes)
    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, dlq, results]))  # one partition: offset = index
    headers = [
        ("producer", b"fuzz"),
        ("ragmon.error.reason", b"spoofed"),  # the daemon's own headers cannot be forged
        ("traceparent", bytes(rng.randrange(256) for _ in range(20))),
        ("bin\xe9", b"\xff\xfe"),
    ]

    async def send() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            for value in messages:
                key = rng.choice([None, b"", b"k", bytes(rng.randrange(256) for _ in range(8))])
                if value is None and key is None:  # a tombstone needs a key
                    key = b"tombstone"
                await producer.send_and_wait(topic, value=value, key=key, headers=headers)
        finally:
            await producer.stop()

    asyncio.run(send())
    database = tmp_path / "results.db"
    daemon = DaemonProcess(
        {
            **kafka_env(bootstrap, topic, group, dlq),
            "RAGMON_KAFKA__MAX_MESSAGE_BYTES": str(max_bytes),
            "RAGMON_KAFKA__OTLP_ASSEMBLY_WINDOW_SECONDS": "0.5",
            "RAGMON_RESULTS__TOPIC": results,
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
        },
        tmp_path,
    )
    try:
        daemon.start()
        daemon.wait_ready(90)
        wait_until(
            lambda: pipeline_drained(bootstrap, group, [topic]),
            90,
            "every fuzzed message committed past, OTLP traces through both stages",
            interval=0.5,
        )
        assert daemon.alive and daemon.status("/healthz") == 200
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()

    expected = [_oracle(value, max_bytes) for value in messages]
    letters: dict[int, list[str]] = {}
    details: dict[int, str] = {}
    for record in topic_records(bootstrap, dlq):
        record_headers = {k: v for k, v in record.headers}
        assert record_headers["producer"] == b"fuzz"
        reasons = [v.decode() for k, v in record.headers if k == "ragmon.error.reason"]
        assert reasons and "spoofed" not in reasons, "a forged reason header survived"
        assert record_headers["ragmon.original.topic"] == topic.encode()
        assert record_headers["ragmon.error.class"] and record_headers["ragmon.error.message"]
        offset = int(record_headers["ragmon.original.offset"])
        letters.setdefault(offset, []).append(reasons[-1])
        details[offset] = record_headers["ragmon.error.message"].decode("utf-8", "replace")[:200]
    stored = stored_by_evaluator(database).get("heuristic", set())
    wrong = []
    for offset, outcomes in enumerate(expected):
        want_dead = sorted(reason for kind, reason in outcomes if kind == "dead")
        got_dead = sorted(letters.get(offset, []))
        if want_dead != got_dead:
            wrong.append(
                f"offset {offset}: dead letters {got_dead}, expected {want_dead}"
                f" ({details.get(offset, '')})"
            )
        for kind, trace_id in outcomes:
            if kind == "ok" and trace_id not in stored:
                wrong.append(f"offset {offset}: trace {trace_id!r} decoded but has no result")
    tally: dict[str, int] = {}
    for outcomes in expected:
        for kind, reason in outcomes:
            label = kind if kind == "ok" else f"{kind}:{reason}"
            tally[label] = tally.get(label, 0) + 1
    print(f"\nseed={seed} messages={len(messages)} outcomes={dict(sorted(tally.items()))}")
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.kafka
def test_a_trace_the_store_cannot_hold_takes_no_other_trace_with_it(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, dlq, results]))
    traces = [native_trace(n, conversation_id=f"big-{n}", turn=1) for n in range(40)]
    traces[20]["turn"] = 2**80  # valid for the model, too big for an INTEGER column
    asyncio.run(produce(bootstrap, topic, [json.dumps(t).encode() for t in traces]))
    database = tmp_path / "results.db"
    daemon = DaemonProcess(
        {
            **kafka_env(bootstrap, topic, group, dlq),
            "RAGMON_RESULTS__TOPIC": results,
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
        },
        tmp_path,
    )
    try:
        daemon.start()
        daemon.wait_ready(90)
        wait_until(lambda: committed_total(bootstrap, group) >= len(traces), 60, "all committed")
        assert daemon.terminate() == 0, daemon.stderr_tail()
    finally:
        daemon.ensure_stopped()
    letters = topic_records(bootstrap, dlq)
    dead = sorted(int(dict(r.headers)["ragmon.original.offset"]) for r in letters)
    stored = stored_by_evaluator(database).get("heuristic", set())
    print(f"\n{len(dead)} of {len(traces)} traces dead-lettered for one bad row: offsets {dead}")
    # Before commit fcec9a3 the model took the huge turn, the store's batch failed on it, and
    # 32 of the 40 traces were dead-lettered with it (processing_error).
    assert dead in ([], [20]), "only the trace with the huge turn may be dead-lettered"
    assert stored >= {t["trace_id"] for i, t in enumerate(traces) if i != 20}
