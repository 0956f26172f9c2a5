"""Lexical support of one statement by the retrieved contexts (used by the heuristic evaluator).

A statement is supported to the degree that its content tokens (stemmed English words, Japanese
character bigrams) occur in the contexts, weighted by how informative each token is in this trace
(IDF over the trace's own context sentences: a token found in few sentences weighs more, a token
found nowhere weighs most). Two views are blended:

- *local*: the best window of two adjacent sentences of one context (where the claim is stated),
- *global*: all contexts together (claims that combine facts from several places).

Numbers and names the statement states but no context (nor the question) contains are strong
evidence of invention and cut the support multiplicatively.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

import cachetools
import numpy as np

from monitor.evaluators.casing import lower
from monitor.evaluators.context_text import CACHE_CHARS, CACHE_MAX_CHARS, idf, read_context
from monitor.evaluators.polarity import YesNoFields, distinctive
from monitor.evaluators.text import (
    Entity,
    acronym_runs,
    content_tokens,
    extract_entities,
    normalize,
    number_keys,
    token_tuple,
)


@dataclass(frozen=True, slots=True)
class SupportParams:
    """Knobs of the support score; the defaults are the ones measured in bench/detect.py."""

    local_weight: float = 0.5  # share of the best-window recall (rest: all-context recall)
    window: int = 2  # sentences per local window
    pair_weight: float = 0.35  # share of the word-pair recall (word order, relations)
    pair_span: int = 1  # context words at most this far apart form a pair
    number_penalty: float = 0.3  # support multiplier per unsupported number (compounding)
    name_penalty: float = 0.3  # support multiplier per unsupported name (compounding)
    polarity_penalty: float = 0.3  # multiplier per yes/no field of a JSON context contradicted
    question_credit: float = 0.5  # a word found only in the question counts this much
    threshold: float = 0.35  # support >= threshold -> the statement is "supported"


@dataclass(slots=True, init=False)
class ContextIndex:
    """The trace's contexts, tokenised once.

    Its ``__init__`` is written out, as is the trace's copy (:meth:`for_trace`), rather than
    generated and made by :func:`dataclasses.replace`: mypyc compiles them."""

    ids: list[str]
    windows: list[tuple[int, frozenset[str]]]  # (context position, tokens of the window)
    context_tokens: list[frozenset[str]]
    all_tokens: frozenset[str]
    idf: dict[str, float]
    max_idf: float
    numbers: frozenset[str]
    text: str  # normalised, lowercased, all contexts joined (substring checks for CJK names)
    fields: YesNoFields
    pairs: frozenset[tuple[str, str]]
    acronyms: frozenset[str]
    question_tokens: frozenset[str]
    question_numbers: frozenset[str]
    question_text: str
    # token -> its windows, built when needed, in place: shared by every trace's copy
    _postings: dict[str, np.ndarray]

    def __init__(
        self,
        ids: list[str],
        windows: list[tuple[int, frozenset[str]]],
        context_tokens: list[frozenset[str]],
        all_tokens: frozenset[str],
        idf: dict[str, float],
        max_idf: float,
        numbers: frozenset[str],
        text: str,
        fields: YesNoFields | None = None,
        pairs: frozenset[tuple[str, str]] = frozenset(),
        acronyms: frozenset[str] = frozenset(),
        question_tokens: frozenset[str] = frozenset(),
        question_numbers: frozenset[str] = frozenset(),
        question_text: str = "",
        _postings: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.ids = ids
        self.windows = windows
        self.context_tokens = context_tokens
        self.all_tokens = all_tokens
        self.idf = idf
        self.max_idf = max_idf
        self.numbers = numbers
        self.text = text
        self.fields = YesNoFields() if fields is None else fields
        self.pairs = pairs
        self.acronyms = acronyms
        self.question_tokens = question_tokens
        self.question_numbers = question_numbers
        self.question_text = question_text
        self._postings = {} if _postings is None else _postings

    def postings(self) -> dict[str, np.ndarray]:
        if not self._postings:
            found: dict[str, list[int]] = defaultdict(list)
            for i, (_, tokens) in enumerate(self.windows):
                for token in tokens:
                    found[token].append(i)
            built = {t: np.asarray(ids, dtype=np.intp) for t, ids in found.items()}
            self._postings.update(built)  # one C call: another thread sees none or all of it
        return self._postings

    @classmethod
    def build(
        cls,
        contexts: list[tuple[str, str]],
        question: str = "",
        window: int = 2,
        pair_span: int = 0,
    ) -> ContextIndex:
        texts = tuple(text for _, text in contexts)
        if sum(map(len, texts)) > CACHE_MAX_CHARS:
            merged = _merge(texts, window, pair_span)
        else:
            merged = _merge_cached(texts, window, pair_span)
        return merged.for_trace([cid for cid, _ in contexts], *_read_question(question))

    def for_trace(
        self, ids: list[str], question_tokens: frozenset[str], numbers: frozenset[str], text: str
    ) -> ContextIndex:
        """A trace's copy of a merged index: its contexts' ids and its question's reading."""
        return ContextIndex(
            ids,
            self.windows,
            self.context_tokens,
            self.all_tokens,
            self.idf,
            self.max_idf,
            self.numbers,
            self.text,
            self.fields,
            self.pairs,
            self.acronyms,
            question_tokens,
            numbers,
            text,
            self._postings,
        )

    def weights(self, tokens: Iterable[str]) -> dict[str, float]:
        """Each token's damped IDF over the context sentences; a token found in no context
        weighs most."""
        idf_of, unseen = self.idf.get, self.max_idf
        return {t: math.sqrt(idf_of(t, unseen)) for t in tokens}

    def entity_supported(self, entity: Entity, also: dict[str, float] | None = None) -> bool:
        """Is the number/name written in some context (or in the question, or in `also`)?"""
        if entity.kind == "number":
            return entity.key in self.numbers or entity.key in self.question_numbers
        if entity.key.isascii():
            return all(
                part in self.all_tokens or part in self.question_tokens or (also and part in also)
                for part in entity.key.split()
            )
        return entity.key in self.text or entity.key in self.question_text


