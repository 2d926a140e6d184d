"""Messages exchanged between agents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Msg:
    """A small message record.

    ``content`` and ``metadata`` values may be :class:`~populace.core.Placeholder`\\ s; an
    agent receiving such a message runs only once every placeholder in it is resolved, and
    sees the real values.

    >>> Msg("moderator", "Guess a number", role="system").role
    'system'
    """

    sender: str | int
    content: Any
    role: str = "user"
    metadata: dict[str, Any] | None = None
