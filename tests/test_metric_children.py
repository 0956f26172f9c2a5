"""`monitor.metrics.Children`: a labelled metric's children looked up once per label values."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from monitor.metrics import Children


def test_a_child_is_the_series_labels_would_give_and_is_looked_up_once() -> None:
    registry = CollectorRegistry()
    counter = Counter("widgets", "w", ["agent", "outcome"], registry=registry)
    children = Children(counter)
    children("a", "ok").inc()
    children("a", "ok").inc(2)
    counter.labels("a", "ok").inc()  # the same series, however it is reached
    children("b", "error").inc()
    assert children("a", "ok") is children("a", "ok") is counter.labels("a", "ok")
    value = registry.get_sample_value
    assert value("widgets_total", {"agent": "a", "outcome": "ok"}) == 4
    assert value("widgets_total", {"agent": "b", "outcome": "error"}) == 1


def test_histogram_children_keep_their_exemplars() -> None:
    registry = CollectorRegistry()
    histogram = Histogram("latency", "l", ["agent"], buckets=[1.0], registry=registry)
    Children(histogram)("a").observe(0.5, exemplar={"trace_id": "t1"})
    bucket = next(s for m in registry.collect() for s in m.samples if s.labels.get("le") == "1.0")
    assert bucket.value == 1 and bucket.exemplar is not None
    assert bucket.exemplar.labels == {"trace_id": "t1"}
