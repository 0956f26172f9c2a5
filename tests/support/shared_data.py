"""Where the shared evaluation data (``shared/data`` beside the repository) lives for tests.

The directory is ``$RAGMON_SHARED_DATA`` when that is set, else ``shared/data`` next to the
repository checkout (``<checkout>/../shared/data``; from a test module in ``tests/`` that is
``Path(__file__).resolve().parents[2] / "shared" / "data"``). Tests that need a file from it call
:func:`shared_data_path`, which skips the test when the file is missing -- or fails it when
``RAGMON_TEST_REQUIRE_SERVICES=1`` (as CI sets), so missing data cannot pass silently there.

Never point tests at ``shared/data/holdout``: it is the held-out measurement set.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.services import service_unavailable

SHARED_DATA_ENV = "RAGMON_SHARED_DATA"


def shared_data_dir() -> Path:
    """The shared data directory (it may not exist)."""
    override = os.environ.get(SHARED_DATA_ENV)
    if override:
        return Path(override)
    # this file is <checkout>/tests/support/shared_data.py -> parents[3] is the checkout's parent
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def shared_data_path(*parts: str) -> Path:
    """``shared_data_dir() / parts...``, skipping (or failing) the test when it does not exist."""
    if parts and parts[0] == "holdout":
        raise ValueError("tests must not read shared/data/holdout")
    path = shared_data_dir().joinpath(*parts)
    if not path.exists():
        service_unavailable(f"shared evaluation data not found: {path}")
    return path
