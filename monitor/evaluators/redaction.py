"""Redaction of personal data and secrets before any text leaves the process.

:class:`Redactor` finds, in this order, and replaces every match with one placeholder
(``[REDACTED]`` by default; overlapping or adjacent matches merge into one placeholder):

- API keys and tokens: ``sk-...`` (OpenAI style, including ``sk-proj-``), ``Bearer <token>``,
  AWS access key ids (``AKIA``/``ASIA`` + 16), GitHub (``ghp_`` ...) and Slack (``xox?-``)
  tokens, JWTs, and long hex/base64 values after a secret-looking key (``api_key=``,
  ``token:``, ``password=`` ...; only the value is replaced, the key stays readable);
- e-mail addresses;
- payment card numbers: 13-19 digits, optionally grouped by spaces or hyphens, that pass the
  Luhn check (so most long numbers -- order ids, timestamps -- are kept);
- Japanese My Number (個人番号): 12 digits, optionally ``4-4-4`` grouped, whose last digit is the
  check digit of the first eleven; a 12-digit number failing the check is kept;
- phone numbers: international ``+CC ...`` (8-15 digits in all), Japanese domestic formats
  (``03-1234-5678``, ``090-1234-5678``, ``0120-123-456``, ``(03)1234-5678``, unseparated
  ``09012345678``; 10 or 11 digits starting with 0) and North American ``(555) 123-4567``;
- the configured extra patterns.

Full-width digits, letters and punctuation (``０９０－１２３４－５６７８``,
``ｆｏｏ＠ｅｘａｍｐｌｅ．ｊｐ``) are matched as their ASCII forms; the fold is one character
for one character, so offsets into the original text stay valid and everything around a match
is left exactly as it was.

Deterministic: the same text always gives the same output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from monitor.config.judge import RedactionConfig

# One-for-one fold of full-width and typographic variants to ASCII, so patterns need one form.
_FOLD: dict[int, int] = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}  # full-width ASCII
_FOLD.update(
    {
        0x3000: 0x20,  # ideographic space
        0x2010: 0x2D,  # hyphen
        0x2011: 0x2D,  # non-breaking hyphen
        0x2012: 0x2D,  # figure dash
        0x2013: 0x2D,  # en dash
        0x2014: 0x2D,  # em dash
        0x2015: 0x2D,  # horizontal bar
        0x2212: 0x2D,  # minus sign
        0x30FC: 0x2D,  # katakana prolonged sound mark, often typed for a hyphen in numbers
        0xFF70: 0x2D,  # half-width prolonged sound mark
    }
)


# str.translate looks every character up in the dict (about 80 ns each for Japanese text, most of
# it a missed lookup); substituting only the runs that fold is four times faster.
_FOLDABLE_RUN = re.compile("[" + "".join(re.escape(chr(cp)) for cp in sorted(_FOLD)) + "]+")


def _fold_run(match: re.Match[str]) -> str:
    return match.group(0).translate(_FOLD)


def fold(text: str) -> str:
    """`text` with full-width forms folded to ASCII, same length, same offsets."""
    return _FOLDABLE_RUN.sub(_fold_run, text)


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check used by payment card numbers."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def my_number_ok(digits: str) -> bool:
    """Whether 12 digits form a valid Japanese individual number (check digit of the first 11).

    Check digit = 11 - (sum of P_n * Q_n for n = 1..11) mod 11, 0 when that remainder is 0 or 1;
    P_n is the n-th digit counted from the right of the first eleven, Q_n = n + 1 for n <= 6
    and n - 5 for n >= 7.
    """
    if len(digits) != 12 or not digits.isdigit():
        return False
    body = digits[:11]
    total = 0
    for n in range(1, 12):
        p = ord(body[11 - n]) - 48
        q = n + 1 if n <= 6 else n - 5
        total += p * q
    remainder = total % 11
    check = 0 if remainder <= 1 else 11 - remainder
    return check == ord(digits[11]) - 48


def _digits(text: str) -> str:
    return "".join(ch for ch in text if "0" <= ch <= "9")


_Validator = Callable[[str], bool]

_SECRET_KEY = (
    r"(?:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret(?:[_-]?access)?[_-]?key|"
    r"client[_-]?secret|secret|token|access[_-]?token|refresh[_-]?token|auth[_-]?token|"
    r"password|passwd|pwd|private[_-]?key|subscription[_-]?key|x-api-key)"
)


@dataclass(frozen=True)
class _Detector:
    """One pattern, and what a text must contain for the pattern to have any chance.

    The gate is a cheap necessary condition (a literal every match contains, a number of digits
    every match has), so the regular expression only runs on text that might match; most
    answers contain no ``@``, no ``sk-`` and fewer than ten digits.
    """

    name: str
    pattern: re.Pattern[str]
    group: int  # the part of the match that is replaced
    validator: _Validator | None = None
    literals: tuple[str, ...] = ()  # one of these occurs in every match
    caseless: bool = False  # the literals are looked for in the case-folded text
    min_digits: int = 0  # every match has at least this many digits (\d)


class _Probe:
    """What the gates look at, computed once per text (the case-folded form only if asked)."""

    __slots__ = ("_caseless", "digits", "folded")

    def __init__(self, folded: str, digits: int) -> None:
        self.folded = folded
        self.digits = digits
        self._caseless: str | None = None

    @property
    def caseless(self) -> str:
        if self._caseless is None:
            self._caseless = self.folded.casefold()
        return self._caseless

    def admits(self, detector: _Detector) -> bool:
        if self.digits < detector.min_digits:
            return False
        if not detector.literals:
            return True
        haystack = self.caseless if detector.caseless else self.folded
        return any(literal in haystack for literal in detector.literals)


_DETECTORS: list[_Detector] = [
    _Detector(
        "key_value_secret",
        re.compile(
            rf"(?i)(?<![A-Za-z0-9]){_SECRET_KEY}[\"']?\s*(?:[:=]|=>)\s*[\"']?"
            r"([A-Za-z0-9+/_\-.=~]{16,})"
        ),
        group=1,
        literals=("key", "secret", "token", "passw", "pwd"),
        caseless=True,
    ),
    _Detector(
        "bearer",
        re.compile(r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{12,}=*)"),
        group=1,
        literals=("bearer",),
        caseless=True,
    ),
    _Detector(
        "openai_key",
        re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}"),
        group=0,
        literals=("sk-",),
    ),
    _Detector(
        "aws_key_id",
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"),
        group=0,
        literals=("AKIA", "ASIA"),
    ),
    _Detector(
        "github_token",
        re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}"),
        group=0,
        literals=("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    _Detector(
        "slack_token",
        re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9\-]{10,}"),
        group=0,
        literals=("xox",),
    ),
    _Detector(
        "jwt",
        re.compile(
            r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+"
        ),
        group=0,
        literals=("eyJ",),
    ),
    _Detector(
        "email",
        re.compile(
            r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
            r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}(?![A-Za-z])"
        ),
        group=0,
        literals=("@",),
    ),
    _Detector(
        "phone_international",
        re.compile(r"(?<![\w+])\+\d{1,3}(?:[ \-.]?\(?\d{1,5}\)?){2,6}(?![\d])"),
        group=0,
        validator=lambda s: 8 <= len(_digits(s)) <= 15,
        literals=("+",),
        min_digits=8,
    ),
    _Detector(
        "phone_jp",
        re.compile(
            r"(?<![\d\-])(?:"
            r"0\d{1,4}[ \-]\d{1,4}[ \-]\d{3,4}"  # 03-1234-5678, 090-1234-5678, 0120-123-456
            r"|\(0\d{1,4}\)\s?\d{1,4}[ \-]?\d{3,4}"  # (03)1234-5678
            r"|0\d{1,4}\(\d{1,4}\)\d{3,4}"  # 03(1234)5678
            r"|0[5789]0\d{8}"  # 09012345678
            r"|0[1-9]\d{8}"  # 0312345678
            r")(?![\d]|-\d)"
        ),
        group=0,
        validator=lambda s: len(_digits(s)) in (10, 11),
        min_digits=10,
    ),
    _Detector(
        "phone_nanp",
        re.compile(r"(?<![\d\-])\(\d{3}\)\s?\d{3}[\-.]\d{4}(?![\d])"),
        group=0,
        literals=("(",),
        min_digits=10,
    ),
]


_RUN = re.compile(r"\d+(?:[ \-]\d+)*")
_GROUP = re.compile(r"\d+")


def _card_window(groups: list[str]) -> bool:
    digits = "".join(groups)
    if not 13 <= len(digits) <= 19:
        return False
    if len(groups) > 1 and (len(groups[0]) != 4 or any(not 3 <= len(g) <= 6 for g in groups)):
        return False
    return luhn_ok(digits)


def _my_number_window(groups: list[str]) -> bool:
    if [len(g) for g in groups] not in ([12], [4, 4, 4]):
        return False
    return my_number_ok("".join(groups))


def _continues(groups: list[tuple[int, int, str]], seps: list[str], i: int, k: int) -> bool:
    """Whether group `k` (next to a window starting at `i`) continues it: a 4-digit group joined
    by the window's separator and not bound on its far side to a group by another separator."""
    if not 0 <= k < len(groups) or len(groups[k][2]) != 4:
        return False
    sep = seps[i]
    if k < i:
        return seps[k] == sep and (k == 0 or seps[k - 1] == sep)
    return seps[k - 1] == sep and (k == len(groups) - 1 or seps[k] == sep)


