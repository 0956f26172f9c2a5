"""Keeps the running sums of the population estimates as the daemon scores traces.

For every trace of the traffic (with a judge configured), per judge metric whose tier-0
predictor was measured: the calibrated prediction, by the fit of the epoch the trace was read in
and of the other folds' labels (monitor.estimates.calibration), recorded on the trace's results,
is counted (`traces`, `predicted`). For every judged trace, per metric the judge measured, two
samples grow: the uniform draw's (if the draw chose the trace; w = 1 / the draw's rate,
`ragmon_estimate_terms_total`) and every judged trace's (w = 1 / its chance of being judged by
the draw or as a priority, `ragmon_estimate_weighted_terms_total`). In each, the conversation's
running totals M_c, Y_c, F_c (monitor.estimates.estimator) grow by the trace's w, w y and w f,
and the counters of their sums and of the sums of their products grow by what that adds (all
values are non-negative, so the sums of squares only grow: they are counters). A trace of the
draw then joins its calibration, for the predictions of traces read in later epochs.

A conversation is consumed by one replica (the input is keyed by conversation), so its totals
live here, bounded like the conversation tracker's state: idle ones are dropped after
`idle_seconds`, the least recently used beyond `max_conversations`. A conversation whose totals
were dropped counts as a new one when it comes back, which slightly understates the variance.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping

from monitor.config.scoring import EstimatesConfig
from monitor.estimates.calibration import Calibrations, answer_language, fold_of
from monitor.estimates.estimator import Term
from monitor.metrics import AgentLabels
from monitor.models import EvaluationResult, Prediction, Selection, Trace
from monitor.typing import CounterChild, TermCounter

# The tier-0 score that predicts each judge metric.
PREDICTORS: Mapping[str, str] = {
    "faithfulness": "support",  # continuous, ranks hallucination risk best (docs/scoring.md)
    "answer_relevancy": "answer_relevancy",
    "context_precision": "context_precision",
    "context_relevancy": "context_utilization",
}
QUANTITIES = ("mean", "below")
UNIFORM, JUDGED = "uniform", "judged"  # the two samples
_Totals = dict[tuple[str, str, str], list[float]]  # (sample, metric, quantity) -> [M, Y, F]


class EstimateRecorder:
    def __init__(
        self,
        *,
        evaluator: str,
        config: EstimatesConfig,
        terms: TermCounter,
        weighted_terms: TermCounter,
        agent_label: AgentLabels,
        calibrations: Calibrations,
        max_conversations: int = 100_000,
        idle_seconds: float = 1800.0,
    ) -> None:
        self._evaluator = evaluator
        self._thresholds = dict(config.thresholds)
        self._counters = {UNIFORM: terms, JUDGED: weighted_terms}
        self._agent_label = agent_label
        self.calibrations = calibrations
        self._max = max_conversations
        self._idle = idle_seconds
        # (conversation, agent label) -> (last seen, its totals)
        self._totals: OrderedDict[tuple[str, str], tuple[float, _Totals]] = OrderedDict()
        self._children: dict[tuple[str, str, str, str, str], CounterChild] = {}  # bounded: labels

    def predict(
        self, trace: Trace, tier0: EvaluationResult, read_at: float
    ) -> dict[str, Prediction]:
        """The calibrated predictions of every estimated metric tier 0 can predict here, for a
        trace read at `read_at` (time.monotonic()): the same whenever it is asked."""
        language = answer_language(trace.answer)
        fold = fold_of(trace.partition_key)
        epoch = self.calibrations.epoch_at(read_at)
        out: dict[str, Prediction] = {}
        for metric in self._thresholds:
            x = _predictor(tier0, metric)
            if x is not None:
                calibration = self.calibrations.get(metric, language)
                out[metric] = calibration.predict(x, fold=fold, epoch=epoch)
        return out

    def count_traffic(self, agent: str, predictions: Mapping[str, Prediction]) -> None:
        label = self._agent_label(agent)
        for metric, prediction in predictions.items():
            for quantity in QUANTITIES:
                self._inc(UNIFORM, label, metric, quantity, "traces", 1.0)
                self._inc(UNIFORM, label, metric, quantity, "predicted", _of(prediction, quantity))

    def count_judged(
        self,
        trace: Trace,
        tier0: EvaluationResult,
        selection: Selection,
        judged: EvaluationResult,
        now: float | None = None,
    ) -> None:
        """A judged trace: into the samples it belongs to, then, from the draw, the calibration."""
        drawn = selection.uniform and selection.inclusion_probability > 0.0
        chance = selection.judged_probability
        weights: dict[str, float] = {}
        if drawn:
            weights[UNIFORM] = 1.0 / selection.inclusion_probability
        if chance is not None and selection.inclusion_probability > 0.0:
            # (the chance is then above 0 too) A priority judged while the draw's rate was 0
            # has no counterpart in the traffic the draw would reach: the weighted sample, like
            # the draw, needs every trace's chance above 0.
            weights[JUDGED] = 1.0 / chance
        if not weights:
            return
        now = time.monotonic() if now is None else now
        label = self._agent_label(trace.agent)
        totals = self._conversation(trace, label, now)
        language = answer_language(trace.answer)
        fold = fold_of(trace.partition_key)
        epoch = self.calibrations.epoch_at(now)
        for metric, prediction in selection.predictions.items():
            if metric not in self._thresholds:
                continue
            score = judged.scores.get(metric)
            x = _predictor(tier0, metric)
            if score is None or score.value is None or x is None:
                continue  # unmeasured by the judge: not in the sample (docs/metrics.md)
            threshold = self._thresholds[metric]
            for quantity in QUANTITIES:
                y = score.value if quantity == "mean" else float(score.value < threshold)
                for sample, weight in weights.items():
                    key = (sample, metric, quantity)
                    self._add(key, label, totals, weight, y, _of(prediction, quantity))
            if drawn:
                self.calibrations.get(metric, language).add(
                    x, score.value, fold=fold, epoch=epoch, now=now
                )

    def _add(
        self, key: tuple[str, str, str], agent: str, totals: _Totals, w: float, y: float, f: float
    ) -> None:
        sample, metric, quantity = key
        total = totals.setdefault(key, [0.0, 0.0, 0.0])
        m0, y0, f0 = total
        dm, dy, df = w, w * y, w * f
        steps: dict[Term, float] = {
            "judged": 1.0,
            "clusters": 1.0 if m0 == 0.0 else 0.0,
            "m": dm,
            "y": dy,
            "f": df,
            # (a + da)(b + db) - a b: what the sum of a product over conversations gains
            "mm": 2.0 * m0 * dm + dm * dm,
            "yy": 2.0 * y0 * dy + dy * dy,
            "ff": 2.0 * f0 * df + df * df,
            "ym": y0 * dm + dy * m0 + dy * dm,
            "fm": f0 * dm + df * m0 + df * dm,
            "yf": y0 * df + dy * f0 + dy * df,
        }
        for term, step in steps.items():  # zeros too: a sum that stays 0 is a series at 0
            self._inc(sample, agent, metric, quantity, term, step)
        total[0], total[1], total[2] = m0 + dm, y0 + dy, f0 + df

    def _conversation(self, trace: Trace, agent: str, now: float) -> _Totals:
        if trace.conversation_id is None:
            return {}  # a trace of its own is its own cluster
        key = (trace.conversation_id, agent)
        found = self._totals.pop(key, None)
        totals = found[1] if found is not None else {}
        self._totals[key] = (now, totals)
        while self._totals:
            oldest_key, (seen, _) = next(iter(self._totals.items()))
            if len(self._totals) <= self._max and now - seen < self._idle:
                break
            del self._totals[oldest_key]
        return totals

    def _inc(
        self, sample: str, agent: str, metric: str, quantity: str, term: Term, amount: float
    ) -> None:
        key = (sample, agent, metric, quantity, term)
        child = self._children.get(key)
        if child is None:  # labels() costs more than the increment: every trace makes 16
            child = self._children[key] = self._counters[sample].labels(
                agent, metric, self._evaluator, quantity, term
            )
        child.inc(amount)


def _predictor(tier0: EvaluationResult, metric: str) -> float | None:
    score = tier0.scores.get(PREDICTORS[metric])
    return score.value if score is not None else None


def _of(prediction: Prediction, quantity: str) -> float:
    return prediction.mean if quantity == "mean" else prediction.below
