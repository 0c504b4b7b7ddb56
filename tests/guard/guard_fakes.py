"""Scripts for the guard tests' model (``fakes.ScriptedModel``): every answer is a function
of the conversation (``turn`` is the number of AI messages already in it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

#: ``script(turn, messages)`` -> tool calls (``{"name", "args"}`` each) or the final text.
Script = Callable[[int, Sequence[BaseMessage]], "list[dict[str, Any]] | str"]


def corrected(messages: Sequence[BaseMessage]) -> str | None:
    """The text of the latest correction in the conversation, if any."""
    for m in reversed(messages):
        mark = m.additional_kwargs.get("spanpoint_guard") if isinstance(m, HumanMessage) else None
        if isinstance(mark, dict) and mark.get("kind") == "correction":
            return m.text
    return None


def stuck_on_search(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
    """Searches the same query forever (alternating argument key order) until corrected."""
    if corrected(messages):
        return "The answer is 42."
    args = {"query": "meaning of life", "limit": 3}
    if turn % 2:
        args = {"limit": 3, "query": "meaning of life"}
    return [{"name": "search", "args": args}]
