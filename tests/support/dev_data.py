"""Where the development data (``data/`` at the repository root) lives for tests.

The data ships with the project (``data/README.md`` gives its sources and licences), so every
test that reads it runs on any clone; a missing file is a broken checkout and fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "data"


def dev_data_path(*parts: str) -> Path:
    """``data/<parts...>``; fails the test when the file is missing from the checkout."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"development data missing from the checkout: {path}", pytrace=False)
    return path
