"""Do the population estimates of the judge's scores hold? Replays of labelled data, held out.

    python bench/estimates.py [--reps 200] [--traces 20000] [--judge-error 0.05]
                              [--rates 0.02,0.05,0.1,0.3] [--folds 5] [--seed 0] [--json OUT]
                              [--oracle-tier0] [--metric faithfulness|answer_relevancy]

Streams of traces are built from the labelled RAG answers of ``data/hallucination/`` that have
a question (see data/README.md), at a chosen true unfaithful rate, as conversations of several
turns: each conversation has one answer language and its own propensity to invent (a Beta
draw around the rate, intra-conversation correlation 0.2), so its turns are correlated, as
real ones are. The judge is simulated: the human label, flipped with probability
``--judge-error`` per trace; its faithfulness is 0 or 1 and the estimand is the share of the
stream's traces it would find unfaithful (below the faithfulness threshold) if it judged them
all. Tier 0 is the real one, computed once per item (the expensive part) and reused. The real
``Sampler`` with the default ``SamplingConfig`` (5% uniform draw, priorities on and capped)
picks the traces the judge sees. Per stream and method: the estimate and its 95% interval.

Methods (rows):

- ``raw judged``: the share among every judged trace (what the judge's gauges showed before),
  with a binomial interval;
- ``uniform, turns iid``: the uniform draw weighted by inverse inclusion probability, with a
  variance that treats turns as independent;
- ``uniform-only``: the same estimate with the cluster-robust variance (conversations are the
  unit of the draw) -- what the recording rules compute;
- ``judged, weighted``: every judged trace (the draw and the priorities) weighted by its
  inverse chance of being judged, no prediction: what the priorities add;
- ``PPI, uniform draw``: tier 0's calibrated prediction over every trace plus the judge's
  correction on the uniform draw alone: what tier 0's prediction adds;
- ``PPI, turns iid`` and ``prediction-powered``: the prediction plus the judge's correction on
  every judged trace weighted by its inverse chance, without and with clustering -- the
  daemon's estimate.

Held out: items are dealt into folds by source as ``bench/detect.py`` does (grouped by
document or question, positives spread evenly). Repetition r uses fold r mod k: tier 0's
grounding model is refitted on the other folds (and the supports the calibration learns on come
from models that did not see those items either), and the tier-0 calibration
(monitor.estimates.calibration, default window and minimum, five folds of conversations) is
fitted on the uniform draw of a stream built from the other folds, long enough to fill its
window (as in a daemon that has run a while), then frozen; the reported stream is built from the
held-out fold alone. Nothing is tuned on the items the figures are reported on.

``--metric answer_relevancy`` replays the same way the share of answers below the relevancy
threshold (0.7): the items are WikiEval's questions (``data/hallucination/
wikieval_pairs_dev.jsonl``), each with its answer and its ``poor_answer``, which WikiEval wrote to
answer the question incompletely and its annotators judged the less relevant of the two; the
simulated judge gives the answer 1 and the poor answer 0 (flipped with ``--judge-error``); the
prediction is calibrated from tier 0's own ``answer_relevancy``, as in the daemon. Folds are by
question. Tier 0's ``answer_relevancy`` is deterministic (nothing to refit); the priorities come
from the shipped grounding model's support, which was fitted on these questions' grounded and
ungrounded answers (not the poor ones): it decides only which traces are judged by a known
chance, never a prediction.

The calibration here is a daemon's after a while, not learning any more: the prediction-powered
estimate's bias when the calibration learns while the traffic is scored, with the daemon's
timing, is measured by ``bench/estimates_timing.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cv import grouped_folds  # noqa: E402
from bench.detect import DEFAULT_DATA, EPOCH, Item, load_items  # noqa: E402
from bench.train_tier0 import Example, fit_model, model_of  # noqa: E402
from monitor.config.scoring import EstimatesConfig, SamplingConfig  # noqa: E402
from monitor.estimates.calibration import (  # noqa: E402
    FOLDS,
    Calibrations,
    answer_language,
    fold_of,
)
from monitor.estimates.estimator import (  # noqa: E402
    Z95,
    Estimate,
    Observation,
    prediction_powered,
    terms_of,
    uniform,
)
from monitor.estimates.recorder import EstimateRecorder  # noqa: E402
from monitor.evaluators.heuristic import HeuristicEvaluator  # noqa: E402
from monitor.evaluators.sampler import Sampler, unit_hash  # noqa: E402
from monitor.metrics import AgentLabels  # noqa: E402
from monitor.metrics_catalog import ESTIMATE_TERMS, ESTIMATE_WEIGHTED_TERMS, create  # noqa: E402
from monitor.models import Context, EvaluationResult, PriorityReason, Score, Trace  # noqa: E402
from tests.support.clock import Clock  # noqa: E402

METRIC = "faithfulness"
RELEVANCY = "answer_relevancy"
RELEVANCY_DATA = "wikieval_pairs_dev.jsonl"
WORDING = {  # per metric: what a label of 1 ("below the threshold") is, for the report
    METRIC: ("unfaithful", "faithfulness below 0.8"),
    RELEVANCY: ("weak", "answer relevancy below 0.7: WikiEval's poor answers"),
}
ICC = 0.2  # intra-conversation correlation of the propensity to invent
MEAN_EXTRA_TURNS = 2.5  # turns per conversation: 1 + Poisson(2.5)
METHODS = (
    "raw judged",
    "uniform, turns iid",
    "uniform-only",
    "judged, weighted",
    "PPI, uniform draw",
    "PPI, turns iid",
    "prediction-powered",
)


@dataclass
class Case:
    """One labelled item as a trace, with tier 0 computed once."""

    item: Item  # `item.hallucinated`: below the metric's threshold (unfaithful, or weak)
    language: str  # the calibration's key (answer language)
    tier0: EvaluationResult
    # fold -> the metric's tier-0 predictor: support (its model refitted), or answer_relevancy
    support: dict[int, float] = field(default_factory=dict)
    priority: dict[int, PriorityReason | None] = field(default_factory=dict)  # fold -> rule


@dataclass
class Stream:
    """One replayed stream: per trace its case, conversation and the judge's verdict."""

    cases: list[int]
    conversations: list[str]
    unfaithful: np.ndarray  # the simulated judge: 1 = below the metric's threshold
    human: np.ndarray  # the human label


