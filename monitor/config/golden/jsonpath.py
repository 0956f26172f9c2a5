"""A small JSONPath subset for pulling values out of a service's JSON response.

Pure functions, no I/O. Syntax (``$`` and the leading dot are optional)::

    results[*].id              every ``id`` in the list ``results``
    $.data.hits[*]._source.doc_id
    choices[0].message.content one element by index (negative counts from the end)
    ['key.with.dots'][*]       a key that is not a plain name, in quotes
    answer

A plain name is ``[A-Za-z_][A-Za-z0-9_-]*``. ``[*]`` (or ``.*``) fans out over the elements of
a list (or the values of an object); a path with a fan-out returns a list, one value per
element, and every element must have the rest of the path. A step that does not match (a
missing key, an index out of range, a key looked up on a list) raises :class:`PathError`
naming the path and where it stopped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final


class PathError(ValueError):
    """The document does not have what the path asks for."""


class _Wildcard:
    def __repr__(self) -> str:
        return "*"


WILDCARD: Final = _Wildcard()

Step = str | int | _Wildcard

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_INDEX = re.compile(r"\[\s*(-?\d+)\s*\]")
_QUOTED = re.compile(r"""\[\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*\]""")
_STAR = re.compile(r"\[\s*\*\s*\]")


@dataclass(frozen=True)
class JsonPath:
    """A parsed path: ``text`` as written and its ``steps`` (key, index or wildcard)."""

    text: str
    steps: tuple[Step, ...]

    @property
    def fans_out(self) -> bool:
        """True when the path has a wildcard, so :func:`extract` returns a list."""
        return any(isinstance(step, _Wildcard) for step in self.steps)


def parse_path(text: str) -> JsonPath:
    """Parse ``text``; ``ValueError`` names the position of a syntax error."""
    source = text.strip()
    if not source:
        raise ValueError("empty path")
    pos = 0
    if source.startswith("$"):
        pos = 1
    steps: list[Step] = []
    expect_name = pos == 0  # a leading name needs no dot
    while pos < len(source):
        char = source[pos]
        if char == ".":
            pos += 1
            if source.startswith("*", pos):
                steps.append(WILDCARD)
                pos += 1
                continue
            match = _NAME.match(source, pos)
            if match is None:
                raise ValueError(f"expected a name after '.' at position {pos} in {text!r}")
            steps.append(match.group(0))
            pos = match.end()
        elif char == "[":
            if star := _STAR.match(source, pos):
                steps.append(WILDCARD)
                pos = star.end()
            elif index := _INDEX.match(source, pos):
                steps.append(int(index.group(1)))
                pos = index.end()
            elif quoted := _QUOTED.match(source, pos):
                raw = quoted.group(1) if quoted.group(1) is not None else quoted.group(2)
                steps.append(re.sub(r"\\(.)", r"\1", raw))
                pos = quoted.end()
            else:
                raise ValueError(f"bad bracket at position {pos} in {text!r}")
        elif expect_name and (match := _NAME.match(source, pos)):
            steps.append(match.group(0))
            pos = match.end()
        else:
            raise ValueError(f"unexpected {char!r} at position {pos} in {text!r}")
        expect_name = False
    if not steps:
        raise ValueError(f"path {text!r} selects the whole document")
    return JsonPath(text=text, steps=tuple(steps))


def _where(steps: tuple[Step, ...]) -> str:
    out = "$"
    for step in steps:
        if isinstance(step, str):
            out += f".{step}" if _NAME.fullmatch(step) else f"[{step!r}]"
        elif isinstance(step, int):
            out += f"[{step}]"
        else:
            out += "[*]"
    return out


def _walk(value: Any, steps: tuple[Step, ...], done: tuple[Step, ...], path: JsonPath) -> Any:
    if not steps:
        return value
    step, rest = steps[0], steps[1:]
    if isinstance(step, _Wildcard):
        if isinstance(value, list):
            return [_walk(item, rest, (*done, index), path) for index, item in enumerate(value)]
        if isinstance(value, dict):
            return [_walk(item, rest, (*done, key), path) for key, item in value.items()]
        raise PathError(
            f"path {path.text!r}: {_where(done)} is {type(value).__name__}, not a list or object"
        )
    if isinstance(step, int):
        if not isinstance(value, list):
            raise PathError(
                f"path {path.text!r}: {_where(done)} is {type(value).__name__}, not a list"
            )
        if not -len(value) <= step < len(value):
            raise PathError(
                f"path {path.text!r}: index {step} out of range at {_where(done)} "
                f"(length {len(value)})"
            )
        return _walk(value[step], rest, (*done, step), path)
    if not isinstance(value, dict):
        raise PathError(
            f"path {path.text!r}: {_where(done)} is {type(value).__name__}, not an object"
        )
    if step not in value:
        raise PathError(f"path {path.text!r}: no key {step!r} at {_where(done)}")
    return _walk(value[step], rest, (*done, step), path)


def extract(path: JsonPath | str, document: Any) -> Any:
    """The value at ``path`` in ``document`` (a list of values when the path fans out)."""
    parsed = parse_path(path) if isinstance(path, str) else path
    return _walk(document, parsed.steps, (), parsed)


__all__ = ["WILDCARD", "JsonPath", "PathError", "extract", "parse_path"]
