"""Tier 0's answer-level grounding score: a small learned combination of lexical evidence.

The heuristic evaluator measures, for each claim of an answer, how much of it the contexts
state (:mod:`monitor.evaluators.support`), and which numbers and names it writes that no context
states. This module turns that evidence into one score per answer, ``support``: the estimated
probability that the answer is grounded -- that none of its claims is a hallucination.

The evidence, per answer (:data:`FEATURES`):

- ``lexical_lower_quartile`` and ``lexical_min``: the lower quartile and the minimum of the
  claims' word overlap with the contexts (no penalties applied);
- ``invented_numbers`` and ``invented_names``: log(1 + count) of numbers and names written in
  the answer and in no context nor the question;
- ``token_overlap``: the share of the answer's distinct plain tokens (words; characters for
  Japanese) found in the contexts -- a coarse, whole-answer view that does not depend on how
  sentences are split.

They are weighed by a logistic regression per language (English, Japanese) whose coefficients
ship beside this module as ``grounding_model.json``. ``bench/train_tier0.py`` fits them on the
labelled development data only; ``bench/detect.py`` refits them inside every fold of its grouped
cross-validation, so the figures it prints were never shaped by the items they are measured on.
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

from monitor.evaluators.casing import lower
from monitor.evaluators.text import ascii_runs, ascii_runs_table

FEATURES: Final[tuple[str, ...]] = (
    "lexical_lower_quartile",
    "lexical_min",
    "invented_numbers",
    "invented_names",
    "token_overlap",
)
MODEL_LANGUAGES: Final[tuple[str, ...]] = ("en", "ja")
DEFAULT_MODEL_PATH: Final = Path(__file__).with_name("grounding_model.json")


def lower_quartile(values: Sequence[float]) -> float:
    """25th percentile with linear interpolation (numpy's default): the level that three quarters
    of the values reach. A robust minimum: one weak statement pulls it down, as it should, but
    one mis-split fragment in a long answer does not decide alone."""
    v = sorted(values)
    pos = 0.25 * (len(v) - 1)
    lo = int(pos)
    if lo + 1 >= len(v):
        return v[lo]
    return v[lo] + (pos - lo) * (v[lo + 1] - v[lo])


_RE_PLAIN: Final = re.compile(r"[^\W_]+")
# What _RE_PLAIN finds in lowercased ASCII text (where \w is [a-z0-9_]): its runs of [a-z0-9]
_ASCII_PLAIN: Final = ascii_runs_table(string.ascii_lowercase + string.digits)
_RE_CJK_CHAR: Final = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


@lru_cache(maxsize=4096)  # recurring chunks (popular documents) are split once
def plain_tokens(text: str) -> frozenset[str]:
    """Lowercased words, and single characters of text written without spaces (Japanese):
    no stemming, no stopwords -- the naive view of what an answer says."""
    lowered = lower(unicodedata.normalize("NFKC", text))
    if lowered.isascii():  # the same tokens, by a pattern without a Unicode category
        return frozenset(ascii_runs(lowered, _ASCII_PLAIN))
    if _RE_CJK_CHAR.search(lowered) is None:  # no token to break into characters
        return frozenset(_RE_PLAIN.findall(lowered))
    out: set[str] = set()
    for tok in set(_RE_PLAIN.findall(lowered)):
        if not tok.isascii() and _RE_CJK_CHAR.search(tok):
            out.update(tok)
        else:
            out.add(tok)
    return frozenset(out)


def token_overlap(answer: str, contexts: Iterable[str]) -> float:
    """Share of the answer's distinct plain tokens that occur in some context (1.0 when the
    answer has none). Also the naive baseline bench/detect.py compares tier 0 with."""
    missing = set(plain_tokens(answer))
    if not missing:
        return 1.0
    said = len(missing)
    for text in contexts:
        missing -= plain_tokens(text)
        if not missing:
            break
    return 1.0 - len(missing) / said


def answer_features(
    lexical: Sequence[float],
    invented_numbers: int,
    invented_names: int,
    overlap: float,
) -> dict[str, float]:
    """The grounding evidence of one answer from its claims' lexical support (at least one)."""
    return {
        "lexical_lower_quartile": lower_quartile(lexical),
        "lexical_min": min(lexical),
        "invented_numbers": math.log1p(invented_numbers),
        "invented_names": math.log1p(invented_names),
        "token_overlap": overlap,
    }


@dataclass(frozen=True, slots=True)
class LanguageModel:
    """Logistic regression on standardised features: z = (x - mean) / scale."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]  # per standardised feature; positive = more likely hallucinated
    intercept: float

    def hallucination_logit(self, x: Sequence[float]) -> float:
        z = self.intercept
        for value, mu, sd, w in zip(x, self.mean, self.scale, self.coef, strict=True):
            z += w * (value - mu) / sd
        return z


@dataclass(frozen=True, slots=True)
class GroundingModel:
    features: tuple[str, ...]
    languages: Mapping[str, LanguageModel]

    def support(self, language: str, features: Mapping[str, float]) -> float:
        """Estimated probability that the answer is grounded, in [0, 1]. Languages without a
        model of their own use the English one."""
        model = self.languages.get(language) or self.languages["en"]
        logit = model.hallucination_logit([features[name] for name in self.features])
        return 1.0 / (1.0 + math.exp(min(logit, 700.0)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroundingModel:
        features = tuple(str(f) for f in data["features"])
        if features != FEATURES:
            raise ValueError(f"grounding model features {features} are not {FEATURES}")
        languages: dict[str, LanguageModel] = {}
        for lang, spec in data["languages"].items():
            model = LanguageModel(
                mean=tuple(float(v) for v in spec["mean"]),
                scale=tuple(float(v) for v in spec["scale"]),
                coef=tuple(float(v) for v in spec["coef"]),
                intercept=float(spec["intercept"]),
            )
            if not len(model.mean) == len(model.scale) == len(model.coef) == len(features):
                raise ValueError(f"grounding model for {lang!r}: one value per feature expected")
            if any(sd <= 0 for sd in model.scale):
                raise ValueError(f"grounding model for {lang!r}: scales must be positive")
            languages[str(lang)] = model
        if "en" not in languages:
            raise ValueError("grounding model needs an 'en' model (the fallback)")
        return cls(features=features, languages=languages)


@lru_cache(maxsize=4)
def load_model(path: Path = DEFAULT_MODEL_PATH) -> GroundingModel:
    """The shipped coefficients (read once)."""
    return GroundingModel.from_dict(json.loads(path.read_text(encoding="utf-8")))


__all__ = [
    "DEFAULT_MODEL_PATH",
    "FEATURES",
    "MODEL_LANGUAGES",
    "GroundingModel",
    "LanguageModel",
    "answer_features",
    "load_model",
    "lower_quartile",
    "plain_tokens",
    "token_overlap",
]
