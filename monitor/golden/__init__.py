"""Golden-set retrieval evaluation.

- :mod:`monitor.golden.ranking` -- per-query ranking metrics (reciprocal rank, precision,
  recall, success, nDCG), coverage, latency percentiles and their aggregation over queries
  and groups of queries. Pure functions, no I/O.
- :mod:`monitor.golden.trec` -- loaders for TREC qrels and run files, and the two ways of
  turning a run's lines into a ranked list (trec_eval's and the stored order).
- :mod:`monitor.golden.stats` -- paired comparisons of two systems (paired t-test, Cohen's d,
  paired bootstrap CI), Pearson correlation and inter-annotator agreement (Cohen's kappa,
  quadratic-weighted kappa). Pure functions, no I/O.

The formulas follow the retrieval-evaluation design (seed 000) and are cross-checked against
NIST trec_eval's own fixtures and the published JQaRA figures.
"""
