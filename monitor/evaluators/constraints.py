"""Deterministic checks of machine-checkable constraints (those with a `kind`).

`violated` means the answer breaks a rule (a forbidden term, too long, wrong language or
format); `omitted` means it leaves out something required (a required term). A constraint
without a kind, or with a value that cannot be checked, is `unmeasured`, never satisfied.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from monitor.evaluators.casing import lower
from monitor.evaluators.language import UNKNOWN, identify, primary
from monitor.evaluators.text import split_sentences
from monitor.models import Constraint, ConstraintVerdict

_BULLET: Final = re.compile(r"^\s*(?:[-*•・]|\d+[.)\uff0e])\s+", re.MULTILINE)
_NUMBERED: Final = re.compile(r"^\s*\d+[.)\uff0e]\s+", re.MULTILINE)
_TABLE_ROW: Final = re.compile(r"^\s*\|.*\|\s*$", re.MULTILINE)


def _terms(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _verdict(constraint: Constraint, status: str, reason: str | None = None) -> ConstraintVerdict:
    return ConstraintVerdict(constraint_id=constraint.id, status=status, reason=reason)  # type: ignore[arg-type]


def check_constraint(constraint: Constraint, answer: str) -> ConstraintVerdict:
    kind, value = constraint.kind, constraint.value
    if kind is None:
        return _verdict(constraint, "unmeasured", "free-text constraint needs the LLM judge")
    if kind == "language":
        if not isinstance(value, str) or not value:
            return _verdict(constraint, "unmeasured", "language constraint needs a language code")
        found = identify(answer)
        if found == UNKNOWN:
            return _verdict(constraint, "unmeasured", "answer language could not be detected")
        wanted = primary(value)
        if found != wanted:
            return _verdict(constraint, "violated", f"answer is {found}, expected {wanted}")
        return _verdict(constraint, "satisfied")
    if kind in ("max_chars", "max_sentences"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return _verdict(constraint, "unmeasured", f"{kind} needs a non-negative integer")
        size = len(answer.strip()) if kind == "max_chars" else len(split_sentences(answer))
        if size > value:
            return _verdict(constraint, "violated", f"{size} > {value} ({kind})")
        return _verdict(constraint, "satisfied")
    if kind in ("forbidden_terms", "required_terms"):
        terms = _terms(value)
        if not terms:
            return _verdict(constraint, "unmeasured", f"{kind} needs a term or a list of terms")
        folded = answer.casefold()
        present = [t for t in terms if t.casefold() in folded]
        if kind == "forbidden_terms" and present:
            return _verdict(constraint, "violated", f"contains {present[0]!r}")
        missing = [t for t in terms if t not in present]
        if kind == "required_terms" and missing:
            return _verdict(constraint, "omitted", f"does not mention {missing[0]!r}")
        return _verdict(constraint, "satisfied")
    if kind == "format":
        return _check_format(constraint, answer)
    return _verdict(constraint, "unmeasured", f"unknown kind {kind!r}")


def _check_format(constraint: Constraint, answer: str) -> ConstraintVerdict:
    fmt = lower(str(constraint.value or ""))
    if fmt == "json":
        try:
            json.loads(answer)
        except ValueError:
            return _verdict(constraint, "violated", "answer is not valid JSON")
        return _verdict(constraint, "satisfied")
    checks = {"bullets": _BULLET, "numbered": _NUMBERED, "markdown_table": _TABLE_ROW}
    pattern = checks.get(fmt)
    if pattern is None:
        return _verdict(constraint, "unmeasured", f"unknown format {fmt!r}")
    if not pattern.search(answer):
        return _verdict(constraint, "violated", f"answer is not formatted as {fmt}")
    return _verdict(constraint, "satisfied")
