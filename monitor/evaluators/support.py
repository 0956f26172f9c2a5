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
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from monitor.evaluators.text import (
    NEGATIONS_EN,
    STOPWORDS,
    Entity,
    acronyms,
    content_tokens,
    extract_entities,
    normalize,
    number_keys,
    split_sentences,
    stem,
    wordset,
    written_acronyms,
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


@dataclass(slots=True)
class ContextIndex:
    """The trace's contexts, tokenised once."""

    ids: list[str]
    windows: list[tuple[int, frozenset[str]]]  # (context position, tokens of the window)
    context_tokens: list[frozenset[str]]
    all_tokens: frozenset[str]
    idf: dict[str, float]
    max_idf: float
    numbers: frozenset[str]
    text: str  # normalised, lowercased, all contexts joined (substring checks for CJK names)
    fields: dict[tuple[str, ...], frozenset[bool | None]] = field(default_factory=dict)
    pairs: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    acronyms: frozenset[str] = field(default_factory=frozenset)
    question_tokens: frozenset[str] = field(default_factory=frozenset)
    question_numbers: frozenset[str] = field(default_factory=frozenset)
    question_text: str = ""
    _postings: dict[str, np.ndarray] | None = None  # token -> its windows, built when needed

    def postings(self) -> dict[str, np.ndarray]:
        if self._postings is None:
            found: dict[str, list[int]] = defaultdict(list)
            for i, (_, tokens) in enumerate(self.windows):
                for token in tokens:
                    found[token].append(i)
            self._postings = {t: np.asarray(ids, dtype=np.intp) for t, ids in found.items()}
        return self._postings

    @classmethod
    def build(
        cls,
        contexts: list[tuple[str, str]],
        question: str = "",
        window: int = 2,
        pair_span: int = 0,
    ) -> ContextIndex:
        ids: list[str] = []
        windows: list[tuple[int, frozenset[str]]] = []
        context_tokens: list[frozenset[str]] = []
        sentence_sets: list[frozenset[str]] = []
        numbers: set[str] = set()
        texts: list[str] = []
        fields: dict[tuple[str, ...], set[bool | None]] = defaultdict(set)
        pairs: set[tuple[str, str]] = set()
        acrs: set[str] = set()
        for pos, (cid, text) in enumerate(contexts):
            ids.append(cid)
            seqs = [content_tokens(s) for s in split_sentences(text)]
            if pair_span:
                for seq in seqs:
                    for i, a in enumerate(seq):
                        for b in seq[i + 1 : i + 1 + pair_span]:
                            pairs.add((a, b) if a <= b else (b, a))
            sents = [frozenset(seq) for seq in seqs]
            sents = [s for s in sents if s] or [frozenset()]
            sentence_sets.extend(sents)
            for i in range(max(1, len(sents) - window + 1)):
                windows.append((pos, frozenset().union(*sents[i : i + window])))
            derived = {a for a, _ in acronyms(text)}
            context_tokens.append(frozenset().union(*sents, derived))
            numbers |= number_keys(text)
            texts.append(normalize(text).lower())
            acrs |= written_acronyms(text) | derived
            for key, value in yes_no_fields(text):
                fields[key].add(value)
        df: Counter[str] = Counter()
        for s in sentence_sets:
            df.update(s)
        n = len(sentence_sets)
        idf = {t: math.log((n + 1) / (c + 0.5)) for t, c in df.items()}
        max_idf = math.log((n + 1) / 0.5)
        q_norm = normalize(question).lower()
        return cls(
            ids=ids,
            windows=windows,
            context_tokens=context_tokens,
            all_tokens=frozenset().union(*context_tokens) if context_tokens else frozenset(),
            idf=idf,
            max_idf=max_idf,
            numbers=frozenset(numbers),
            text="\n".join(texts),
            fields=_distinctive({k: frozenset(v) for k, v in fields.items()}),
            pairs=frozenset(pairs),
            acronyms=frozenset(acrs),
            question_tokens=frozenset(content_tokens(question)),
            question_numbers=frozenset(number_keys(question)),
            question_text=q_norm,
        )

    def weight(self, token: str) -> float:
        """Damped IDF over the context sentences; a token found in no context weighs most."""
        return math.sqrt(self.idf.get(token, self.max_idf))

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


@dataclass(frozen=True, slots=True)
class StatementSupport:
    support: float  # in [0, 1], after the penalties for invented numbers, names and conflicts
    local: float
    global_: float
    best_context: int | None  # position in the trace's contexts
    unsupported_entities: tuple[Entity, ...]
    n_tokens: int
    conflicts: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # content tokens found in no context
    lexical: float = 1.0  # the word overlap alone, before any penalty (a grounding feature)


def _recall(
    weights: dict[str, float], total: float, found: frozenset[str], partial: dict[str, float]
) -> float:
    got = 0.0
    for t, w in weights.items():
        if t in found:
            got += w
        else:
            got += w * partial.get(t, 0.0)
    return got / total


_SMALL_INDEX = 64  # windows


def _best_window(
    index: ContextIndex, weights: dict[str, float], total: float, partial: dict[str, float]
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
        for pos, win in index.windows:
            r = _recall(weights, total, win, partial)
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
    toks = content_tokens(statement)
    weights = {t: index.weight(t) for t in dict.fromkeys(toks)}
    # partial credit: words of an acronym the contexts write ('FLSA'), words of the question
    partial: dict[str, float] = {}
    for acr, members in acronyms(statement):
        if acr in index.acronyms:
            partial.update(dict.fromkeys(members, 1.0))
    for t in weights:
        if t not in partial and t in index.question_tokens:
            partial[t] = p.question_credit
    entities = tuple(
        e for e in extract_entities(statement) if not index.entity_supported(e, partial)
    )
    conflicts = polarity_conflicts(statement, index) if index.fields else ()
    total = sum(weights.values())
    if total <= 0.0:
        return StatementSupport(1.0, 1.0, 1.0, None, entities, 0, conflicts)
    best_local, best_ctx = _best_window(index, weights, total, partial)
    glob = _recall(weights, total, index.all_tokens, partial)
    support = p.local_weight * best_local + (1.0 - p.local_weight) * glob
    if p.pair_weight and index.pairs:
        st_pairs = {(a, b) if a <= b else (b, a) for a, b in pairwise(toks)}
        if st_pairs:
            pr = sum(1 for q in st_pairs if q in index.pairs) / len(st_pairs)
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
        missing=tuple(t for t in weights if t not in index.all_tokens and t not in partial),
        lexical=lexical,
    )


# ---------------------------------------------------------------------------------------------
# Yes/no fields of structured (JSON) contexts: "OutdoorSeating": false, "WiFi": "no"

_RE_YES_NO_FIELD = re.compile(
    r'"([A-Za-z][A-Za-z ]*)"\s*:\s*(true|false|null|"(?:yes|no)")', re.IGNORECASE
)
_CONTRAST = wordset("but however while although though whereas yet except")


def _field_words(text: str) -> list[str]:
    """Stemmed words of a field name or statement, stopwords kept ('TakeOut' -> take, out)."""
    return [stem(w) for w in re.findall(r"[a-z]+", normalize(text).lower())]


def yes_no_fields(text: str) -> list[tuple[tuple[str, ...], bool | None]]:
    """(key words, value) for every true/false/null (or "yes"/"no"/"none") field in `text`."""
    out: list[tuple[tuple[str, ...], bool | None]] = []
    for m in _RE_YES_NO_FIELD.finditer(text):
        key = tuple(dict.fromkeys(_field_words(m.group(1))))
        raw = m.group(2).strip('"').lower()
        value: bool | None = None if raw == "null" else raw in ("true", "yes")
        if key:
            out.append((key, value))
    return out


def _distinctive(
    fields: dict[tuple[str, ...], frozenset[bool | None]],
) -> dict[tuple[str, ...], frozenset[bool | None]]:
    """Drop key words shared by several fields ("Restaurants" in RestaurantsTakeOut, ...)."""
    seen: Counter[str] = Counter(t for key in fields for t in key)
    out: dict[tuple[str, ...], frozenset[bool | None]] = {}
    for key, values in fields.items():
        kept = tuple(t for t in key if seen[t] == 1)
        if kept and any(t not in STOPWORDS for t in kept):
            out[kept] = out.get(kept, frozenset()) | values
    return out


_PASSIVE = wordset(
    """
    available offered provided specified mentioned included allowed permitted accepted
    listed stated known present given supported required
    """
)


def _negated_words(statement: str) -> dict[str, bool]:
    """Stemmed word -> whether every mention of it in `statement` is under a negation.

    A negation cue ('no', 'not', 'without', "doesn't"...) covers the words after it up to a
    contrast word ('but', 'while', ...) or ';'. A negated passive predicate ('is not available',
    'were not specified') also covers the words before it, back to the previous contrast word.
    Adjacent words are also indexed joined ('take-out' -> 'takeout').
    """
    words = re.findall(r"[a-z]+(?:'[a-z]+)?|;", normalize(statement).lower())
    neg = [False] * len(words)
    forward = False
    scope_start = 0
    for i, w in enumerate(words):
        if w == ";" or w in _CONTRAST:
            forward = False
            scope_start = i + 1
            continue
        if w in NEGATIONS_EN or w.endswith("n't"):
            forward = True
            if any(x in _PASSIVE for x in words[i + 1 : i + 3]):
                for j in range(scope_start, i):
                    neg[j] = True
        neg[i] = neg[i] or forward
    out: dict[str, bool] = {}
    stems = [stem(w) for w in words]
    for i, (t, n) in enumerate(zip(stems, neg, strict=True)):
        out[t] = out.get(t, True) and n
        if i + 1 < len(stems):
            joined = stem(words[i] + words[i + 1])
            out[joined] = out.get(joined, True) and n
    return out


def polarity_conflicts(statement: str, index: ContextIndex) -> tuple[str, ...]:
    """Yes/no fields the statement contradicts: affirms a false/null field or denies a true one."""
    mentions = _negated_words(statement)
    out: list[str] = []
    for key, values in index.fields.items():
        negated = _mention(key, mentions)
        if negated is None:
            continue
        if (negated and True in values) or (not negated and values <= {False, None}):
            out.append(" ".join(key))
    return tuple(out)


def _mention(key: tuple[str, ...], mentions: dict[str, bool]) -> bool | None:
    """Whether the statement mentions the field `key` negated (True), affirmed (False) or not at
    all (None). The whole key, or its last two words ('RestaurantsTakeOut' -> 'take out'), written
    apart or joined ('takeout')."""
    for part in (key, key[-2:]) if len(key) > 2 else (key,):
        if all(t in mentions for t in part):
            return all(mentions[t] for t in part)
        joined = stem("".join(part))
        if joined in mentions:
            return mentions[joined]
    return None


def context_supports(statement: str, index: ContextIndex, pos: int) -> float:
    """Recall of the statement's content tokens in context `pos` alone (chunk usefulness)."""
    toks = set(content_tokens(statement))
    if not toks:
        return 0.0
    weights = {t: index.weight(t) for t in toks}
    return _recall(weights, sum(weights.values()), index.context_tokens[pos], {})


__all__ = [
    "ContextIndex",
    "StatementSupport",
    "SupportParams",
    "context_supports",
    "polarity_conflicts",
    "score_statement",
    "yes_no_fields",
]
