"""Formats: what the bytes of a message mean. Pure functions, no I/O.

Native JSON traces (`native`); OpenTelemetry exports (`otlp`, with `otlp_wire` for the protobuf
and OTLP/JSON parsing both share, `otlp_mapping` and `otlp_conventions` for what each
instrumentation writes, `otlp_documents` for the shapes retrieved documents are recorded in,
`otlp_values` for attribute values, `otlp_logs` for GenAI events), split per trace
(`otlp_split`, `otlp_salvage` for the traces a bad span leaves usable), collected until whole
(`assembly`) and mapped onto a `Trace` (`otlp_release`). See docs/architecture.md.
"""
