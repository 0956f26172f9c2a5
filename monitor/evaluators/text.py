"""Language-aware text primitives for the heuristic evaluator (English and Japanese).

Everything here is deterministic, pure Python and dependency-free:

- :func:`normalize` -- NFKC + camelCase/underscore splitting, the form every matcher works on.
- :func:`split_sentences` -- CJK-aware sentence splitting: the ideographic full stop and
  full-width/ASCII ``!?``, ``.`` with abbreviation, initial and decimal care, newlines and
  bullet/numbered lists.
- :func:`content_tokens` -- matching units: stemmed English content words (stopwords dropped) and,
  for text without spaces, character bigrams of kanji/katakana runs (single kanji kept as is).
- :func:`extract_entities` -- numbers/dates and names (capitalised words, katakana words), the
  things an answer must not invent.
"""

from __future__ import annotations

import operator
import re
import string
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from monitor.evaluators.casing import lower

# ---------------------------------------------------------------------------------------------
# Scripts

_HIRA: Final = "\u3041-\u309f"
_KATA: Final = "\u30a0-\u30ff\u31f0-\u31ff"
_KANJI: Final = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006\u3007"
_LATIN: Final = "A-Za-z\u00c0-\u024f"

_RE_LATIN_WORD: Final = re.compile(f"[{_LATIN}]+")
_RE_JAPANESE_CHAR: Final = re.compile(f"[{_HIRA}{_KATA}{_KANJI}]")
_RE_DIGIT: Final = re.compile(r"\d")

# ---------------------------------------------------------------------------------------------
# English word lists (small, hand-written)


def wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


STOPWORDS: Final[frozenset[str]] = wordset(
    """
    a about above across after afterwards again against all almost alone along already also
    although always am among amongst an and another any anyhow anyone anything anyway
    anywhere are around as at be became because become becomes becoming been before
    beforehand behind being below beside besides between beyond both but by can cannot could
    did do does doing done down due during each either else elsewhere enough especially etc
    even ever every everyone everything everywhere except few for former formerly from
    further furthermore had has have having he hence her here hereafter hereby herein hers
    herself him himself his how however i if in indeed into is it its itself just last
    latter latterly least less made make makes many may me meanwhile might mine more
    moreover most mostly much must my myself namely neither never nevertheless next nobody
    none noone nor not nothing now nowhere of off often on once one only onto or other
    others otherwise our ours ourselves out over own per perhaps please quite rather re
    really same seem seemed seeming seems several she should since so some somehow someone
    something sometime sometimes somewhere still such than that the their theirs them
    themselves then thence there thereafter thereby therefore therein thereupon these they
    this those though through throughout thru thus to together too toward towards under
    until up upon us very via was we well were what whatever when whence whenever where
    whereafter whereas whereby wherein whereupon wherever whether which while whither who
    whoever whole whom whose why will with within without would yet you your yours yourself
    yourselves additionally overall also including include includes included like various
    based provided passage passages according mentioned mention mentions context given
    information text answer question yes ok okay s t d ll m ve re
    """
)

NEGATIONS_EN: Final[frozenset[str]] = wordset(
    """
    not no never none nobody nothing neither nor without cannot can't don't doesn't didn't
    isn't aren't wasn't weren't won't wouldn't shouldn't couldn't hasn't haven't hadn't lack
    lacks
    """
)

_NUMBER_WORDS: Final[dict[str, str]] = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17",
    "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
    "hundred": "100", "thousand": "1000", "first": "1", "second": "2", "third": "3",
    "fourth": "4", "fifth": "5", "sixth": "6", "seventh": "7", "eighth": "8", "ninth": "9",
    "tenth": "10", "twice": "2", "once": "1", "half": "0.5", "dozen": "12",
}  # fmt: skip

_ABBREVIATIONS: Final[frozenset[str]] = wordset(
    """
    mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e eg ie inc ltd co corp no nos fig figs
    approx dept est gen gov sen rep rev vol pp al jan feb mar apr jun jul aug sep sept oct
    nov dec u.s u.k u.n a.m p.m ph.d op cf ca
    """
)


# ---------------------------------------------------------------------------------------------
# Normalisation


