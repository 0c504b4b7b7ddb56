"""Guard test support: counting tools, agent and graph builders (telemetry: tests/harness.py).

Agents run inside a ``test`` span so the guard's span events land on a span the test can
read (LangGraph carries the OTel context into its node threads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from fakes import ScriptedModel
from spanpoint.guard import GuardConfig, GuardMiddleware

if TYPE_CHECKING:  # tests/harness.py: not on the path of guard_resume_worker.py
    from harness import Telemetry


@dataclass
class Tools:
    """Tools that count their executions per name (order kept in ``log``)."""

    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answers: dict[str, Callable[..., str]] = field(default_factory=dict)

    def make(self, name: str, answer: Callable[..., str] | None = None) -> BaseTool:
        """A tool called ``name`` with free-form keyword arguments."""
        tools = self

        def run(**kwargs: Any) -> str:
            tools.log.append((name, kwargs))
            if answer is None:
                return f"{name} result for {sorted(kwargs.items())}"
            return answer(**kwargs)

        @tool(name, description=f"The {name} tool.")
        def _tool(query: str = "", url: str = "", limit: int = 0, n: int = 0) -> str:
            given = {"query": query, "url": url, "limit": limit, "n": n}
            return run(**{k: v for k, v in given.items() if v})

        return _tool

    def count(self, name: str | None = None) -> int:
        """How many times ``name`` (or any tool) ran."""
        return sum(1 for n, _ in self.log if name is None or n == name)


def make_agent(
    script: Any,
    tool_list: Sequence[BaseTool],
    config: GuardConfig,
    *,
    otel: Telemetry | None = None,
    usage: tuple[int, int] | None = (100, 20),
    model_name: str = "scripted-model",
    checkpointer: Any = None,
) -> Any:
    """A ``create_agent`` agent with the guard, over a scripted model."""
    model = ScriptedModel(script=script, usage=usage, model_name=model_name)
    guard = GuardMiddleware(config, meter_provider=otel.meter_provider if otel else None)
    return create_agent(
        model, list(tool_list), middleware=[guard], checkpointer=checkpointer or InMemorySaver()
    )


def make_graph_builder(script: Any, tool_list: Sequence[BaseTool], *, use_async: bool = False):
    """A hand-built agent ⇄ tools graph over plain ``MessagesState`` (no guard yet)."""
    model = ScriptedModel(script=script).bind_tools(list(tool_list))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", aagent if use_async else agent)
    builder.add_node("tools", ToolNode(list(tool_list)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


def thread(name: str) -> dict[str, Any]:
    """A run config for thread ``name``."""
    return {"configurable": {"thread_id": name}}


def kinds(messages: Sequence[BaseMessage]) -> list[str]:
    """A compact picture of a history: h, ai(tool names), t, reflection, correction, stop."""
    out = []
    for m in messages:
        mark = m.additional_kwargs.get("spanpoint_guard")
        kind = mark.get("kind") if isinstance(mark, dict) else None
        if kind == "termination":
            out.append("stop")
        elif kind in ("reflection", "correction"):
            out.append(kind)
        elif isinstance(m, AIMessage):
            out.append("ai(" + ",".join(c["name"] for c in m.tool_calls) + ")")
        elif isinstance(m, ToolMessage):
            out.append("skipped" if kind == "skipped" else "t")
        else:
            out.append("h")
    return out


def assert_history_valid(messages: Sequence[BaseMessage]) -> None:
    """Every AI tool call is answered by exactly one ToolMessage right after its AI message."""
    for i, m in enumerate(messages):
        if isinstance(m, AIMessage) and m.tool_calls:
            ids = [c["id"] for c in m.tool_calls]
            following = []
            for n in messages[i + 1 :]:
                if not isinstance(n, ToolMessage):
                    break
                following.append(n.tool_call_id)
            assert sorted(following) == sorted(ids), (ids, following)