def _merge(texts: tuple[str, ...], window: int, pair_span: int) -> ContextIndex:
    """The index of contexts `texts`, without the trace's ids and question: their readings
    merged (the same for every trace that retrieves the same contexts)."""
    reads = [read_context(text, window, pair_span) for text in texts]
    sentence_sets = [sentence for read in reads for sentence in read.sentences]
    fields: dict[tuple[str, ...], set[bool | None]] = defaultdict(set)
    for read in reads:
        for key, value in read.fields:
            fields[key].add(value)
    n = len(sentence_sets)
    if len(reads) == 1:  # the usual trace of one chunk: its reading is the index's
        only = reads[0]
        weights, all_tokens, numbers = only.alone_idf, only.tokens, only.numbers
        pairs, acrs = only.pairs, only.acronyms
    else:
        df: Counter[str] = Counter()
        for sentence in sentence_sets:
            df.update(sentence)
        weights = idf(df, n)
        all_tokens = frozenset().union(*(read.tokens for read in reads))
        numbers = frozenset().union(*(read.numbers for read in reads))
        pairs = frozenset().union(*(read.pairs for read in reads))
        acrs = frozenset().union(*(read.acronyms for read in reads))
    return ContextIndex(
        ids=[],
        windows=[(pos, tokens) for pos, read in enumerate(reads) for tokens in read.windows],
        context_tokens=[read.tokens for read in reads],
        all_tokens=all_tokens,
        idf=weights,
        max_idf=math.log((n + 1) / 0.5),
        numbers=numbers,
        text="\n".join(read.lowered for read in reads),
        fields=YesNoFields.of(distinctive({k: frozenset(v) for k, v in fields.items()})),
        pairs=pairs,
        acronyms=acrs,
    )