@dataclass
class Outcome:
    truth: float
    human: float
    judged: int
    priority_share: float
    estimates: dict[str, tuple[float, float, float] | None]  # method -> (value, low, high)


def score_cases(items: list[Item]) -> tuple[list[Case], list[float]]:
    """Tier 0 on every item once; and its CPU milliseconds per trace."""
    evaluator = HeuristicEvaluator()
    cases = []
    cpu = []
    for it in items:
        started = time.process_time()
        result = evaluator.evaluate(it.trace)
        cpu.append((time.process_time() - started) * 1000.0)
        found = evaluator.grounding_features(it.trace)
        if found is not None:
            it.language, it.features = found
        it.scores = {k: s.value for k, s in result.scores.items()}
        cases.append(Case(it, answer_language(it.trace.answer), result))
    return cases, cpu


def recording_cost(cases: list[Case], rounds: int = 20) -> float:
    """CPU microseconds the daemon adds per trace for the estimates (the predictions of every
    estimated metric, counted into the traffic sums), with calibrations holding labels."""
    from prometheus_client import CollectorRegistry

    config = EstimatesConfig()
    calibrations = Calibrations.from_config(config)
    registry = CollectorRegistry()
    recorder = EstimateRecorder(
        evaluator="llm",
        config=config,
        terms=create(ESTIMATE_TERMS, registry),
        weighted_terms=create(ESTIMATE_WEIGHTED_TERMS, registry),
        agent_label=AgentLabels(10),
        calibrations=calibrations,
    )
    read_at = time.monotonic()
    before = calibrations.epoch_at(read_at) - 1
    for i, c in enumerate(cases):  # labelled calibrations, as in a running daemon
        for metric in config.thresholds:
            calibration = calibrations.get(metric, c.language)
            calibration.add(0.5, 1.0 - c.item.hallucinated, fold=i % FOLDS, epoch=before)
    started = time.process_time()
    for _ in range(rounds):
        for c in cases:
            predictions = recorder.predict(c.item.trace, c.tier0, read_at)
            recorder.count_traffic("default", predictions)
    return (time.process_time() - started) * 1e6 / (rounds * len(cases))


