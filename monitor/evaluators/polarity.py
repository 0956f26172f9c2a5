"""Yes/no fields of structured (JSON) contexts, and statements that contradict them.

A context written as data ("OutdoorSeating": false, "WiFi": "no") states facts an answer can
contradict with words the context contains: "The cafe offers outdoor seating." Tier 0 reads the
fields once per context (:func:`yes_no_fields`, merged per trace by :func:`distinctive`) and
checks each claim against them (:meth:`YesNoFields.conflicts`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from monitor.evaluators.casing import lower
from monitor.evaluators.text import NEGATIONS_EN, STOPWORDS, normalize, stem, wordset

Fields = Mapping[tuple[str, ...], frozenset[bool | None]]
"""Key words of a field -> the values the contexts give it."""

_RE_YES_NO_FIELD: Final = re.compile(
    r'"([A-Za-z][A-Za-z ]*)"\s*:\s*(true|false|null|"(?:yes|no)")', re.IGNORECASE
)
_CONTRAST: Final = wordset("but however while although though whereas yet except")


_RE_WORD: Final = re.compile(r"[a-z]+")
_RE_WORD_OR_SEMICOLON: Final = re.compile(r"[a-z]+(?:'[a-z]+)?|;")


def _field_words(text: str) -> list[str]:
    """Stemmed words of a field name or statement, stopwords kept ('TakeOut' -> take, out)."""
    return [stem(w) for w in _RE_WORD.findall(lower(normalize(text)))]


def yes_no_fields(text: str) -> list[tuple[tuple[str, ...], bool | None]]:
    """(key words, value) for every true/false/null (or "yes"/"no"/"none") field in `text`."""
    out: list[tuple[tuple[str, ...], bool | None]] = []
    for m in _RE_YES_NO_FIELD.finditer(text):
        key = tuple(dict.fromkeys(_field_words(m.group(1))))
        raw = lower(m.group(2).strip('"'))
        value: bool | None = None if raw == "null" else raw in ("true", "yes")
        if key:
            out.append((key, value))
    return out


def distinctive(
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


_PASSIVE: Final = wordset(
    """
    available offered provided specified mentioned included allowed permitted accepted
    listed stated known present given supported required
    """
)


def _negated_words(statement: str, starts: frozenset[str] | None = None) -> dict[str, bool]:
    """Stemmed word -> whether every mention of it in `statement` is under a negation.

    A negation cue ('no', 'not', 'without', "doesn't"...) covers the words after it up to a
    contrast word ('but', 'while', ...) or ';'. A negated passive predicate ('is not available',
    'were not specified') also covers the words before it, back to the previous contrast word.
    Adjacent words are also indexed joined ('take-out' -> 'takeout').

    `starts`: the first two letters of every stem that will be looked up; only words and
    joined pairs opening with one of them are stemmed and indexed. :func:`stem` keeps a word's
    first two letters (the first alone of a one-letter word with "'s"), so no other word's stem
    can be one of those looked up.
    """
    words = _RE_WORD_OR_SEMICOLON.findall(lower(normalize(statement)))
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
    last = len(words) - 1
    for i, w in enumerate(words):
        n = neg[i]
        if starts is None or (w[:2] if w[1:2] != "'" else w[:1]) in starts:
            t = stem(w)
            out[t] = out.get(t, True) and n
        if i < last:
            pair = w + words[i + 1]
            if starts is None or pair[:2] in starts:  # most pairs: no stem, no cache miss
                joined = stem(pair)
                out[joined] = out.get(joined, True) and n
    return out


Probe = tuple[tuple[str, ...], str]
"""Key words of a field as a statement may write them, and the same words joined, stemmed."""


def _probes(key: tuple[str, ...]) -> tuple[Probe, ...]:
    """The whole key, then its last two words ('RestaurantsTakeOut' -> 'take out'), each written
    apart or joined ('takeout')."""
    return tuple(
        (part, stem("".join(part))) for part in ((key, key[-2:]) if len(key) > 2 else (key,))
    )


@dataclass(frozen=True, slots=True)
class YesNoFields:
    """A trace's yes/no fields (:func:`distinctive`), ready to check every claim against: what
    each field is looked for as is worked out once (:meth:`of`), not once per claim."""

    fields: tuple[tuple[str, frozenset[bool | None], tuple[Probe, ...]], ...] = ()
    # the first two letters of every word and joined form the probes look up: a statement's
    # words, and adjacent words joined, are stemmed only when they open one of them
    starts: frozenset[str] = frozenset()
    # the first word and the joined form of every probe -> the fields probed for by it: a
    # field none of whose probes has these in a statement is not mentioned there
    by_key: Mapping[str, tuple[int, ...]] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, fields: Fields) -> YesNoFields:
        checked = tuple((" ".join(key), values, _probes(key)) for key, values in fields.items())
        looked_up = {
            key for _, _, probes in checked for part, joined in probes for key in (*part, joined)
        }
        by_key: dict[str, list[int]] = {}
        for pos, (_, _, probes) in enumerate(checked):
            for part, joined in probes:
                for key in (part[0], joined):
                    if pos not in by_key.setdefault(key, []):
                        by_key[key].append(pos)
        return cls(
            checked,
            frozenset(key[:2] for key in looked_up),
            {key: tuple(found) for key, found in by_key.items()},
        )

    def __bool__(self) -> bool:
        return bool(self.fields)

    def conflicts(self, statement: str) -> tuple[str, ...]:
        """Fields the statement contradicts: affirms a false/null field or denies a true one."""
        mentions = _negated_words(statement, self.starts)
        candidates = {
            pos for key in self.by_key.keys() & mentions.keys() for pos in self.by_key[key]
        }
        out: list[str] = []
        for pos in sorted(candidates):  # in the fields' order, as every field was checked
            name, values, probes = self.fields[pos]
            negated = _mention(probes, mentions)
            if negated is None:
                continue
            if (negated and True in values) or (not negated and values <= {False, None}):
                out.append(name)
        return tuple(out)


def _mention(probes: tuple[Probe, ...], mentions: dict[str, bool]) -> bool | None:
    """Whether the statement mentions the field probed for by `probes` negated (True), affirmed
    (False) or not at all (None)."""
    for part, joined in probes:
        if all(map(mentions.__contains__, part)):
            return all(mentions[t] for t in part)
        if joined in mentions:
            return mentions[joined]
    return None


__all__ = ["Fields", "YesNoFields", "distinctive", "yes_no_fields"]
