"""A support agent that knows nothing about spanpoint or OpenTelemetry.

Run it plain (``python examples/zero_code/agent.py``) or instrumented, unchanged:

    opentelemetry-instrument python examples/zero_code/agent.py

It is offline: ``ScriptedModel`` stands in for a provider's chat model (``ChatOpenAI``, …) and
answers from the conversation it is given — first it asks for the ticket, then it approves
it, then it writes the answer.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


@tool
def lookup_ticket(ticket_id: str) -> str:
    """Find a support ticket by id."""
    return f"ticket {ticket_id}: refund request, 42 EUR, customer since 2019"


@tool
def approve_ticket(ticket_id: str) -> str:
    """Approve the refund of a ticket."""
    return f"ticket {ticket_id}: refund approved"


class ScriptedModel(BaseChatModel):
    """An offline chat model: its next step depends only on the tool results so far."""

    model_name: str = "scripted-support-1"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """Accept tool definitions like a real model."""
        return self.bind(**kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any) -> Any:
        done = [m.name for m in messages if m.type == "tool"]
        usage = {"input_tokens": 40 * len(messages), "output_tokens": 12, "total_tokens": 0}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        if "lookup_ticket" not in done:
            calls = [{"name": "lookup_ticket", "args": {"ticket_id": "T-42"}, "id": "call_1"}]
        elif "approve_ticket" not in done:
            calls = [{"name": "approve_ticket", "args": {"ticket_id": "T-42"}, "id": "call_2"}]
        else:
            calls = []
        message = AIMessage(
            content="" if calls else "Your refund of 42 EUR for T-42 is approved.",
            tool_calls=calls,
            usage_metadata=usage,
            response_metadata={"model_name": self.model_name},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


agent = create_agent(
    ScriptedModel(),
    [lookup_ticket, approve_ticket],
    system_prompt="You are a support agent. Look tickets up before approving them.",
    name="support_agent",
)

if __name__ == "__main__":
    result = agent.invoke({"messages": [("user", "Please refund ticket T-42.")]})
    print(result["messages"][-1].content)
