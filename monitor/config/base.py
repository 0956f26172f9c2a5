"""The base of every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A configuration section: unknown keys are errors, defaults are validated too.

    ``allow_inf_nan=False``: "inf" or ".nan" in a float setting is a typo, not "no limit".
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)
