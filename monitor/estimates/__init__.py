"""Population estimates of the judge's scores: what the judge would say of all traffic.

The judge sees a uniform draw of conversations plus priority traces; only the uniform draw is a
sample of the traffic. Per agent and judge metric, two estimates of the traffic's mean judge
score (``quantity="mean"``) and of the share of traces below the metric's threshold
(``quantity="below"``), with 95% intervals, come from running sums exported as counters
(``ragmon_estimate_terms_total``), which recording rules turn into estimates exactly across
replicas and for any window:

- uniform-only: the uniform draw's scores weighted by inverse inclusion probability;
- prediction-powered (Angelopoulos et al., Science 2023): tier 0's calibrated prediction averaged
  over every trace, corrected by the judge's mean difference from it on the uniform draw.

:mod:`~monitor.estimates.estimator` has the arithmetic, :mod:`~monitor.estimates.calibration`
the online tier-0 calibration, :mod:`~monitor.estimates.recorder` keeps the sums as the daemon
runs. docs/metrics.md ("Population estimates") has the formulas and the measured coverage.
"""
