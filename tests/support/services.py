"""How tests react when an external service they need (e.g. the Kafka broker) is missing."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_SERVICES_ENV = "RAGMON_TEST_REQUIRE_SERVICES"


def service_unavailable(reason: str) -> NoReturn:
    """Skip the current test, or fail it when RAGMON_TEST_REQUIRE_SERVICES=1 (CI sets this)."""
    if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
        pytest.fail(f"required test service unavailable: {reason}", pytrace=False)
    pytest.skip(reason)
