"""Which of the modules a build can compile to C by mypyc run compiled, and which from their
sources: tier 0's, and the OTLP path's (decoding, splitting, mapping spans onto a trace).

A wheel built with HATCH_BUILD_HOOK_ENABLE_MYPYC=true (the Dockerfile's build stage; the list is
pyproject.toml's ``[tool.hatch.build.targets.wheel.hooks.mypyc]``, held equal to `MODULES` by a
test) ships these modules as extension modules beside their sources, and Python imports the
extension. Either way they give the same results (bench/tier0_fingerprint.py for tier 0, the
OTLP tests run against a compiled build by tests/test_compiled.py); compiled, tier 0 costs about
two thirds of the CPU and the OTLP stages about 0.6. Found without importing the modules, so
asking is cheap.
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
    "monitor.formats.otlp",
    "monitor.formats.otlp_conventions",
    "monitor.formats.otlp_documents",
    "monitor.formats.otlp_mapping",
    "monitor.formats.otlp_records",
    "monitor.formats.otlp_release",
    "monitor.formats.otlp_salvage",
    "monitor.formats.otlp_split",
    "monitor.formats.otlp_values",
    "monitor.formats.otlp_wire",
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


def fully_compiled() -> bool:
    """Whether every module that a build can compile runs compiled."""
    return len(compiled_modules()) == len(MODULES)