def _number_spans(folded: str) -> list[tuple[int, int]]:
    """Card numbers and My Numbers: windows of digit groups (one separator kind per window)
    inside each run of digits separated by single spaces or hyphens. A grouped window that a
    4-digit group continues with the same separator is part of a longer number and skipped."""
    spans: list[tuple[int, int]] = []
    for run in _RUN.finditer(folded):
        base = run.start()
        groups = [(g.start() + base, g.end() + base, g.group(0)) for g in _GROUP.finditer(run[0])]
        seps = [folded[groups[k][1]] for k in range(len(groups) - 1)]
        for i in range(len(groups)):
            total = 0
            for j in range(i, len(groups)):
                if j > i + 1 and seps[j - 1] != seps[i]:
                    break
                total += len(groups[j][2])
                if total > 19:
                    break
                window = [g[2] for g in groups[i : j + 1]]
                if j > i and (
                    _continues(groups, seps, i, i - 1) or _continues(groups, seps, i, j + 1)
                ):
                    continue  # part of a longer chain of 4-digit groups: some other number
                if _card_window(window) or _my_number_window(window):
                    spans.append((groups[i][0], groups[j][1]))
    return spans


_NUMBER_MIN_DIGITS = 12  # a My Number has 12 digits, a card number 13 or more
_ANY_DIGIT = re.compile(r"\d")


