"""Reading the values instrumentations put in span attributes: text, numbers, JSON strings,
flattened `prefix.N.*` groups and framework envelopes. Shared by the OTLP mapping modules."""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Mapping
from typing import Any

_INDEXED = re.compile(r"(\d{1,9})\.(.+)$")  # what follows `prefix.`: `N.rest`
_DOT_BEFORE_DIGIT = re.compile(r"\.(?=\d)")


def text_or_none(value: Any) -> str | None:
    """The value if it is a string with something besides whitespace."""
    return value if isinstance(value, str) and value.strip() else None


def maybe_json(value: Any) -> Any:
    """Parse a string that looks like JSON; return anything else (or unparsable text) as is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "[", '"'):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def non_negative_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def jsonable(value: Any, depth: int = 0) -> Any:
    """A copy fit for JSON (bytes become base64); bounded depth."""
    if depth > 32:
        return None
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, float) and (value != value or abs(value) == float("inf")):
        return None
    return value


def indexed_groups(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Group `prefix.N.rest` attributes into one dict of `rest -> value` per N, in N order."""
    groups: dict[int, dict[str, Any]] = {}
    dotted = prefix + "."
    start = len(dotted)
    for key, value in attributes.items():
        if key.startswith(dotted):
            match = _INDEXED.match(key, start)
            if match:
                groups.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [groups[i] for i in sorted(groups)]


def attribute_index(attributes: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """`indexed_groups` of every prefix at once, in one pass over the attributes: prefix ->
    its groups in N order (a key `a.0.b.1.c` is in the groups of both `a` and `a.0.b`)."""
    index: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in attributes.items():
        for prefix, n, rest in _key_groups(key):
            # get before set: setdefault would build two throwaway dicts for every key
            groups = index.get(prefix)
            if groups is None:
                groups = index[prefix] = {}
            group = groups.get(n)
            if group is None:
                group = groups[n] = {}
            group[rest] = value
    return {prefix: [groups[i] for i in sorted(groups)] for prefix, groups in index.items()}


@functools.lru_cache(maxsize=16384)
def _key_groups(key: str) -> tuple[tuple[str, int, str], ...]:
    """Every (prefix, N, rest) a key `prefix.N.rest` belongs to. Cached: the same few keys come
    in every span of an instrumentation, and parsing them was most of `attribute_index`."""
    found = []
    for dot in _DOT_BEFORE_DIGIT.finditer(key):
        match = _INDEXED.match(key, dot.end())
        if match:
            found.append((key[: dot.start()], int(match.group(1)), match.group(2)))
    return tuple(found)


def unwrap(value: Any) -> Any:
    """Strip framework envelopes around a value: LangChain's serialised objects
    ({"lc": 1, "kwargs": {...}}) and Traceloop's {"inputs": X} / {"outputs": X}."""
    for _ in range(8):
        if not isinstance(value, dict):
            return value
        if value.get("lc") is not None and isinstance(value.get("kwargs"), dict):
            value = value["kwargs"]
        elif "inputs" in value and len(value) <= 3 and "args" not in value:
            value = value["inputs"]
        elif "outputs" in value and len(value) <= 3:
            value = value["outputs"]
        else:
            return value
    return value


def dict_or_none(value: Any, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A dict (or JSON object string) merged with the non-None `extra` items; None if empty."""
    parsed = maybe_json(value)
    result = dict(parsed) if isinstance(parsed, dict) else {}
    result.update({k: v for k, v in (extra or {}).items() if v is not None})
    return result or None
