"""Sources: where traces come from, up to decoded messages.

The Kafka consumer (`kafka`) and the file/stdin replay (`file`) yield raw messages; `offsets`
says which are safe to commit. Native JSON is decoded by `native`; OpenTelemetry exports by
`otlp` (with `otlp_mapping` and `otlp_conventions` for what each instrumentation writes,
`otlp_documents` for the shapes retrieved documents are recorded in, `otlp_values` for the
attribute values, and `otlp_logs` for GenAI events), split per trace (`otlp_split`) and assembled
whole (`assembly`, `otlp_stage`) before the pipeline sees them.
"""
