"""Rank-weighted context precision, the one formula tier 0 and the LLM judge share."""

from __future__ import annotations

from collections.abc import Sequence


def average_precision(useful: Sequence[bool]) -> float:
    """Mean of precision@k over the positions k of the useful chunks (rank order); 0 when no
    chunk is useful."""
    hits, total = 0, 0.0
    for k, u in enumerate(useful, start=1):
        if u:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0
