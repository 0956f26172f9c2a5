"""Sources: where raw messages come from, and which of their offsets are safe to commit.

The Kafka consumer (`kafka`) and the file/stdin replay (`file`) yield `RawMessage`s and nothing
more; what the bytes mean is `monitor.formats`' business, what happens to them `monitor.stages`'.
`offsets` says which offsets are finished, `progress` whether a consumer's partitions move.
See docs/architecture.md.
"""
