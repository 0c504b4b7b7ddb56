"""What GraphRunner learns about real agents (issue 15 items 5, 6): Deep Agents is an agent
(``invoke_agent``), and the CheckpointMiddleware search finds the middleware in a Deep Agent,
in a supervisor's members and in a swarm's agents: a visited set per node, graphs searched
node by node. Before, one visited set shared across nodes missed the Deep Agent's middleware
and gave the false warning "the graph has no CheckpointMiddleware"."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from fakes import ScriptedModel
from spanpoint.graph.inspect import find_checkpoint_middleware, inspect_graph
from spanpoint.graph.types import DurabilityPolicy


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return "paid"


def model() -> Any:
    """Never called: these graphs are only inspected."""
    return ScriptedModel()


def member(name: str, middleware: list[Any]) -> Any:
    return create_agent(model(), [lookup], middleware=middleware, name=name)


def deep(middleware: list[Any]) -> Any:
    from deepagents import create_deep_agent

    return create_deep_agent(model=model(), tools=[lookup], middleware=middleware, name="support")


def supervisor(middleware: list[Any]) -> Any:
    from langgraph_supervisor import create_supervisor

    members = [member("billing", middleware), member("travel", middleware)]
    return create_supervisor(members, model=model()).compile(name="team")


def swarm(middleware: list[Any]) -> Any:
    from langgraph_swarm import create_swarm

    agents = [member("alice", middleware), member("bob", middleware)]
    return create_swarm(agents, default_active_agent="alice").compile(name="team")


BUILDERS = {"deep": deep, "supervisor": supervisor, "swarm": swarm}


@pytest.mark.parametrize("app", list(BUILDERS))
def test_the_middleware_is_found_in_real_agents(app: str) -> None:
    mw = spanpoint.CheckpointMiddleware()
    assert find_checkpoint_middleware(BUILDERS[app]([mw])) is mw
    assert find_checkpoint_middleware(BUILDERS[app]([])) is None


def test_a_deep_agent_is_an_agent_and_a_hand_built_graph_a_workflow() -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    quiet = DurabilityPolicy(warn_in_process=False)
    info = inspect_graph(deep([spanpoint.CheckpointMiddleware()]), "calls", quiet, None)
    assert info.span_name == "invoke_agent" and info.warnings == (
        "the graph has no checkpointer: it cannot be interrupted and resumed, and its "
        "LangGraph state is lost between calls; compile it with a durable checkpointer "
        "(SqliteSaver, PostgresSaver)",
    )
    g = StateGraph(MessagesState)
    g.add_node("model", lambda s: {"messages": []})
    g.add_node("tools", ToolNode([lookup]))
    g.add_edge(START, "model")
    g.add_edge("model", END)
    assert inspect_graph(g.compile(), "graph_call", quiet, None).span_name == "invoke_workflow"