# Traces that retrieve the same contexts (a popular question, several answers to one) share
# their merge; bounded by the characters of the contexts, as the readings are. Read-only once
# built (a trace's index is a copy with its own ids and question).
_MERGED: Final[cachetools.LRUCache[object, ContextIndex]] = cachetools.LRUCache(
    maxsize=CACHE_CHARS, getsizeof=lambda index: len(index.text) or 1
)
_merge_cached: Final = cachetools.cached(_MERGED, lock=threading.Lock())(_merge)


def _question(question: str) -> tuple[frozenset[str], frozenset[str], str]:
    """A question's tokens, numbers and normalised lowercased text, as a trace's index holds
    them."""
    return (
        frozenset(content_tokens(question)),
        frozenset(number_keys(question)),
        lower(normalize(question)),
    )


# Several answers are scored for one question (retries, several models, a popular question):
# its reading is kept, bounded by the characters of the questions, as the contexts' are.
QUESTION_CACHE_CHARS: Final = 100_000
_QUESTIONS: Final[cachetools.LRUCache[object, tuple[frozenset[str], frozenset[str], str]]] = (
    cachetools.LRUCache(maxsize=QUESTION_CACHE_CHARS, getsizeof=lambda read: len(read[2]) or 1)
)
_read_question: Final = cachetools.cached(_QUESTIONS, lock=threading.Lock())(_question)


@dataclass(slots=True, init=False, unsafe_hash=True)
class StatementSupport:
    """Never changed once made; its ``__init__`` written out for mypyc, as
    :class:`~monitor.evaluators.text.Entity`'s is."""

    support: float  # in [0, 1], after the penalties for invented numbers, names and conflicts
    local: float
    global_: float
    best_context: int | None  # position in the trace's contexts
    unsupported_entities: tuple[Entity, ...]
    n_tokens: int
    conflicts: tuple[str, ...]
    lexical: float  # the word overlap alone, before any penalty (a grounding feature)

    def __init__(
        self,
        support: float,
        local: float,
        global_: float,
        best_context: int | None,
        unsupported_entities: tuple[Entity, ...],
        n_tokens: int,
        conflicts: tuple[str, ...] = (),
        lexical: float = 1.0,
    ) -> None:
        self.support = support
        self.local = local
        self.global_ = global_
        self.best_context = best_context
        self.unsupported_entities = unsupported_entities
        self.n_tokens = n_tokens
        self.conflicts = conflicts
        self.lexical = lexical


def _recall(
    weights: dict[str, float], total: float, found: frozenset[str], partial: dict[str, float]
) -> float:
    return _credited(_credits(weights, partial), total, found)


Credits = list[tuple[str, float, float]]


def _credits(weights: dict[str, float], partial: dict[str, float]) -> Credits:
    """(token, weight, partial credit) of every token, in the statement's order: what a recall
    adds up, worked out once per statement rather than once per window."""
    return [(t, w, w * partial.get(t, 0.0)) for t, w in weights.items()]


def _credited(credits: Credits, total: float, found: frozenset[str]) -> float:
    got = 0.0
    for t, w, part in credits:  # summed in this order: the same float, bit for bit
        got += w if t in found else part
    return got / total


_SMALL_INDEX: Final = 64  # windows


