"""Near-identical answers listed once: a bad answer copied by many traces (a canary, a cached
reply) takes one entry with a count instead of the whole page."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from monitor.review.items import MAX_SIMILAR_IDS, ReviewItem, Similar

# Near-identical: character 3-gram Jaccard at least this.
SIMILARITY = 0.9
_WHITESPACE = re.compile(r"\s+")


def _normalized(text: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _shingles(text: str) -> frozenset[str]:
    if len(text) < 3:
        return frozenset({text})
    return frozenset(text[i : i + 3] for i in range(len(text) - 2))


@dataclass
class _Group:
    first: int  # index of its worst answer in the worst-first scan
    shingles: frozenset[str]
    members: list[int] = field(default_factory=list)


def group_similar(answers: Sequence[str | None], evaluators: Sequence[str]) -> list[list[int]]:
    """Indices of `answers` (worst first) grouped by near-identical text, per evaluator.

    Two answers are near-identical when their normalised texts (NFKC, case-folded, whitespace
    collapsed) share at least SIMILARITY of their character 3-grams (Jaccard); each answer
    joins the first group it is that close to. Groups come in the order of their worst member;
    an answer not stored forms a group of its own.
    """
    groups: list[_Group] = []
    exact: dict[tuple[str, str], _Group] = {}
    for index, (answer, evaluator) in enumerate(zip(answers, evaluators, strict=True)):
        if answer is None:
            groups.append(_Group(index, frozenset(), [index]))
            continue
        text = _normalized(answer)
        group = exact.get((evaluator, text))
        if group is None:
            shingles = _shingles(text)
            size = len(shingles)
            for candidate in groups:
                other = len(candidate.shingles)
                # Jaccard <= min/max of the set sizes: most candidates need no intersection.
                if (
                    not other
                    or min(size, other) < SIMILARITY * max(size, other)
                    or answers[candidate.first] is None
                    or evaluators[candidate.first] != evaluator
                ):
                    continue
                common = len(shingles & candidate.shingles)
                if common >= SIMILARITY * (size + other - common):
                    group = candidate
                    break
            if group is None:
                group = _Group(index, shingles)
                groups.append(group)
            exact[(evaluator, text)] = group
        group.members.append(index)
    return [g.members for g in groups]


def folded(items: Sequence[ReviewItem], members: list[int]) -> ReviewItem:
    """The group's worst item, standing for the other `members` (indices into `items`)."""
    head = items[members[0]]
    if len(members) == 1:
        return head
    values = [v for i in members if (v := items[i].score.value) is not None]
    similar = Similar(
        count=len(members),
        trace_ids=[items[i].trace_id for i in members[1 : 1 + MAX_SIMILAR_IDS]],
        agents=sorted({items[i].agent for i in members}),
        score_min=min(values),
        score_max=max(values),
    )
    return replace(head, similar=similar)
