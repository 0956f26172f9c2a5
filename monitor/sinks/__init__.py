"""Sinks: where results and failures go.

The results store (`store`), the results topic (`results`), the dead-letter topic
(`deadletter`), the acknowledged producer they share (`writer`), start-up checks of the topics
written to (`topics`), and the classes that record the Prometheus metrics `monitor.metrics_catalog`
declares (`metrics`, `scoring_metrics`; `span_events` puts scores on the daemon's own spans).
"""
