"""On-call review: the worst recent answers, for a terminal (`rag-monitor review`) and a browser.

From an alert to the answers behind it, in one direction of imports:

- :mod:`~monitor.review.items`: what one listed answer holds (redacted excerpts, scores, claims,
  broken constraints) and the bounds of a listing;
- :mod:`~monitor.review.grouping`: near-identical answers folded into one entry with a count;
- :mod:`~monitor.review.queries`: the worst answers through ``Store.worst`` (the store's one
  ranking query), with the constraints recorded on their conversation turns;
- :mod:`~monitor.review.render`: text for a terminal, JSON, and the HTML page (a Jinja2 template
  with autoescaping, shipped in ``templates/``);
- :mod:`~monitor.review.http`: ``GET /review`` and ``GET /review.json``, a token required by
  middleware;
- :mod:`~monitor.review.cli`: the ``rag-monitor review`` command.

What is shown is untrusted trace text. It is redacted once more before display (the store keeps
the redacted question and answer when ``redact.store`` is on, but the claims and constraint
reasons on conversation turns are not redacted when written), escaped in HTML, and stripped of
terminal control characters in text. Neither output ever contains configuration or secrets.
"""
