"""Prompt layout: what many agents share goes first, so servers' prefix caches reuse it.

vLLM's automatic prefix caching, SGLang's radix cache and llama.cpp's slot cache skip the
prefill of a prompt's leading tokens that an earlier request already had. A conversation
that opens with the agent's persona differs from every other agent's at its first token, and
nothing is reused; one that opens with the rules every agent is told is computed once per
server. :func:`conversation` is the one place scenarios assemble a chat in either order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ._base import ChatMessage

Layout = Literal["shared_first", "persona_first"]
#: The layouts :func:`conversation` knows, the default first.
LAYOUTS: tuple[Layout, ...] = ("shared_first", "persona_first")


def conversation(shared: str, ask: str, *, persona: str | None = None,
                 history: Sequence[ChatMessage] = (),
                 layout: Layout = "shared_first") -> list[ChatMessage]:
    """The messages of one call: ``shared`` (text every agent is told alike: rules,
    instructions, the step's state), the agent's ``persona``, its ``history`` (earlier
    turns) and the ``ask`` that ends it.

    ``shared_first`` (the default): a system message with ``shared``, a system message with
    the persona, the history, then ``ask`` as the user's turn. ``persona_first`` (the order
    most simulators use): the persona, the history, then ``shared`` and ``ask`` together as
    the user's turn.

    >>> [m["role"] for m in conversation("Rules.", "Your move?", persona="You are Ann.")]
    ['system', 'system', 'user']
    >>> conversation("Rules.", "Your move?", layout="persona_first")
    [{'role': 'user', 'content': 'Rules.\\n\\nYour move?'}]
    """
    if layout == "shared_first":
        messages: list[ChatMessage] = [{"role": "system", "content": shared}]
        if persona:
            messages.append({"role": "system", "content": persona})
        messages.extend(history)
        messages.append({"role": "user", "content": ask})
        return messages
    if layout != "persona_first":
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    messages = [{"role": "system", "content": persona}] if persona else []
    messages.extend(history)
    messages.append({"role": "user", "content": f"{shared}\n\n{ask}" if ask else shared})
    return messages
