"""Lowercasing that reads the same whether tier 0 runs from its sources or compiled.

mypyc compiles ``str.lower()`` to its own routine, which on Python before 3.13 maps a string
character by character: a capital sigma ending a word becomes ``σ`` where Python, which looks at
the neighbouring letters, writes the final form ``ς``. Tier 0's tokens would then differ between
the two builds on Greek text. Text holding a capital sigma is lowered by Python's own method,
called as an object so that mypyc cannot substitute its routine; any other text, by either.
"""

from __future__ import annotations

import operator
from typing import Final

_PYTHON_LOWER: Final = operator.methodcaller("lower")


def lower(text: str) -> str:
    """``text.lower()``, exactly, compiled or not."""
    if "\u03a3" in text:
        result: str = _PYTHON_LOWER(text)
        return result
    return text.lower()
