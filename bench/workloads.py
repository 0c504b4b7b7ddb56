"""The benchmark workloads: small, offline, deterministic LangGraph and LangChain programs.

- ``linear``: a 10-node linear ``StateGraph`` of trivial nodes (no checkpointer);
- ``agent``: a ``create_agent`` agent whose fake model makes 6 model calls and 5 tool calls;
- ``agent_async``: the same agent with an ``InMemorySaver`` checkpointer, called with
  ``ainvoke`` on a fresh thread each time;
- ``steps``: 100 ``@spanpoint.step`` boundaries in a row (the core engine; see bench_step.py).

The fake model answers from the conversation it is given (its turn is the number of AI
messages so far), never from a call counter, so a replayed run behaves like the original.
Every builder takes ``middleware`` so a setup can add spanpoint's ``CheckpointMiddleware``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, TypedDict

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool

LINEAR_NODES = 10
AGENT_TOOL_CALLS = 5  # so 6 model calls: one per tool call, then the final answer
WORKLOADS = ("linear", "agent", "agent_async")


class _Counter(TypedDict):
    n: int


def build_linear(nodes: int = LINEAR_NODES) -> Any:
    """A compiled graph ``node_0 → … → node_{nodes-1}``, each adding one to ``n``."""
    from langgraph.graph import END, START, StateGraph

    def bump(state: _Counter) -> dict[str, int]:
        return {"n": state["n"] + 1}

    builder = StateGraph(_Counter)
    names = [f"node_{i}" for i in range(nodes)]
    for name in names:
        builder.add_node(name, bump)
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(name="linear")


def linear_input(i: int) -> dict[str, int]:
    """The input of the ``i``-th invoke (distinct inputs: every durable call executes)."""
    return {"n": i}


class TicketModel(BaseChatModel):
    """Calls ``lookup_ticket`` once per turn for ``tool_calls`` turns, then answers."""

    tool_calls: int = AGENT_TOOL_CALLS
    model_name: str = "bench-fake"

    @property
    def _llm_type(self) -> str:
        return "bench-fake"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "tool_calls": self.tool_calls}

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        """Accept tools like a real model (the turn decides which is called)."""
        return self.bind(**kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = sum(1 for m in messages if m.type == "ai")
        usage = {"input_tokens": 20 + 5 * turn, "output_tokens": 7, "total_tokens": 27 + 5 * turn}
        meta = {"model_name": self.model_name, "finish_reason": "stop"}
        if turn < self.tool_calls:
            call = {
                "name": "lookup_ticket",
                "args": {"ticket": f"T-{turn}"},
                "id": f"call_{turn}",
                "type": "tool_call",
            }
            meta["finish_reason"] = "tool_calls"
            reply = AIMessage(
                content="", tool_calls=[call], usage_metadata=usage, response_metadata=meta
            )
        else:
            reply = AIMessage(content="Resolved.", usage_metadata=usage, response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup_ticket(ticket: str) -> str:
    """Look a ticket up by id."""
    return f"{ticket}: open, priority 2"


def build_agent(middleware: Sequence[Any] = (), checkpointer: Any = None) -> Any:
    """The support agent: 6 model calls and 5 tool calls per invoke."""
    from langchain.agents import create_agent

    return create_agent(
        TicketModel(),
        tools=[lookup_ticket],
        system_prompt="You resolve support tickets.",
        middleware=list(middleware),
        checkpointer=checkpointer,
        name="support",
    )


def agent_input(i: int) -> dict[str, Any]:
    """The input of the ``i``-th invoke (distinct, so every durable call executes)."""
    return {"messages": [("user", f"Please resolve ticket batch {i}.")]}


def check_agent_output(output: Any) -> None:
    """Fail loudly if the agent did not make the planned calls (a broken setup, not a bench)."""
    messages = output["messages"] if isinstance(output, dict) else output.output["messages"]
    ai = sum(1 for m in messages if m.type == "ai")
    tools = sum(1 for m in messages if m.type == "tool")
    if (ai, tools) != (AGENT_TOOL_CALLS + 1, AGENT_TOOL_CALLS):
        raise AssertionError(f"agent made {ai} model and {tools} tool calls, not 6 and 5")
