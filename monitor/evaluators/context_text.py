"""What tier 0 reads from one retrieved context, read once and shared by every trace that
retrieves it.

A popular document is retrieved again and again: its sentences, tokens, numbers, acronyms and
yes/no fields do not change between the traces that carry it, and reading them is about half of
tier 0's work on a trace. :func:`read_context` reads a context once (normalised once for all of
them) and keeps the reading in a cache bounded by the characters of the texts it holds
(:data:`CACHE_CHARS`; a reading takes about 46 bytes per character, so about 23 MB when full),
least recently used dropped first; :class:`monitor.evaluators.support.ContextIndex` merges the
readings of a trace's contexts.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

import cachetools

from monitor.evaluators.casing import lower
from monitor.evaluators.polarity import yes_no_fields
from monitor.evaluators.text import (
    acronym_runs,
    normalize,
    normalized_number_keys,
    normalized_tokens,
    split_sentences,
    tokenize,
    written_acronyms,
)

CACHE_CHARS: Final = 500_000
"""Characters of context text whose readings are kept (about 450 contexts of 1.1 KB)."""
CACHE_MAX_CHARS: Final = 20_000
"""Longer contexts are read on every trace: they are rarely shared, and one would push out
dozens of others."""

Field = tuple[tuple[str, ...], bool | None]


@dataclass(frozen=True, slots=True)
class ContextText:
    """One context's reading.

    `sentences` are the token sets of its sentences that have tokens (one empty set when none
    has); `windows` the unions of `window` adjacent ones; `tokens` every token, with the
    acronyms its capitalised names derive ('Bureau of Labor Statistics' -> 'bls'); `pairs` the
    token pairs at most `pair_span` apart within a sentence; `lowered` the normalised text,
    lowercased (substring checks for names written without spaces)."""

    sentences: tuple[frozenset[str], ...]
    windows: tuple[frozenset[str], ...]
    tokens: frozenset[str]
    pairs: frozenset[tuple[str, str]]
    numbers: frozenset[str]
    lowered: str
    acronyms: frozenset[str]
    fields: tuple[Field, ...]
    alone_idf: dict[str, float]  # the IDF of its tokens when it is a trace's only context


def read_context(text: str, window: int, pair_span: int) -> ContextText:
    """`text`'s reading, from the cache when it was read before."""
    if len(text) > CACHE_MAX_CHARS:
        return _read(text, window, pair_span)
    return _read_cached(text, window, pair_span)


def _read(text: str, window: int, pair_span: int) -> ContextText:
    norm = normalize(text)
    # ASCII text that normalising leaves as it is: so are its sentences (no camelCase, no '_'
    # in any of them), which are tokenised as they are
    tokens_of = normalized_tokens if text.isascii() and norm == text else tokenize
    seqs = [tokens_of(s) for s in split_sentences(text)]
    pairs: set[tuple[str, str]] = set()
    if pair_span == 1:  # the default: neighbours
        for seq in seqs:
            pairs.update([(a, b) if a <= b else (b, a) for a, b in pairwise(seq)])
    elif pair_span:
        for seq in seqs:
            for i, a in enumerate(seq):
                for b in seq[i + 1 : i + 1 + pair_span]:
                    pairs.add((a, b) if a <= b else (b, a))
    sents = [s for s in map(frozenset, seqs) if s] or [frozenset()]
    windows = tuple(
        frozenset().union(*sents[i : i + window]) for i in range(max(1, len(sents) - window + 1))
    )
    derived = {a for a, _ in acronym_runs(norm)}
    df: Counter[str] = Counter()
    for tokens in sents:
        df.update(tokens)
    return ContextText(
        sentences=tuple(sents),
        windows=windows,
        tokens=frozenset().union(*sents, derived),
        pairs=frozenset(pairs),
        numbers=frozenset(normalized_number_keys(norm)),
        lowered=lower(norm),
        acronyms=frozenset(written_acronyms(text) | derived),
        fields=tuple(yes_no_fields(text)),
        alone_idf=idf(df, len(sents)),
    )


def idf(df: Mapping[str, int], sentences: int) -> dict[str, float]:
    """IDF over `sentences` sentences of every token, from the count of sentences it is in."""
    return {t: math.log((sentences + 1) / (c + 0.5)) for t, c in df.items()}


_CACHE: Final[cachetools.LRUCache[object, ContextText]] = cachetools.LRUCache(
    maxsize=CACHE_CHARS, getsizeof=lambda read: len(read.lowered) or 1
)
_read_cached: Final = cachetools.cached(_CACHE, lock=threading.Lock())(_read)  # big traces: threads


__all__ = ["CACHE_CHARS", "CACHE_MAX_CHARS", "ContextText", "read_context"]
