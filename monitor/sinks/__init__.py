"""Sinks: where results and failures go.

The results store (`store`) and its repositories, the only code that touches the database
(`conversations` for the conversation stage, `turns` for the review and the agents report,
`verdicts` for the judge), the results topic (`results`), the dead-letter topic (`deadletter`),
the acknowledged producers (`produce`, `writer`), the topics written to (`topics`,
`topic_admin`), and the classes that record the Prometheus metrics `monitor.metrics_catalog`
declares (`scoring_metrics`; `span_events` puts scores on the daemon's own spans).

Where this sits in the data flow: docs/architecture.md.
"""