def _best_window(
    index: ContextIndex,
    weights: dict[str, float],
    total: float,
    partial: dict[str, float],
    credits: Credits | None = None,
) -> tuple[float, int | None]:
    """The highest window recall and its context position (the first window that reaches it).

    A window's recall is the partial credit of every token plus the rest of the weight of the
    tokens it contains, so it is accumulated through the postings of the statement's tokens:
    the work grows with how often they occur, not with statements x windows x tokens.
    """
    if not index.windows:
        return 0.0, None
    if len(index.windows) <= _SMALL_INDEX:  # the usual trace: a plain loop beats numpy's setup
        best_local, best_ctx = 0.0, None
        if credits is None:
            credits = _credits(weights, partial)
        # a window shares no token with the statement: asked of the statement's tokens, a
        # method bound once (compiled, `win.isdisjoint` is looked up by name for every window)
        shares_none = frozenset(weights).isdisjoint
        # a window with none of the tokens gets the partial credits alone, added in the same
        # order as the loop below adds them: the same float, without the loop (about 40% of
        # the windows of the dev traces)
        none_found = 0.0
        for _, _, part in credits:
            none_found += part
        for pos, win in index.windows:
            if shares_none(win):
                r = none_found / total
            else:
                got = 0.0
                for t, w, part in credits:  # _credited, inlined: tier 0's hottest loop
                    got += w if t in win else part
                r = got / total
            if r > best_local:
                best_local, best_ctx = r, pos
        return best_local, best_ctx
    base = sum(w * partial.get(t, 0.0) for t, w in weights.items())
    gained = np.zeros(len(index.windows))
    postings = index.postings()
    for t, w in weights.items():
        ids = postings.get(t)
        if ids is not None:
            gained[ids] += w * (1.0 - partial.get(t, 0.0))
    best = int(np.argmax(gained))
    value = (base + float(gained[best])) / total
    if value <= 0.0:
        return 0.0, None
    return value, index.windows[best][0]


def score_statement(
    statement: str, index: ContextIndex, params: SupportParams | None = None
) -> StatementSupport:
    """How well the contexts support `statement`, in [0, 1], with the best evidence context."""
    p = params or SupportParams()
    toks = token_tuple(statement)  # content_tokens without the copy: only read here
    weights = index.weights(dict.fromkeys(toks))
    # partial credit: words of an acronym the contexts write ('FLSA'), words of the question
    partial: dict[str, float] = {}
    for acr, run in acronym_runs(normalize(statement)):
        if acr in index.acronyms:
            partial.update(dict.fromkeys(content_tokens(run), 1.0))
    for t in weights:
        if t not in partial and t in index.question_tokens:
            partial[t] = p.question_credit
    entities = tuple(
        e for e in extract_entities(statement) if not index.entity_supported(e, partial)
    )
    conflicts = index.fields.conflicts(statement) if index.fields else ()
    total = sum(weights.values())
    if total <= 0.0:
        return StatementSupport(1.0, 1.0, 1.0, None, entities, 0, conflicts)
    credits = _credits(weights, partial)  # once for the windows and all contexts
    best_local, best_ctx = _best_window(index, weights, total, partial, credits)
    glob = _credited(credits, total, index.all_tokens)
    support = p.local_weight * best_local + (1.0 - p.local_weight) * glob
    if p.pair_weight and index.pairs:
        st_pairs = {(a, b) if a <= b else (b, a) for a, b in pairwise(toks)}
        if st_pairs:
            pr = len(index.pairs.intersection(st_pairs)) / len(st_pairs)  # a count: exact
            support = (1.0 - p.pair_weight) * support + p.pair_weight * pr
    lexical = min(1.0, max(0.0, support))
    n_num = sum(1 for e in entities if e.kind == "number")
    support *= p.number_penalty**n_num * p.name_penalty ** (len(entities) - n_num)
    support *= p.polarity_penalty ** len(conflicts)
    return StatementSupport(
        support=min(1.0, max(0.0, support)),
        local=best_local,
        global_=glob,
        best_context=best_ctx,
        unsupported_entities=entities,
        n_tokens=len(weights),
        conflicts=conflicts,
        lexical=lexical,
    )


def chunk_recall(statement: str, index: ContextIndex) -> Callable[[int], float]:
    """Recall of the statement's content tokens in one context alone, by the context's position
    (chunk usefulness)."""
    toks = set(token_tuple(statement))
    if not toks:
        return lambda pos: 0.0
    weights = index.weights(toks)
    credits, total = _credits(weights, {}), sum(weights.values())
    return lambda pos: _credited(credits, total, index.context_tokens[pos])


__all__ = [
    "ContextIndex",
    "StatementSupport",
    "SupportParams",
    "chunk_recall",
    "score_statement",
]
