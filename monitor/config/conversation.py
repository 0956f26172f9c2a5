"""``conversations:`` -- how long a multi-turn conversation is tracked, and how many at once."""

from __future__ import annotations

from pydantic import Field

from monitor.config.base import Section


class ConversationConfig(Section):
    idle_seconds: float = Field(default=1800.0, gt=0, description="a conversation ends after this")
    max_conversations: int = Field(default=100_000, gt=0)