def _probe(text: str) -> _Probe:
    if text.isascii():  # nothing to fold, and str.count finds every digit \d would
        return _Probe(text, sum(map(text.count, "0123456789")))
    folded = fold(text)
    return _Probe(folded, len(_ANY_DIGIT.findall(folded)))


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


class Redactor:
    """Replaces personal data and secrets in text (see the module documentation)."""

    def __init__(self, config: RedactionConfig | None = None) -> None:
        self.config = config if config is not None else RedactionConfig()
        self._extra = [re.compile(p) for p in self.config.patterns]

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The merged character ranges of `text` that `redact` replaces."""
        if not text:
            return []
        probe = _probe(text)
        found = _number_spans(probe.folded) if probe.digits >= _NUMBER_MIN_DIGITS else []
        for detector in _DETECTORS:
            if not probe.admits(detector):
                continue
            for m in detector.pattern.finditer(probe.folded):
                if detector.validator is not None and not detector.validator(m.group(0)):
                    continue
                start, end = m.span(detector.group)
                if end > start:
                    found.append((start, end))
        for pattern in self._extra:
            for m in pattern.finditer(text):
                if m.end() > m.start():
                    found.append(m.span())
        return _merge(found)

    def redact(self, text: str) -> str:
        """`text` with every detected item replaced by the placeholder (unchanged when off)."""
        if not self.config.enabled or not text:
            return text
        spans = self.spans(text)
        if not spans:
            return text
        out: list[str] = []
        pos = 0
        for start, end in spans:
            out.append(text[pos:start])
            out.append(self.config.replacement)
            pos = end
        out.append(text[pos:])
        return "".join(out)
