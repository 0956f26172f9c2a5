"""Request templates: a JSON value with ``{{name}}`` placeholders, filled per query.

Pure functions, no I/O. A string that is *exactly* one placeholder (``"{{top_k}}"``) is
replaced by the variable's value with its JSON type kept (an integer stays an integer, a list
of contexts stays a list, ``true`` stays a boolean). A placeholder inside a longer string
(``"Bearer {{token}}"``, ``"q={{query}}"``) is replaced by its text: strings as they are,
``true``/``false``/``null`` and numbers as JSON writes them, lists and objects as JSON. Only
values are templated, never object keys. An unknown name raises :class:`TemplateError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

from pydantic import JsonValue

PLACEHOLDER: Final = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class TemplateError(ValueError):
    """A placeholder names a variable that is not defined."""


def placeholders(template: JsonValue) -> set[str]:
    """Every placeholder name used anywhere in ``template``."""
    found: set[str] = set()
    if isinstance(template, str):
        found.update(PLACEHOLDER.findall(template))
    elif isinstance(template, list):
        for item in template:
            found |= placeholders(item)
    elif isinstance(template, dict):
        for item in template.values():
            found |= placeholders(item)
    return found


def _as_text(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def render(template: JsonValue, variables: Mapping[str, JsonValue]) -> JsonValue:
    """``template`` with every placeholder filled from ``variables`` (see the module docstring)."""
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template.strip())
        if whole is not None:
            name = whole.group(1)
            if name not in variables:
                raise TemplateError(f"undefined template variable {name!r}")
            return variables[name]

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in variables:
                raise TemplateError(f"undefined template variable {name!r}")
            return _as_text(variables[name])

        return PLACEHOLDER.sub(substitute, template)
    if isinstance(template, list):
        return [render(item, variables) for item in template]
    if isinstance(template, dict):
        return {key: render(item, variables) for key, item in template.items()}
    return template


def query_parameters(rendered: JsonValue) -> list[tuple[str, str]]:
    """A rendered template as URL query parameters (for ``GET``).

    The template must render to a flat object. ``null`` values are left out, booleans become
    ``true``/``false``, lists repeat the key once per element, nested objects are JSON text.
    """
    if not isinstance(rendered, dict):
        raise TemplateError("a GET request template must be an object of query parameters")
    pairs: list[tuple[str, str]] = []
    for key, value in rendered.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item is None:
                continue
            pairs.append((key, _as_text(item)))
    return pairs


__all__ = ["PLACEHOLDER", "TemplateError", "placeholders", "query_parameters", "render"]