def assign_folds(
    cases: list[Case], k: int, seed: int, measured: list[int] | None = None
) -> np.ndarray:
    """Folds by source over the items in `measured` (default: every item tier 0 measures, as
    bench/detect.py), -1 for the rest."""
    if measured is None:
        measured = [i for i, c in enumerate(cases) if c.item.features]
    folds = np.full(len(cases), -1, dtype=int)
    its = [cases[i].item for i in measured]
    folds[measured] = grouped_folds(
        [it.group for it in its],
        [it.source for it in its],
        [it.hallucinated for it in its],
        k,
        seed,
    )
    return folds


def refit_tier0(
    cases: list[Case], folds: np.ndarray, k: int, sampler: Sampler, oracle: bool = False
) -> None:
    """Per held-out fold f: every item's tier-0 support from a grounding model that never saw
    it, and the priority rule the sampler finds with that support. The items of fold f are
    scored by the model fitted on the other folds; an item of another fold g (the calibration's
    training stream) by the model fitted on the folds other than f and g, so that the
    calibration learns on supports as out-of-sample as those it is applied to -- as in
    production, where the shipped model never saw the traffic.

    `oracle`: the support is the human label itself (0 unfaithful, 1 faithful), a tier 0 that
    is never wrong -- the narrowest interval any tier 0 could give with this judge and sampler."""
    models: dict[frozenset[int], Any] = {}

    def model_without(held: frozenset[int]) -> Any:
        if held not in models:
            train = [
                Example(c.item.language, c.item.features, c.item.hallucinated, c.item.group)
                for c, f in zip(cases, folds, strict=True)
                if f >= 0 and f not in held
            ]
            models[held] = model_of(fit_model(train))
        return models[held]

    for fold in range(k):
        for c, g in zip(cases, folds, strict=True):
            if not c.item.features:
                continue
            model = model_without(frozenset({fold, int(g)}))
            support = (
                float(not c.item.hallucinated)
                if oracle
                else model.support(c.item.language, c.item.features)
            )
            c.support[fold] = support
            scores = {**c.tier0.scores, "support": Score.of(support)}
            refitted = c.tier0.model_copy(update={"scores": scores})
            c.priority[fold] = sampler.priority_reason(c.item.trace, refitted)


def label(
    stream: Stream, all_cases: list[Case], judge_error: float, rng: np.random.Generator
) -> None:
    human = np.asarray([all_cases[i].item.hallucinated for i in stream.cases], dtype=float)
    flip = rng.random(human.size) < judge_error
    stream.human = human
    stream.unfaithful = np.where(flip, 1.0 - human, human)


def pools_of(cases: list[Case], members: Sequence[int]) -> dict[tuple[str, bool], list[int]]:
    pools: dict[tuple[str, bool], list[int]] = {}
    for i in members:
        pools.setdefault((cases[i].item.language, cases[i].item.hallucinated), []).append(i)
    return pools


def language_weights(cases: list[Case], members: Sequence[int]) -> tuple[list[str], list[float]]:
    counts: dict[str, int] = {}
    for i in members:
        counts[cases[i].item.language] = counts.get(cases[i].item.language, 0) + 1
    languages = sorted(counts)
    total = sum(counts.values())
    return languages, [counts[lang] / total for lang in languages]


@dataclass(frozen=True, slots=True)
class Chosen:
    """What the real sampler decided for one trace of a stream."""

    uniform: bool
    judged: bool
    rate: float  # the draw's inclusion probability
    judged_probability: float  # by the draw or as a priority