# A camelCase split goes before a capital that follows a lowercase letter ('camelCase') or that
# follows a capital and precedes a lowercase one ('HTTPServer'). The pattern opens with the
# capital, so the regex engine skips from capital to capital (a few per sentence) instead of
# trying the alternatives at every letter; the look-behinds are checked on those few.
_RE_CAMEL: Final = re.compile(r"[A-Z](?:(?<=[a-z][A-Z])|(?<=[A-Z]{2})(?=[a-z]))")
# Patterns below open with what they look for, not with a look-behind (which the regex engine
# would try at every position of a text): the digit before a separator or a suffix is matched
# and put back (r"\1"), the character before a number checked on the candidates.
_RE_THOUSANDS: Final = re.compile(r"(\d),(?=\d{3}(?!\d))")


def ascii_twin(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """`pattern` with ``[0-9]`` for ``\\d``: what it finds in ASCII text, where the two match
    the same characters, in about 60% of the time (``\\d`` asks the Unicode database about
    every character it tries). Only for a `\\d` outside a character class: inside one,
    ``[0-9]`` would make a nested set."""
    if _RE_DIGIT_IN_CLASS.search(pattern.pattern):
        raise ValueError(f"\\d inside a character class: {pattern.pattern!r}")
    return re.compile(pattern.pattern.replace(r"\d", "[0-9]"), pattern.flags)


_RE_DIGIT_IN_CLASS: Final = re.compile(r"\[(?:\\.|[^\]\\])*\\d")


_RE_ASCII_THOUSANDS: Final = ascii_twin(_RE_THOUSANDS)


def _first_group(m: re.Match[str]) -> str:
    """A substitution's replacement, r"\\1" as a function: a template is expanded by Python
    code in `re` for every match, a function compiled by mypyc is called directly."""
    return m.group(1)


def _without_thousands_separators(text: str) -> str:
    """'1,000' -> '1000'."""
    if "," not in text:
        return text
    separator = _RE_ASCII_THOUSANDS if text.isascii() else _RE_THOUSANDS
    if separator.search(text) is None:
        return text  # most texts with a comma: no substitution, which costs a call per match
    return separator.sub(_first_group, text)


@lru_cache(maxsize=1024)
def normalize(text: str) -> str:
    """NFKC (full-width to ASCII, half-width kana to full-width), split camelCase and `_`."""
    text = unicodedata.normalize("NFKC", text)
    text = split_camel_case(text)
    return text.replace("_", " ")


def split_camel_case(text: str) -> str:
    """'camelCase' -> 'camel Case', 'HTTPServer' -> 'HTTP Server'."""
    if _RE_CAMEL.search(text) is None:  # most texts: cheaper than a substitution's template
        return text
    return _RE_CAMEL.sub(_spaced_before, text)


def _spaced_before(m: re.Match[str]) -> str:
    """r" \\g<0>" as a function (see :func:`_first_group`)."""
    return " " + m.group(0)


_RE_ASCII_DIGIT: Final = ascii_twin(_RE_DIGIT)


def has_digit(text: str) -> bool:
    return (_RE_ASCII_DIGIT if text.isascii() else _RE_DIGIT).search(text) is not None


def has_japanese(text: str) -> bool:
    """Whether `text` has a kana or kanji character."""
    return not text.isascii() and _RE_JAPANESE_CHAR.search(text) is not None


# The characters that match an ASCII letter under re.IGNORECASE but not once lowercased.
_RE_CASE_EXCEPTIONS: Final = re.compile("[\u0130\u0131\u017f\u212a]")  # İ ı ſ K(elvin)


class CaselessPattern:
    """A pattern written in lowercase, searched case-insensitively.

    Searched on the lowercased text, not with re.IGNORECASE, which folds case at every step of
    the match: two to three times faster, with the same answer for every text. The only
    characters whose case rules differ (they match ASCII letters under re.IGNORECASE, or
    lowercase to something else) are dotted and dotless I, the long s and the Kelvin sign; a
    text with one of them is searched with re.IGNORECASE itself.

    `needs`: strings of which every match contains one; the lowercased text is searched only
    when it holds one of them (a few substring tests cost a fraction of trying every
    alternative of a long pattern at every position)."""

    def __init__(self, pattern: str, needs: tuple[str, ...] = ()) -> None:
        if pattern != lower(pattern) or any(n != lower(n) for n in needs):
            raise ValueError(f"a caseless pattern is written in lowercase: {pattern!r}")
        self._lowered = re.compile(pattern)
        self._ignorecase = re.compile(pattern, re.IGNORECASE)
        self._needs = needs

    def search(self, text: str) -> bool:
        if not text.isascii() and _RE_CASE_EXCEPTIONS.search(text) is not None:
            return self._ignorecase.search(text) is not None
        lowered = lower(text)
        if self._needs and not any(map(lowered.__contains__, self._needs)):
            return False
        return self._lowered.search(lowered) is not None


# ---------------------------------------------------------------------------------------------
# Sentence splitting

_RE_BULLET: Final = re.compile(
    r"^\s*(?:[-*+\u2022\u30fb\u25cf\u25cb\u25e6\u25aa\u25a0\u2013\u2014>]+|"
    r"\(?\d{1,3}[.)\uff0e\u3001]|\(?[a-zA-Z][.)](?=\s)|[\u2460-\u2473]|#{1,6})\s*"
)
_CLOSERS: Final = "\"'\u201d\u2019)\uff09\u300d\u300f\u3011\u3009\u300b]"
_CLOSERS_RE: Final = re.escape(_CLOSERS)
# Patterns that open with what they look for, not with a look-behind: the regex engine then
# skips ahead to the candidates instead of trying every position of a long context. What the
# look-behind checked is checked on the few candidates (_split_line).
_RE_CJK_END: Final = re.compile(f"(?:[\u3002\uff01\uff1f\uff0e]+|[!?]+)[{_CLOSERS_RE}]*")
_RE_LATIN_END: Final = re.compile(f"[.!?\u2026]+[{_CLOSERS_RE}]*(?=\\s|$)")
_RE_GLUED_END: Final = re.compile(r"[.!?](?=[A-Z][a-z])")
_RE_TWO_LOWER: Final = re.compile(r"[a-z]{2}")
_RE_ANY_END: Final = re.compile("[.!?\u2026\u3002\uff01\uff1f\uff0e]")  # in every end pattern above
# A line whose only sentence end closes it ('It rained.', 'Why?"'): every pattern above can cut
# it at its end alone, so it is one sentence (a statement re-split for its names, most lines).
_RE_FINAL_END: Final = re.compile(f"(?:\\.+|[!?]+|[\u3002\uff01\uff1f\uff0e]+)[{_CLOSERS_RE}]*")
_RE_NEXT_CHAR: Final = re.compile(r"\s*(\S?)")  # the next character that is not a space
_RE_HAS_WORD: Final = re.compile(r"[^\W_]")
_QUOTATIVE: Final = frozenset("とっな")


_RE_WORD_BEFORE_DOT: Final = re.compile(r"(?<![A-Za-z.])([A-Za-z][A-Za-z.]*)$")


def _is_abbreviation_before(text: str, dot: int) -> bool:
    """True when the '.' at `dot` ends an abbreviation or an initial ('J.'), not a sentence."""
    m = _RE_WORD_BEFORE_DOT.search(text, max(0, dot - 16), dot)
    if m is None:
        return False
    word = m.group(1)
    if len(word) == 1 and word.isupper():  # an initial: "J. Robert"
        return True
    if "." in word:  # "U.S.", "D.C.", "e.g."
        return True
    return lower(word).rstrip(".") in _ABBREVIATIONS


def _split_line(line: str) -> list[str]:
    end = _RE_ANY_END.search(line)
    if end is None or _RE_FINAL_END.fullmatch(line, end.start()):  # one piece
        return [line.strip()] if _RE_HAS_WORD.search(line) else []
    cuts: set[int] = set()
    # an ASCII line has no ideographic stop, and its '!' and '?' follow no Japanese
    for m in () if line.isascii() else _RE_CJK_END.finditer(line):
        begin = m.start()
        if line[begin] in "!?" and not (begin and _RE_JAPANESE_CHAR.match(line, begin - 1)):
            continue  # ASCII !? end a sentence only after Japanese text
        if m.group(0)[-1] in _CLOSERS and line[m.end() : m.end() + 1] in _QUOTATIVE:
            continue  # 「…。」と言った: the quote ends, the sentence goes on
        cuts.add(m.end())
    for m in _RE_LATIN_END.finditer(line):
        if m.group(0)[0] == ".":
            if m.group(0).rstrip(_CLOSERS) == "." and _is_abbreviation_before(line, m.start()):
                continue
            nxt = _RE_NEXT_CHAR.match(line, m.end())
            if nxt is not None and nxt.group(1).islower():
                continue  # "e.g. this", "approx. five": not a sentence end
        cuts.add(m.end())
    for m in _RE_GLUED_END.finditer(line):  # "...in 2010.The next year"
        if m.start() >= 2 and _RE_TWO_LOWER.match(line, m.start() - 2):
            cuts.add(m.end())
    pieces: list[str] = []
    start = 0
    for cut in sorted(cuts):
        if cut <= start:
            continue
        pieces.append(line[start:cut])
        start = cut
    pieces.append(line[start:])
    return [p.strip() for p in pieces if _RE_HAS_WORD.search(p)]


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences (statements), keeping each piece's original wording.

    Lines are split first (list items and paragraphs are separate statements), bullet and
    numbering markers are removed, then each line is split after the ideographic full stop and
    full-width ``!?`` (and ASCII ``!?`` after Japanese text), closing brackets/quotes kept with the
    sentence, and at ``.``/``!``/``?`` followed by a space, unless the ``.`` ends a known
    abbreviation, an acronym ('U.S.') or a single capital initial, or the next word is lowercase.
    Decimals (``3.14``) never split. Pieces with no letters or digits are dropped.
    """
    out: list[str] = []
    for raw in text.splitlines():
        line = _RE_BULLET.sub("", raw, count=1).strip()
        if not line:
            continue
        out.extend(_split_line(line))
    return out


# ---------------------------------------------------------------------------------------------
# Tokenisation

_RE_TOKEN: Final = re.compile(
    rf"([{_LATIN}]+(?:['\u2019][{_LATIN}]+)*)"  # a word
    r"|(\d+(?:\.\d+)?)"  # a number
    rf"|([{_KANJI}]+)"
    rf"|([{_KATA}]+)"
)


_SUFFIXES: Final[
    tuple[tuple[str, str, int], ...]
] = (  # (suffix, replacement, stem length at least)
    ("ational", "ate", 4),
    ("ization", "ize", 4),
    ("iveness", "ive", 4),
    ("fulness", "ful", 4),
    ("ousness", "ous", 4),
    ("ements", "", 4),
    ("ement", "", 4),
    ("ments", "", 4),
    ("ment", "", 4),
    ("ities", "", 4),
    ("ity", "", 4),
    ("ness", "", 4),
    ("ings", "", 3),
    ("ing", "", 3),
    ("ies", "y", 2),
    ("ied", "y", 2),
    ("edly", "", 3),
    ("ly", "", 4),
    ("ed", "", 3),
    ("ers", "", 3),
    ("er", "", 3),
    ("es", "", 3),
    ("s", "", 3),
)
# Only the suffixes that end with a word's last letter can match it: tried in the same order.
_SUFFIXES_BY_LAST_LETTER: Final = {
    last: tuple(rule for rule in _SUFFIXES if rule[0][-1] == last)
    for last in {suffix[-1] for suffix, _, _ in _SUFFIXES}
}


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light suffix stripper: consistent on both sides of a comparison, not linguistics."""
    w = word
    if w.endswith(("'s", "\u2019s")):
        w = w[:-2]
    if len(w) <= 3:
        return w
    for suffix, repl, min_len in _SUFFIXES_BY_LAST_LETTER.get(w[-1], ()):
        if w.endswith(suffix) and len(w) - len(suffix) >= min_len:
            if suffix != "s" or not w.endswith(("ss", "us", "is")):  # glass, status, analysis
                w = w[: len(w) - len(suffix)] + repl
            break
    if len(w) > 4 and w[-1] == "e":
        w = w[:-1]
    if len(w) > 4 and w[-1] == w[-2] and w[-1] not in "lsz":
        w = w[:-1]  # "stopp" -> "stop"
    return w


def normalize_number(raw: str) -> str:
    """'4.0' -> '4', '23.70' -> '23.7', '007' -> '7'."""
    if "." in raw:
        whole, frac = raw.split(".", 1)
        frac = frac.rstrip("0")
        whole = whole.lstrip("0") or "0"
        return f"{whole}.{frac}" if frac else whole
    return raw.lstrip("0") or "0"


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return list(map(operator.add, run[:-1], run[1:]))  # run[i : i + 2] for every i


def _word_token_of(word: str) -> str:
    """The matching unit of a Latin word or a number, or "" for a stopword or a single letter."""
    if word[0].isdigit():  # no Latin letter is a digit
        return normalize_number(word)
    low = lower(word)
    if low in STOPWORDS or (len(low) == 1 and low not in "0123456789"):
        return ""
    return _NUMBER_WORDS.get(low) or stem(low)


WORD_TOKENS_MAX = 65536


class _WordTokens(dict[str, str]):
    """word -> :func:`_word_token_of`, kept: a text's words are looked up by subscription, a C
    call that is about 40% cheaper than an lru_cache hit, for every word of every text
    tokenised. Bounded: emptied when it holds :data:`WORD_TOKENS_MAX` words."""

    def __missing__(self, word: str) -> str:
        if len(self) >= WORD_TOKENS_MAX:
            self.clear()
        token = self[word] = _word_token_of(word)
        return token


_WORD_TOKENS: Final = _WordTokens()
_word_token: Final = _WORD_TOKENS.__getitem__


# _RE_TOKEN's words and numbers alone: what it finds in text without kanji or katakana
_RE_WORD_OR_NUMBER: Final = re.compile(rf"[{_LATIN}]+(?:['\u2019][{_LATIN}]+)*|\d+(?:\.\d+)?")
_RE_KANJI_OR_KATAKANA: Final = re.compile(f"[{_KANJI}{_KATA}]")


def tokenize(text: str) -> tuple[str, ...]:
    """:func:`content_tokens`, uncached: for text read once (a context's sentences, whose
    reading is cached whole)."""
    return normalized_tokens(normalize(text))


def normalized_tokens(norm: str) -> tuple[str, ...]:
    """:func:`tokenize` of text already through :func:`normalize`."""
    norm = _without_thousands_separators(norm)
    if norm.isascii() or _RE_KANJI_OR_KATAKANA.search(norm) is None:
        # words and numbers, each looked up once; stopwords ("") dropped by filter in C
        return tuple(filter(None, map(_word_token, _RE_WORD_OR_NUMBER.findall(norm))))
    out: list[str] = []
    # one group per kind of run; hiragana runs, mostly particles, auxiliaries and okurigana,
    # are not content and match none
    for word, num, kanji, kata in _RE_TOKEN.findall(norm):
        if word:
            token = _word_token(word)
            if token:
                out.append(token)
        elif num:
            out.append(normalize_number(num))
        elif kanji:
            out.extend(_cjk_grams(kanji))
        else:
            kata = kata.strip("\u30fb")
            if len(kata) >= 2:
                out.extend(_cjk_grams(kata))
    return tuple(out)


# an answer's claims and the question are tokenised by several checks of the same trace
_content_tokens_cached: Final = lru_cache(maxsize=4096)(tokenize)
token_tuple: Final = _content_tokens_cached
""":func:`content_tokens` as a tuple, the cached one itself: for callers that only read it."""


def content_tokens(text: str) -> list[str]:
    """Content-bearing matching units of `text`, in order, with repeats.

    English: lowercased words, stopwords dropped, number words mapped to digits, light stemming.
    Japanese (no spaces): kanji runs as character bigrams (a single kanji stays a unigram),
    katakana runs of two or more characters as bigrams; hiragana runs are dropped. Numbers are
    normalised ('1,000' -> '1000', '4.0' -> '4').
    """
    return list(_content_tokens_cached(text))


# ---------------------------------------------------------------------------------------------
# Entities: numbers, dates and names


@dataclass(slots=True, init=False, unsafe_hash=True)
class Entity:
    """Something an answer must not invent: a number (dates included) or a name.

    Never changed once made. Not a frozen dataclass, whose generated ``__init__`` sets each
    field through ``object.__setattr__``: this one is written out, so that mypyc compiles it
    (about 30 ns a record compiled against 1 µs; twice as fast in pure Python too)."""

    kind: Literal["number", "name"]
    key: str  # normalised form used for matching
    surface: str  # as written

    def __init__(self, kind: Literal["number", "name"], key: str, surface: str) -> None:
        self.kind = kind
        self.key = key
        self.surface = surface


# A number no letter, digit or '.' is glued to ("A380", "v2.1": no number starts there): the
# look-behind follows the first digit, so the regex engine skips from digit to digit.
_RE_NUMBER: Final = re.compile(
    r"(\d(?<![A-Za-z0-9.]\d)\d*(?:[.:]\d+)?)(?:\s*([ap])\.?m\.?(?![a-z]))?", re.I
)
_RE_ORDINAL_SUFFIX: Final = re.compile(r"(\d)(?:st|nd|rd|th|s)\b")
_RE_CAP_WORD: Final = re.compile(rf"[A-Z][{_LATIN}'\u2019\-]*")
_NOT_NAMES: Final = frozenset(["am", "pm", "a.m", "p.m", "ok"])
_RE_KATA_WORD: Final = re.compile(f"[{_KATA}]{{3,}}")


def _number_keys(num: str, ampm: str | None) -> list[str]:
    if ":" in num or ampm:
        hour_s, _, minute_s = num.partition(":")
        if "." in hour_s or "." in minute_s:
            return [normalize_number(num.replace(":", "."))]
        hour, minute = int(hour_s), int(minute_s or "0")
        if ampm and lower(ampm) == "p" and hour < 12:
            hour += 12
        elif ampm and lower(ampm) == "a" and hour == 12:
            hour = 0
        return [f"{hour}:{minute:02d}"]
    return [normalize_number(num)]


_RE_ASCII_NUMBER: Final = ascii_twin(_RE_NUMBER)
_RE_ASCII_ORDINAL_SUFFIX: Final = ascii_twin(_RE_ORDINAL_SUFFIX)


def _numbers_written(text: str) -> Iterator[re.Match[str]]:
    """The numbers of `text` that no letter, digit or '.' is glued to, left to right."""
    return (_RE_ASCII_NUMBER if text.isascii() else _RE_NUMBER).finditer(text)


def _text_numbers(text: str) -> list[tuple[str, str]]:
    """(key, surface) for every number in `text` (normalised text expected)."""
    if not has_digit(text):
        return []
    text = _without_thousands_separators(text)
    ordinal = _RE_ASCII_ORDINAL_SUFFIX if text.isascii() else _RE_ORDINAL_SUFFIX
    if ordinal.search(text) is not None:  # "21st": rare; searching is cheaper
        text = ordinal.sub(_first_group, text)
    out: list[tuple[str, str]] = []
    for m in _numbers_written(text):
        for key in _number_keys(m.group(1), m.group(2)):
            out.append((key, m.group(0)))
    return out


def number_keys(text: str) -> set[str]:
    """Every number written in `text`, normalised, number words ('eight') included."""
    return normalized_number_keys(normalize(text))


def ascii_runs_table(kept: str) -> bytes:
    """A `bytes.translate` table keeping the ASCII characters `kept`, every other byte made a
    space (for :func:`ascii_runs`)."""
    keep = frozenset(kept.encode("ascii"))
    return bytes(b if b in keep else 0x20 for b in range(256))


def ascii_runs(text: str, table: bytes) -> list[str]:
    """The runs of the characters `table` keeps in ASCII `text`: one C translation, then a
    split, instead of a regex's findall (a quarter to half of its time)."""
    return text.encode("ascii").translate(table).decode().split()


_ASCII_LOWER_LETTERS: Final = ascii_runs_table(string.ascii_lowercase)


def lowercase_words(norm: str) -> set[str]:
    """The distinct Latin words of `norm`, lowercased (number words are looked up among them).

    ASCII text: the runs of a-z of the lowercased text, by one byte translation and a split
    (about a quarter of the time of a regex's findall on a context); any other: every run of
    Latin letters, lowercased in one call (no word holds a space, and lowercasing makes none).
    """
    if norm.isascii():
        return set(ascii_runs(lower(norm), _ASCII_LOWER_LETTERS))
    return set(lower(" ".join(set(_RE_LATIN_WORD.findall(norm)))).split(" "))


def normalized_number_keys(norm: str) -> set[str]:
    """:func:`number_keys` of text already through :func:`normalize`."""
    keys = {k for k, _ in _text_numbers(norm)}
    # looked up among the number words in one intersection
    keys.update(_NUMBER_WORDS[w] for w in lowercase_words(norm) & _NUMBER_WORDS.keys())
    # "17:00" in a context also states the hour "17"
    keys |= {k.split(":", 1)[0] for k in keys if ":" in k}
    return keys


def extract_entities(text: str) -> list[Entity]:
    """Numbers (times and years included) and names written in `text`, in order, deduplicated.

    Names are capitalised Latin words that are not sentence-initial function/discourse words
    (e.g. 'However') and katakana words of three or more characters. Number words are not
    entities here (they are too often idiomatic: 'one of', 'second'), but they count when checking
    whether a context states a number (see :func:`number_keys`).
    """
    norm = normalize(text)
    seen: set[tuple[str, str]] = set()
    out: list[Entity] = []
    # (kind, key, surface) of each, in order: deduplicated at the end, in one loop (compiled by
    # mypyc, a nested function that adds to `seen` and `out` is an object of its own, each of
    # its calls a call through it)
    found: list[tuple[Literal["number", "name"], str, str]] = [
        ("number", key, surface.strip()) for key, surface in _text_numbers(norm)
    ]
    for sentence in split_sentences(norm):
        for m in _RE_CAP_WORD.finditer(sentence):
            word = m.group(0).strip("-'\u2019")
            name = _name_key(word)
            if name is None:
                continue
            if (
                word.isalpha()
                and _sentence_initial(sentence, m.start())
                and _RE_NAME_FOLLOWS.match(sentence, m.start() + len(word)) is None
            ):
                continue  # probably just the first word of the sentence, not a name
            found.append(("name", name, word))
        if sentence.isascii():  # no katakana
            continue
        for m in _RE_KATA_WORD.finditer(sentence):
            word = m.group(0).strip("\u30fc\u30fb")
            if len(word) >= 3:
                found.append(("name", word, word))
    for kind, key, surface in found:
        if (kind, key) not in seen:
            seen.add((kind, key))
            out.append(Entity(kind, key, surface))
    return out


@lru_cache(maxsize=16384)
def _name_key(word: str) -> str | None:
    """The matching key of a capitalised word ('Gigi' -> 'gigi', "O'Neill's" -> 'o neil'), or
    None for a word that names nothing: a stopword, a number word, 'AM'."""
    low = lower(word)
    if low.endswith(("'s", "\u2019s")):
        low = low[:-2]
    if len(low) < 2 or low in STOPWORDS or low in _NUMBER_WORDS or low in _NOT_NAMES:
        return None
    parts = [stem(x) for x in _RE_NAME_JOINS.split(low) if len(x) >= 2]
    return " ".join(parts) if parts else None


def _sentence_initial(sentence: str, start: int) -> bool:
    """Whether the word at `start` opens the sentence, or follows a ':' or a quote."""
    before = start - 1
    while before >= 0 and sentence[before].isspace():
        before -= 1
    return start == 0 or (before >= 0 and sentence[before] in ':"')


# A sentence-initial capitalised word counts as a name when another capitalised word follows it
# directly ('Gigi Lee').
_RE_NAME_FOLLOWS: Final = re.compile(r"\s+[A-Z][a-z]")
_RE_NAME_JOINS: Final = re.compile(r"[-'\u2019]")

_NAME_WORD: Final = rf"[A-Z][{_LATIN}'\u2019]*"
_RE_NAME_RUN: Final = re.compile(
    rf"{_NAME_WORD}(?:[ \t]+(?:(?:of|and|for|the|on|in|&)[ \t]+)?{_NAME_WORD})+"
)
# r"\b[A-Z][A-Z&]{1,7}s?\b", opening with the capital: the regex engine skips from capital to
# capital instead of trying the word boundary at every position (four times faster on a context)
_RE_ACRONYM: Final = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z&]{1,7}s?\b")


def acronyms(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(acronym, member tokens) for runs of capitalised words: 'Bureau of Labor Statistics' ->
    ('bls', ('bureau', 'labor', 'statist')). Lets 'BLS' and its expansion support each other."""
    return [(acr, tuple(content_tokens(run))) for acr, run in acronym_runs(normalize(text))]


def acronym_runs(norm: str) -> list[tuple[str, str]]:
    """(acronym, the run as written) of text already through :func:`normalize`: what
    :func:`acronyms` finds, its runs tokenised only where an acronym is wanted (most are not)."""
    out: list[tuple[str, str]] = []
    for m in _RE_NAME_RUN.finditer(norm):
        run = m.group(0)
        initials = [w[0] for w in run.split() if w[0].isupper()]
        if len(initials) >= 2:
            out.append((lower("".join(initials)), run))
    return out


def written_acronyms(text: str) -> set[str]:
    """All-capital words as written ('FLSA', 'BLS'), lowercased."""
    return {lower(m.group(0).rstrip("s")) for m in _RE_ACRONYM.finditer(text)}
