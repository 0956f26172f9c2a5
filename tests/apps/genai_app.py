"""A RAG app instrumented with the OpenTelemetry GenAI conventions: the official OpenAI
instrumentation (opentelemetry-instrumentation-openai-v2) for the model call, and
opentelemetry-util-genai's TelemetryHandler for the workflow and retrieval spans.

Content capture follows OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, set by the test:
`span_only` puts messages and retrieval documents on spans; `event_only` sends the model
call's messages as OTLP log events (gen_ai.client.inference.operation.details) and leaves the
workflow and retrieval spans without content. The plan's `documents_with_text` decides
whether retrieved documents carry their text or, as the convention's example, only id and score.
"""

from __future__ import annotations

import os

from openai import OpenAI
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text
from rag_common import SYSTEM_PROMPT, format_context, load_plan, retriever, turns

os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
plan = load_plan()
resource = Resource.create({"service.name": plan["service"]})
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"{plan['otlp_endpoint']}/v1/traces"), schedule_delay_millis=500
    )
)
logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(
    BatchLogRecordProcessor(
        OTLPLogExporter(endpoint=f"{plan['otlp_endpoint']}/v1/logs"), schedule_delay_millis=500
    )
)
OpenAIInstrumentor().instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
handler = TelemetryHandler(tracer_provider=tracer_provider, logger_provider=logger_provider)
client = OpenAI(base_url=plan["openai_base_url"], api_key="test-key")
lookup = retriever(plan)
with_text = bool(plan.get("documents_with_text", True))

for turn in turns(plan):
    workflow = handler.workflow("support_answer")
    workflow.attributes["gen_ai.conversation.id"] = turn.conversation
    workflow.input_messages = [InputMessage(role="user", parts=[Text(content=turn.question)])]
    with handler.retrieval(data_source_id="product-docs", provider="in_memory") as retrieval:
        documents = lookup(turn.question)
        retrieval.query_text = turn.question
        retrieval.top_k = len(documents)
        retrieval.documents = [
            {"id": d.id, "score": d.score, **({"content": d.text} if with_text else {})}
            for d in documents
        ]
    response = client.chat.completions.create(
        model=plan["model"],
        messages=[
            {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{format_context(documents)}"},
            {"role": "user", "content": turn.question},
        ],
    )
    answer = response.choices[0].message.content or ""
    workflow.output_messages = [
        OutputMessage(role="assistant", parts=[Text(content=answer)], finish_reason="stop")
    ]
    workflow.stop()

tracer_provider.shutdown()
logger_provider.shutdown()