def select(
    stream: Stream,
    cases: list[Case],
    fold: int,
    config: SamplingConfig | None = None,
    seconds_per_trace: float = 1.0,
) -> list[Chosen]:
    """Every trace's selection, from the real sampler (default `config`), trace i read at
    i * `seconds_per_trace` seconds (the time a floor of drawn traces an hour follows)."""
    clock = Clock()
    sampler = Sampler(config or SamplingConfig(), clock=clock)
    draws: dict[str, float] = {}
    out = []
    for i, (case, conversation) in enumerate(zip(stream.cases, stream.conversations, strict=True)):
        clock.now = i * seconds_per_trace
        sampler.count_traffic("default")
        draw = draws.get(conversation)
        if draw is None:
            draw = draws[conversation] = unit_hash(conversation)
        priority_draw = unit_hash(f"priority:{conversation}-{i}")
        chosen = sampler.choose("default", draw, cases[case].priority[fold], priority_draw)
        s = chosen.selection
        judged_probability = s.judged_probability
        assert judged_probability is not None
        out.append(Chosen(s.uniform, s.judged, s.inclusion_probability, judged_probability))
    return out


def draws(stream: Stream, cases: list[Case], fold: int) -> Iterator[tuple[bool, Case, float, str]]:
    """Per trace: whether the uniform draw chose it, its case, the judge's faithfulness (0 or 1)
    and its conversation."""
    for chosen, case, bad, conversation in zip(
        select(stream, cases, fold),
        stream.cases,
        stream.unfaithful,
        stream.conversations,
        strict=True,
    ):
        yield chosen.uniform, cases[case], 1.0 - float(bad), conversation


def calibrate(stream: Stream, cases: list[Case], fold: int, metric: str = METRIC) -> Calibrations:
    """The daemon's calibrations learnt on the uniform draw of a training stream, whose labels
    all arrived in epoch 0; the reported stream is read later, when they are all in."""
    config = EstimatesConfig()
    calibrations = Calibrations.from_config(config)
    for drawn, c, judge, conversation in draws(stream, cases, fold):
        if drawn:
            calibration = calibrations.get(metric, c.language)
            calibration.add(c.support[fold], judge, fold=fold_of(conversation), epoch=0)
    return calibrations


def frozen_predictions(
    stream: Stream, cases: list[Case], fold: int, calibrations: Calibrations, metric: str = METRIC
) -> list[float]:
    """Every trace's prediction of the share below the threshold, read in epoch 1."""
    out = []
    for case, conversation in zip(stream.cases, stream.conversations, strict=True):
        c = cases[case]
        calibration = calibrations.get(metric, c.language)
        out.append(calibration.predict(c.support[fold], fold=fold_of(conversation), epoch=1).below)
    return out


def estimate_stream(
    stream: Stream, chosen: Sequence[Chosen], predictions: Sequence[float]
) -> Outcome:
    """Every method's estimate; `predictions`: each trace's prediction of the share below the
    threshold (the calibration's `below`)."""
    rows = list(zip(chosen, stream.unfaithful, predictions, stream.conversations, strict=True))
    judged = [float(bad) for c, bad, _, _ in rows if c.judged]
    drawn = [
        Observation(conversation, 1.0 / c.rate, float(bad), f)
        for c, bad, f, conversation in rows
        if c.uniform
    ]
    weighted = [
        Observation(conversation, 1.0 / c.judged_probability, float(bad), f)
        for c, bad, f, conversation in rows
        if c.judged
    ]
    traffic = terms_of(drawn, predictions)
    weighted_terms = terms_of(weighted, [])

    estimates: dict[str, tuple[float, float, float] | None] = {
        "raw judged": _binomial(judged),
        "uniform, turns iid": _bounds(uniform(terms_of(_by_trace(drawn), []))),
        "uniform-only": _bounds(uniform(traffic)),
        "judged, weighted": _bounds(
            prediction_powered(
                terms_of(_unpredicted(drawn), [0.0] * len(predictions)),
                terms_of(_unpredicted(weighted), []),
            )
        ),
        "PPI, uniform draw": _bounds(prediction_powered(traffic, terms_of(drawn, []))),
        "PPI, turns iid": _bounds(
            prediction_powered(
                terms_of(_by_trace(drawn), predictions), terms_of(_by_trace(weighted), [])
            )
        ),
        "prediction-powered": _bounds(prediction_powered(traffic, weighted_terms)),
    }
    uniform_judged = sum(1 for c in chosen if c.uniform)
    return Outcome(
        truth=float(stream.unfaithful.mean()),
        human=float(stream.human.mean()),
        judged=len(judged),
        priority_share=1.0 - uniform_judged / len(judged) if judged else float("nan"),
        estimates=estimates,
    )


