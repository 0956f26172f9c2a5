"""Golden-set evaluation of retrieval and answers.

Measures (pure functions, no I/O):

- :mod:`monitor.golden.ranking` -- per-query ranking metrics (reciprocal rank, precision,
  recall, success, nDCG), coverage, latency percentiles and their aggregation over queries
  and groups of queries.
- :mod:`monitor.golden.stats` -- paired comparisons of two systems (paired t-test, Cohen's d,
  paired bootstrap CI), Pearson correlation and inter-annotator agreement (Cohen's kappa,
  quadratic-weighted kappa).
- :mod:`monitor.golden.answers` -- answer checks of generation suites (must_not_contain,
  expected topics, no-context admission, answer language) and the :class:`AnswerJudge` hook.
- :mod:`monitor.golden.evaluation` -- observations to per-query, per-mode and between-mode
  results; :mod:`monitor.golden.recommend` -- the tuning table.
- Measure names, response paths and request templates are the languages the ``golden:``
  section is written in, so they live beside it: :mod:`monitor.config.golden.measures`,
  :mod:`monitor.config.golden.jsonpath`, :mod:`monitor.config.golden.template`.

Data and configuration:

- :mod:`monitor.golden.trec` -- TREC qrels and run files.
- :mod:`monitor.golden.dataset` -- retrieval and generation suites in
  YAML/JSONL, annotator label files; errors name file, line and field.
- :mod:`monitor.config.golden` -- ``GoldenConfig``, the ``golden:`` section of the settings.
- :mod:`monitor.golden.results` -- the run result (serialised as the JSON beside the report).

Running and output:

- :mod:`monitor.golden.client` and :mod:`monitor.golden.runner` -- the HTTP runner (modes,
  sweeps, concurrency, timeouts, retries, latency).
- :mod:`monitor.golden.report` -- the markdown report and JSON result.
- :mod:`monitor.golden.metrics` -- the ``ragmon_golden_*`` Prometheus metrics.
- :mod:`monitor.golden.schedule` -- cron/interval runs inside the daemon (APScheduler).
- :mod:`monitor.golden.service` -- the scheduler and its answer judge as a service the daemon
  starts beside consuming and stops first.
- :mod:`monitor.golden.cli` -- ``rag-monitor golden score|run|agreement|validate``.

The formulas (docs/metrics.md#retrieval) are cross-checked against
NIST trec_eval's own fixtures and the published JQaRA figures.
"""
