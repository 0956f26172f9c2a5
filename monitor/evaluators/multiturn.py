"""Formulas of multi-turn evaluation (docs/metrics.md#conversations), pure and without I/O.

H_t = U_t / max(1, S_t + U_t); H_u = mean H_t; D_t = (V_t + O_t) / max(1, |K_t|);
D_r = mean D_t over t >= 2; M = mean M_t; M_T = memory at the final turn.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

OUTCOME_METRICS = ("relevance", "answer_quality", "instruction_following", "coherence")


def turn_bucket(turn: int) -> str:
    if turn <= 3:
        return str(max(turn, 1))
    if turn <= 5:
        return "4-5"
    if turn <= 10:
        return "6-10"
    return "11+"


def hallucination_rate(supported: int, unsupported: int) -> float:
    """H_t: the share of the turn's statements that no context supports."""
    return unsupported / max(1, supported + unsupported)


def drift_rate(violated: int, omitted: int, active: int) -> float:
    """D_t: violated plus omitted constraints over the active ones."""
    return (violated + omitted) / max(1, active)


@dataclass(frozen=True)
class TurnRecord:
    conversation_id: str
    turn: int
    agent: str
    hallucination: float | None
    drift: float | None
    memory_tokens: int | None
    outcomes: dict[str, float] = field(default_factory=dict)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _std(values: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); None below two values."""
    return statistics.stdev(values) if len(values) >= 2 else None


@dataclass(frozen=True)
class AgentSummary:
    agent: str
    turns: int
    conversations: int
    hallucination_mean: float | None  # H_u
    hallucination_std: float | None
    drift_mean: float | None  # D_r, turns >= 2 only
    drift_std: float | None
    memory_mean: float | None  # M
    memory_final_mean: float | None  # M_T averaged over conversations
    outcome_means: dict[str, float | None]
    outcome_stds: dict[str, float | None]
    hallucination_series: list[float]
    drift_series: list[float]


def summarize_agent(agent: str, records: Iterable[TurnRecord]) -> AgentSummary:
    """Per-agent summary: means, standard deviations and the per-turn series, in turn order."""
    ordered = sorted(records, key=lambda r: (r.conversation_id, r.turn))
    hallucination = [r.hallucination for r in ordered if r.hallucination is not None]
    drift = [r.drift for r in ordered if r.drift is not None and r.turn >= 2]
    memory = [float(r.memory_tokens) for r in ordered if r.memory_tokens is not None]
    final: dict[str, TurnRecord] = {}
    for record in ordered:
        final[record.conversation_id] = record
    finals = [float(r.memory_tokens) for r in final.values() if r.memory_tokens is not None]
    outcomes: dict[str, list[float]] = defaultdict(list)
    for record in ordered:
        for name, value in record.outcomes.items():
            outcomes[name].append(value)
    return AgentSummary(
        agent=agent,
        turns=len(ordered),
        conversations=len(final),
        hallucination_mean=_mean(hallucination),
        hallucination_std=_std(hallucination),
        drift_mean=_mean(drift),
        drift_std=_std(drift),
        memory_mean=_mean(memory),
        memory_final_mean=_mean(finals),
        outcome_means={name: _mean(outcomes.get(name, [])) for name in OUTCOME_METRICS},
        outcome_stds={name: _std(outcomes.get(name, [])) for name in OUTCOME_METRICS},
        hallucination_series=hallucination,
        drift_series=drift,
    )


def summarize_agents(records: Iterable[TurnRecord]) -> dict[str, AgentSummary]:
    """Several agents summarised independently of each other."""
    by_agent: dict[str, list[TurnRecord]] = defaultdict(list)
    for record in records:
        by_agent[record.agent].append(record)
    return {agent: summarize_agent(agent, rows) for agent, rows in sorted(by_agent.items())}
