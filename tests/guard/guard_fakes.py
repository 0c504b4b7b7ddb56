"""Fake chat models for guard tests: every answer is a function of the conversation.

``ScriptedModel`` calls ``script(turn, messages)`` where ``turn`` is the number of AI messages
already in the conversation; the script returns tool calls (a list of ``{"name", "args"}``)
or the final text. Nothing depends on how often the model was called, so replays and
resumes see the same behaviour.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

Script = Callable[[int, Sequence[BaseMessage]], "list[dict[str, Any]] | str"]


class ScriptedModel(BaseChatModel):
    """A chat model answering ``script(turn, messages)``; supports ``bind_tools``.

    ``usage`` (input, output) is reported as ``usage_metadata`` on every answer; ``None``
    reports none (so the guard must estimate).
    """

    script: Any
    usage: tuple[int, int] | None = (100, 20)
    model_name: str = "scripted-model"

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        """Accept tools like a real model (the script decides which are called)."""
        return self.bind(**kwargs)

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The reply to ``messages``."""
        turn = sum(1 for m in messages if m.type == "ai")
        reply = self.script(turn, messages)
        extra: dict[str, Any] = {"response_metadata": {"model_name": self.model_name}}
        if self.usage is not None:
            i, o = self.usage
            extra["usage_metadata"] = {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}
        if isinstance(reply, str):
            return AIMessage(content=reply, **extra)
        calls = [
            {
                "name": c["name"],
                "args": dict(c.get("args", {})),
                "id": f"call_{uuid.uuid4().hex[:10]}",
                "type": "tool_call",
            }
            for c in reply
        ]
        return AIMessage(content="", tool_calls=calls, **extra)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer(messages))])


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
