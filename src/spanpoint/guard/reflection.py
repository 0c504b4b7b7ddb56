"""Reflection: the note the next model call receives after a detection.

One template per pattern, overridable through ``GuardConfig.reflection_templates``. Templates
only see tool names and counts, never tool arguments or tool output, so a reflection cannot
carry text a tool returned (a prompt injection, a secret) back into the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from langchain_core.messages import BaseMessage, HumanMessage

from spanpoint.guard.config import CYCLE, ERROR_LOOP, NO_PROGRESS, TOOL_REPEAT, GuardConfig

# Marks guard-authored messages: message.additional_kwargs[MESSAGE_MARK] = {"kind": ...}.
MESSAGE_MARK: Final = "spanpoint_guard"
# The `name` of guard-authored messages (valid for the OpenAI and Anthropic APIs).
GUARD_NAME: Final = "spanpoint_guard"

DEFAULT_REFLECTIONS: Final[Mapping[str, str]] = {
    TOOL_REPEAT: (
        "Supervisor note: you have called `{tool}` {count} times with identical arguments. "
        "Calling it again will return the same result. Use what you already have, try a "
        "different approach, or give your best final answer now."
    ),
    CYCLE: (
        "Supervisor note: your recent tool calls repeat the same sequence ({sequence}) "
        "{repeats} times in a row. Break the cycle: change approach or give your best "
        "final answer now."
    ),
    NO_PROGRESS: (
        "Supervisor note: the last {steps} steps returned no new information. Stop "
        "searching the same way: change approach or give your best final answer now."
    ),
    ERROR_LOOP: (
        "Supervisor note: the last {count} tool calls failed ({tools}). Do not retry them "
        "unchanged: fix the arguments, use another tool, or explain the problem in your "
        "final answer."
    ),
}


class _SafeFields(dict[str, Any]):
    # A template may name a field a given pattern does not have (e.g. {sequence} for a
    # tool repeat): render it empty rather than fail in the middle of a run.
    def __missing__(self, key: str) -> str:
        return ""


def render(template: str, fields: Mapping[str, Any]) -> str:
    """Fill ``template`` with ``fields``; unknown placeholders render empty."""
    return template.format_map(_SafeFields(fields))


def reflection_text(pattern: str, fields: Mapping[str, Any], cfg: GuardConfig) -> str:
    """The reflection for ``pattern``: the configured template, else the built-in one."""
    template = cfg.reflection_templates.get(pattern) or DEFAULT_REFLECTIONS[pattern]
    return render(template, fields)


def reflection_message(text: str, pattern: str, step: int) -> HumanMessage:
    """The reflection as a user-role message, marked as written by the guard."""
    return HumanMessage(
        content=text,
        name=GUARD_NAME,
        additional_kwargs={MESSAGE_MARK: {"kind": "reflection", "pattern": pattern, "step": step}},
    )


def correction_message(text: str, author: str, resume: int) -> HumanMessage:
    """A person's or the application's correction, attributed to ``author``."""
    return HumanMessage(
        content=text,
        additional_kwargs={
            MESSAGE_MARK: {"kind": "correction", "author": author, "resume": resume}
        },
    )


def guard_kind(message: BaseMessage) -> str | None:
    """``"reflection"``, ``"correction"``, ``"skipped"``, ``"termination"`` or ``None``."""
    mark = message.additional_kwargs.get(MESSAGE_MARK)
    return mark.get("kind") if isinstance(mark, dict) else None
