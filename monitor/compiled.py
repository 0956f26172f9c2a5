"""Which of tier 0's modules run compiled to C by mypyc, and which from their sources.

A wheel built with HATCH_BUILD_HOOK_ENABLE_MYPYC=true (the Dockerfile's build stage; the list is
pyproject.toml's ``[tool.hatch.build.targets.wheel.hooks.mypyc]``, held equal to `MODULES` by a
test) ships these modules as extension modules beside their sources, and Python imports the
extension. Either way they score every trace alike (bench/tier0_fingerprint.py); compiled, tier 0
costs about two thirds of the CPU. Found without importing the modules, so asking is cheap.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from typing import Final

MODULES: Final = (
    "monitor.evaluators.casing",
    "monitor.evaluators.constraints",
    "monitor.evaluators.context_text",
    "monitor.evaluators.grounding",
    "monitor.evaluators.heuristic",
    "monitor.evaluators.language",
    "monitor.evaluators.polarity",
    "monitor.evaluators.precision",
    "monitor.evaluators.support",
    "monitor.evaluators.text",
)


def compiled_modules() -> tuple[str, ...]:
    """The modules of `MODULES` that import as extension modules."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None and spec.origin.endswith(suffixes):
            found.append(name)
    return tuple(found)


def tier0_compiled() -> bool:
    """Whether every module of tier 0 that a build can compile runs compiled."""
    return len(compiled_modules()) == len(MODULES)
