"""Offline test doubles shared by the test suite.

``ConversationModel`` is a chat model that answers *from the conversation it is given*,
never from a call counter (``ScriptedModel``: the same, a script deciding each turn): replay
skips calls, so a model that counted its own calls would diverge after a replay and a replay
test would prove nothing (see DESIGN.md, testing notes).

Its turn is the number of AI messages already in the conversation. Turn ``n`` makes the tool
calls ``plan[n]``; once the plan is exhausted it answers ``final``. Tool-call ids are random,
like a real provider's, so a test only passes if replay returns the recorded ids.

``count_effect`` appends one line to a file under an exclusive lock, so side effects of a
process that is killed right afterwards are still counted.
"""

from __future__ import annotations

import fcntl
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field


class ConversationModel(BaseChatModel):
    """A fake chat model whose answer depends only on the conversation so far.

    Args:
        plan: for AI turn ``n``, the tool calls to make, each ``{"name", "args"}`` and an
            optional fixed ``"id"``.
        final: the text of the answer once the plan is exhausted.
        model_name: reported as ``response_metadata["model_name"]`` and to LangSmith params.
    """

    plan: list[list[dict[str, Any]]] = Field(default_factory=list)
    final: str = "All done."
    model_name: str = "fake-chat"

    @property
    def _llm_type(self) -> str:
        return "conversation-fake"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "plan": self.plan, "final": self.final}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "fake"
        return params

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        """Accept tools like a real model (the plan decides which are called)."""
        return self.bind(tools=[getattr(t, "name", t) for t in tools], **kwargs)

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The reply to ``messages``: the next planned tool calls, or the final text."""
        turn = sum(1 for m in messages if m.type == "ai")
        chars = sum(len(str(m.content)) for m in messages)
        usage = {"input_tokens": 10 + chars // 4, "output_tokens": 5 + turn, "total_tokens": 0}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        metadata = {"model_name": self.model_name, "finish_reason": "stop"}
        if turn < len(self.plan):
            calls = [
                {
                    "name": call["name"],
                    "args": dict(call.get("args", {})),
                    "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                    "type": "tool_call",
                }
                for call in self.plan[turn]
            ]
            metadata["finish_reason"] = "tool_calls"
            return AIMessage(
                content="", tool_calls=calls, usage_metadata=usage, response_metadata=metadata
            )
        return AIMessage(content=self.final, usage_metadata=usage, response_metadata=metadata)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Any:
        reply = self.answer(messages)
        text = str(reply.content)
        for word in text.split(" ") if text else []:
            yield ChatGenerationChunk(message=AIMessageChunk(content=word + " "))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                tool_call_chunks=[
                    {"name": c["name"], "args": _json(c["args"]), "id": c["id"], "index": i}
                    for i, c in enumerate(reply.tool_calls)
                ],
                usage_metadata=reply.usage_metadata,
                response_metadata=reply.response_metadata,
                chunk_position="last",
            )
        )


class CountingModel(ConversationModel):
    """The conversation model, counting each execution in the ``effects`` file as ``effect``
    (a replayed call never reaches it); ``offline`` raises as an unreachable provider would."""

    effects: str = ""
    effect: str = "model"
    offline: bool = False

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        if self.offline:
            raise ConnectionError("model unreachable (offline)")
        if self.effects:
            count_effect(self.effects, self.effect)
        return super().answer(messages)


class ScriptedModel(ConversationModel):
    """A :class:`ConversationModel` whose turn ``n`` is answered by ``script(n, messages)``:
    tool calls (a list of ``{"name", "args"}``) or the final text. Nothing depends on how
    often the model was called, so replays and resumes see the same behaviour.

    ``usage`` (input, output) is reported as ``usage_metadata`` on every answer, or a function
    of the conversation giving it; ``None`` reports none (so the guard must estimate).
    ``provider``, when set, is reported as the LangSmith ``ls_provider`` and as
    ``response_metadata["model_provider"]``, as a real provider's model and reply do (what
    cost pricing reads). Not streamed: ``stream`` falls back to one ``invoke``, as a model
    without streaming does.
    """

    script: Any = None
    usage: Any = (100, 20)  # (input, output), usage(messages) -> (input, output), or None
    provider: str | None = None
    model_name: str = "scripted-model"

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = self.provider or params["ls_provider"]
        return params

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        """Accept tools like a real model (the script decides which are called)."""
        return self.bind(**kwargs)

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The reply to ``messages``: the script's tool calls or text for this turn."""
        turn = sum(1 for m in messages if m.type == "ai")
        reply = self.script(turn, messages)
        metadata = {"model_name": self.model_name}
        if self.provider is not None:
            metadata["model_provider"] = self.provider
        extra: dict[str, Any] = {"response_metadata": metadata}
        usage = self.usage(messages) if callable(self.usage) else self.usage
        if usage is not None:
            i, o = usage
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

    _stream = BaseChatModel._stream  # no streaming: BaseChatModel.stream invokes once


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def count_effect(path: Path | str, name: str) -> int:
    """Append ``name`` to the effects file under an exclusive lock; return its count so far."""
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.seek(0)
            count = fh.read().split().count(name) + 1
            fh.write(name + "\n")
            fh.flush()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return count


def read_effects(path: Path | str) -> Counter[str]:
    """How many times each side effect happened."""
    path = Path(path)
    return Counter(path.read_text().split()) if path.exists() else Counter()
