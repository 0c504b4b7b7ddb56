"""Clean termination: no further tool runs, a valid history, and a truthful explanation.

Every unanswered tool call of the last AI message gets an error ``ToolMessage`` saying the
guard skipped it (so the history replays on OpenAI and Anthropic, which reject an AI tool
call without its result), followed by one explanation ``AIMessage`` whose wording depends
on the real reason: a budget stop never claims a loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage

from spanpoint.guard.budgets import Overrun
from spanpoint.guard.config import (
    CYCLE,
    ERROR_LOOP,
    MAX_COST,
    MAX_STEPS,
    MAX_TOKENS,
    MAX_WALL_SECONDS,
    NO_PROGRESS,
    TOOL_REPEAT,
    GuardConfig,
)
from spanpoint.guard.reflection import MESSAGE_MARK, render

DEFAULT_TERMINATIONS: Final[Mapping[str, str]] = {
    TOOL_REPEAT: (
        "I stopped before finishing: I kept calling `{tool}` with the same arguments "
        "({count} times)."
    ),
    CYCLE: (
        "I stopped before finishing: my tool calls kept repeating the same sequence ({sequence})."
    ),
    NO_PROGRESS: "I stopped before finishing: {steps} steps in a row brought no new information.",
    ERROR_LOOP: "I stopped before finishing: {count} tool calls in a row failed ({tools}).",
    MAX_STEPS: (
        "I stopped before finishing because this run reached its limit of {limit} model calls."
    ),
    MAX_TOKENS: (
        "I stopped before finishing because this run used {used}{estimated} tokens, over its "
        "budget of {limit}."
    ),
    MAX_COST: (
        "I stopped before finishing because this run cost ${used}, over its budget of ${limit}."
    ),
    MAX_WALL_SECONDS: (
        "I stopped before finishing because this run took {used} seconds, reaching its time "
        "limit of {limit} seconds."
    ),
}


def unanswered_tool_calls(
    messages: Sequence[BaseMessage],
) -> tuple[AIMessage | None, list[ToolCall]]:
    """The last AI message and those of its tool calls that have no ``ToolMessage`` yet."""
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AIMessage):
            return message, [c for c in message.tool_calls if c.get("id") not in answered]
    return None, []


def skipped_tool_messages(calls: Sequence[ToolCall], reason: str) -> list[ToolMessage]:
    """One error result per call the guard did not run."""
    return [
        ToolMessage(
            content=(
                f"Not run: the run was stopped by its guard ({reason}) before this tool "
                "call could run."
            ),
            tool_call_id=call.get("id") or "",
            name=call.get("name"),
            status="error",
            additional_kwargs={MESSAGE_MARK: {"kind": "skipped", "reason": reason}},
        )
        for call in calls
    ]


def budget_fields(overrun: Overrun, tokens_estimated: bool) -> dict[str, Any]:
    """Template fields for a budget stop, numbers formatted for people."""
    if overrun.budget == MAX_COST:
        used, limit = f"{overrun.used:.4f}", f"{overrun.limit:.4f}"
    elif overrun.budget == MAX_WALL_SECONDS:
        used, limit = f"{overrun.used:.1f}", f"{overrun.limit:g}"
    else:
        used, limit = f"{int(overrun.used):,}", f"{int(overrun.limit):,}"
    estimated = " (estimated)" if tokens_estimated and overrun.budget == MAX_TOKENS else ""
    return {"used": used, "limit": limit, "estimated": estimated}


def explanation_text(
    reason: str,
    fields: Mapping[str, Any],
    cfg: GuardConfig,
    *,
    reflected: bool,
    skipped: int,
) -> str:
    """The user-facing explanation of a stop, true for ``reason``."""
    custom = cfg.termination_templates.get(reason)
    if custom is not None:
        return render(custom, fields)
    text = render(DEFAULT_TERMINATIONS[reason], fields)
    if reflected:
        text += " A note asking me to change approach did not help."
    if skipped:
        text += f" {skipped} requested tool call(s) were not run."
    return text + " The work so far is above."


def explanation_message(text: str, reason: str, kind: str, step: int) -> AIMessage:
    """The final AI message of a stopped run, marked as written by the guard."""
    return AIMessage(
        content=text,
        additional_kwargs={
            MESSAGE_MARK: {"kind": "termination", "reason": reason, "stop_kind": kind, "step": step}
        },
    )