def _unpredicted(observations: list[Observation]) -> list[Observation]:
    """The same sample with no prediction: the judged traces' weighted mean alone."""
    return [Observation(o.cluster, o.weight, o.judge, 0.0) for o in observations]


def _by_trace(observations: list[Observation]) -> list[Observation]:
    """The same sample with every trace its own cluster (turns treated as independent)."""
    return [
        Observation(str(i), o.weight, o.judge, o.prediction) for i, o in enumerate(observations)
    ]


def _binomial(values: Sequence[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    share = sum(values) / len(values)
    half = Z95 * math.sqrt(share * (1.0 - share) / len(values))
    return share, max(0.0, share - half), min(1.0, share + half)


def _bounds(estimate: Estimate | None) -> tuple[float, float, float] | None:
    if estimate is None:
        return None
    low, high = estimate.interval()
    return estimate.value, low, high


@dataclass
class Summary:
    rate: float
    reps: int
    truth: float
    human: float
    judged: float
    priority_share: float
    bias: dict[str, float]
    coverage: dict[str, float]
    width: dict[str, float]
    missing: dict[str, int]


@dataclass
class Stats:
    """One method over repeated streams."""

    bias: float
    bias_error: float  # the bias's own standard error over the streams
    coverage: float
    width: float
    missing: int


def stats(rows: Sequence[tuple[float, tuple[float, float, float] | None]]) -> Stats:
    """Of (truth, estimate and interval) per stream."""
    present = [(t, e) for t, e in rows if e is not None]
    errors = np.asarray([e[0] - t for t, e in present])
    return Stats(
        bias=float(errors.mean()),
        bias_error=float(errors.std(ddof=1) / math.sqrt(len(errors))) if len(errors) > 1 else 0.0,
        coverage=float(np.mean([e[1] <= t <= e[2] for t, e in present])),
        width=float(np.mean([e[2] - e[1] for _, e in present])),
        missing=len(rows) - len(present),
    )


def of(
    outcomes: Sequence[Outcome], method: str
) -> list[tuple[float, tuple[float, float, float] | None]]:
    """(truth, estimate and interval) of `method` per stream."""
    return [(o.truth, o.estimates[method]) for o in outcomes]


def summarise(rate: float, outcomes: list[Outcome]) -> Summary:
    bias, coverage, width, missing = {}, {}, {}, {}
    for method in METHODS:
        row = stats(of(outcomes, method))
        bias[method], coverage[method] = row.bias, row.coverage
        width[method], missing[method] = row.width, row.missing
    return Summary(
        rate=rate,
        reps=len(outcomes),
        truth=float(np.mean([o.truth for o in outcomes])),
        human=float(np.mean([o.human for o in outcomes])),
        judged=float(np.mean([o.judged for o in outcomes])),
        priority_share=float(np.mean([o.priority_share for o in outcomes])),
        bias=bias,
        coverage=coverage,
        width=width,
        missing=missing,
    )


@dataclass
class Prepared:
    """The labelled items with tier 0 computed, dealt into held-out folds."""

    cases: list[Case]
    folds: np.ndarray  # per case, -1 for those tier 0 does not measure
    usable: list[int]  # the stream's items: with a question that tier 0 scores
    judge_error: float
    info: dict[str, Any]
    metric: str = METRIC

    def members(self, fold: int, held_out: bool) -> list[int]:
        return [i for i in self.usable if (self.folds[i] == fold) == held_out]

    def stream(
        self,
        members: Sequence[int],
        rate: float,
        traces: int,
        rng: np.random.Generator,
        tag: str,
        turn_gap: float | None = None,
    ) -> Stream:
        """A labelled stream of traces of `members`' items, as conversations of several
        turns, `turn_gap` traces of traffic apart (about 2 if None); its first `traces`."""
        pools = pools_of(self.cases, members)
        languages, weights = language_weights(self.cases, members)
        kappa = 1.0 / ICC - 1.0
        spacing = 1e-4 if turn_gap is None else turn_gap / traces
        picked: list[int] = []
        conversations: list[str] = []
        starts: list[float] = []
        n = 0
        while len(picked) < traces:
            language = languages[rng.choice(len(languages), p=weights)]
            propensity = rng.beta(rate * kappa, (1.0 - rate) * kappa)
            conversation = f"{tag}-c{n}"
            start = rng.random()
            for turn in range(1 + rng.poisson(MEAN_EXTRA_TURNS)):
                bad = bool(rng.random() < propensity)
                pool = pools.get((language, bad)) or next(
                    p for (_, b), p in sorted(pools.items()) if b == bad and p
                )
                picked.append(pool[rng.integers(len(pool))])
                conversations.append(conversation)
                starts.append(start + turn * spacing)
            n += 1
        order = np.argsort(np.asarray(starts), kind="stable")[:traces]
        stream = Stream(
            cases=[picked[i] for i in order],
            conversations=[conversations[i] for i in order],
            unfaithful=np.zeros(0),
            human=np.zeros(0),
        )
        label(stream, self.cases, self.judge_error, rng)
        return stream


def prepare(data: Path, k: int, seed: int, judge_error: float, oracle: bool = False) -> Prepared:
    started = time.perf_counter()
    items = [it for it in load_items(data)]
    cases, tier0_cpu = score_cases(items)
    folds = assign_folds(cases, k, seed)
    refit_tier0(cases, folds, k, Sampler(SamplingConfig()), oracle)
    usable = [i for i, c in enumerate(cases) if c.item.trace.query and c.item.features]
    info = {
        "items": len(usable),
        "unfaithful_items": sum(cases[i].item.hallucinated for i in usable),
        "tier0_seconds": time.perf_counter() - started,
        "tier0_cpu_ms_p50": float(np.median(tier0_cpu)),
    }
    return Prepared(cases, folds, usable, judge_error, info)


def relevancy_items(data: Path) -> list[Item]:
    """Two items per WikiEval question: its answer (relevant) and its poor answer (below the
    relevancy threshold), each over the question's clean context."""
    items = []
    with (data / RELEVANCY_DATA).open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row: dict[str, Any] = json.loads(line)
            for kind, weak in (("answer", False), ("poor_answer", True)):
                item_id = f"{row['id']}-{kind}"
                trace = Trace(
                    trace_id=item_id,
                    timestamp=EPOCH,
                    query=row["question"],
                    contexts=[Context(id=f"{row['id']}#0", text=row["context_v1"], rank=0)],
                    answer=row[kind],
                )
                items.append(Item(item_id, RELEVANCY_DATA, "WikiEval", row["id"], weak, trace))
    return items


def prepare_relevancy(data: Path, k: int, seed: int, judge_error: float) -> Prepared:
    started = time.perf_counter()
    cases, tier0_cpu = score_cases(relevancy_items(data))
    sampler = Sampler(SamplingConfig())
    usable = [i for i, c in enumerate(cases) if c.tier0.scores[RELEVANCY].value is not None]
    folds = assign_folds(cases, k, seed, usable)
    for i in usable:
        c = cases[i]
        predictor = c.tier0.scores[RELEVANCY].value
        assert predictor is not None
        priority = sampler.priority_reason(c.item.trace, c.tier0)
        c.support = dict.fromkeys(range(k), predictor)
        c.priority = dict.fromkeys(range(k), priority)
    info = {
        "items": len(usable),
        "unfaithful_items": sum(cases[i].item.hallucinated for i in usable),
        "tier0_seconds": time.perf_counter() - started,
        "tier0_cpu_ms_p50": float(np.median(tier0_cpu)),
    }
    return Prepared(cases, folds, usable, judge_error, info, RELEVANCY)


WARM_UP = math.ceil(EstimatesConfig().calibration_window / SamplingConfig().rate)
"""Traces whose uniform draw fills a calibration's window: a daemon that has run a while."""


def run(
    rates: Sequence[float],
    reps: int,
    traces: int,
    judge_error: float,
    k: int,
    seed: int,
    data: Path,
    oracle: bool = False,
    metric: str = METRIC,
) -> tuple[list[Summary], dict[str, Any]]:
    started = time.perf_counter()
    if metric == RELEVANCY:
        prepared = prepare_relevancy(data, k, seed, judge_error)
    else:
        prepared = prepare(data, k, seed, judge_error, oracle)
    cases, info = prepared.cases, prepared.info
    info["metric"] = metric
    info["recording_cpu_us"] = recording_cost([cases[i] for i in prepared.usable])
    info["warm_up_traces"] = WARM_UP
    summaries = []
    for rate in rates:
        rng = np.random.default_rng([seed, int(rate * 1e6)])
        outcomes = []
        for rep in range(reps):
            fold = rep % k
            train = prepared.members(fold, held_out=False)
            train_stream = prepared.stream(train, rate, WARM_UP, rng, f"train-{rate}-{rep}")
            calibrations = calibrate(train_stream, cases, fold, metric)
            test = prepared.members(fold, held_out=True)
            stream = prepared.stream(test, rate, traces, rng, f"test-{rate}-{rep}")
            predictions = frozen_predictions(stream, cases, fold, calibrations, metric)
            outcomes.append(estimate_stream(stream, select(stream, cases, fold), predictions))
        summaries.append(summarise(rate, outcomes))
    info["seconds"] = time.perf_counter() - started
    return summaries, info


def print_report(
    summaries: list[Summary], info: dict[str, Any], traces: int, judge_error: float, k: int
) -> None:
    bad, meaning = WORDING[info["metric"]]
    print(
        f"Share of {bad} answers ({meaning}; judge-grade) estimated from streams of {traces} "
        f"traces built from {info['items']} labelled items ({info['unfaithful_items']} {bad}), "
        f"default sampling (5% uniform draw of conversations, priorities on and capped); "
        f"simulated judge = human label flipped with probability {judge_error}; held out by "
        f"source over {k} folds."
    )
    print("bias = mean(estimate - truth); coverage of the 95% interval; width = mean interval")
    header = f"{'method':<20} {'bias':>8} {'coverage':>9} {'width':>7}"
    for s in summaries:
        print()
        print(
            f"true {bad} rate {s.rate:.0%}: judge-grade truth {s.truth:.4f} (human "
            f"{s.human:.4f}), {s.reps} streams, {s.judged:.0f} judged per stream of which "
            f"{s.priority_share:.0%} priority"
        )
        print(header)
        for method in METHODS:
            note = f"  ({s.missing[method]} streams without estimate)" if s.missing[method] else ""
            print(
                f"{method:<20} {s.bias[method]:>+8.4f} {s.coverage[method]:>9.1%} "
                f"{s.width[method]:>7.4f}{note}"
            )
        ratio = s.width["prediction-powered"] / s.width["uniform-only"]
        print(f"prediction-powered width / uniform-only width: {ratio:.2f}")
    print()
    print(
        f"the daemon's added work per trace for the estimates (predictions of the 4 metrics, "
        f"traffic sums): {info['recording_cpu_us']:.0f} us of CPU; tier 0 itself: "
        f"{info['tier0_cpu_ms_p50']:.2f} ms p50"
    )
    print(f"({info['seconds']:.0f} s; tier 0 on every item once: {info['tier0_seconds']:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--reps", type=int, default=200, help="streams per rate")
    parser.add_argument("--traces", type=int, default=20_000, help="traces per stream")
    parser.add_argument("--judge-error", type=float, default=0.05)
    parser.add_argument("--rates", default="0.02,0.05,0.1,0.3", help="true unfaithful rates")
    parser.add_argument(
        "--metric",
        choices=(METRIC, RELEVANCY),
        default=METRIC,
        help="the judge metric whose share below its threshold is estimated",
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--oracle-tier0",
        action="store_true",
        help="tier 0's support is the human label: the floor of the interval's width",
    )
    args = parser.parse_args(argv)
    if args.oracle_tier0 and args.metric != METRIC:
        parser.error("--oracle-tier0 replaces the support: faithfulness only")
    rates = [float(r) for r in args.rates.split(",")]
    summaries, info = run(
        rates,
        args.reps,
        args.traces,
        args.judge_error,
        args.folds,
        args.seed,
        args.data,
        args.oracle_tier0,
        args.metric,
    )
    if args.oracle_tier0:
        print("tier 0 replaced by an oracle: the support is the human label")
    print_report(summaries, info, args.traces, args.judge_error, args.folds)
    if args.json:
        args.json.write_text(
            json.dumps({"info": info, "rates": [s.__dict__ for s in summaries]}, indent=2),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
