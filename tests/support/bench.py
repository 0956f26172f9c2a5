"""The benchmarks under ``bench/`` as modules, for the tests that check what they measure."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py``, imported as ``bench.<name>`` (its own imports of ``bench.*`` and
    ``monitor`` resolve from the repository)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location(f"bench.{name}", REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
