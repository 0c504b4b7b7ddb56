"""What a replayed graph call does, and what it leaves alone. A replay runs no graph: nothing
that exists only for an executing graph may happen."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.pregel import Pregel
from opentelemetry.sdk.trace import SpanProcessor

import spanpoint
from spanpoint import semconv
from spanpoint.calls import seams
from spanpoint.graph import DurabilityPolicy, GraphRunner, nested

#: The class methods spanpoint wraps for a graph executing under a GraphRunner: the model and
#: tool seams (spanpoint.calls.seams) and the nested graph calls' spans (spanpoint.graph.nested).
PATCHED = [
    (BaseChatModel, "_generate_with_cache"),
    (BaseChatModel, "_agenerate_with_cache"),
    (BaseTool, "run"),
    (BaseTool, "arun"),
    (Pregel, "invoke"),
    (Pregel, "ainvoke"),
]


class Count(TypedDict):
    n: int


def now() -> tuple[list[Any], bool]:
    """What sits on each of PATCHED, and whether a runner call's scope is on here."""
    on = seams.PATCHES.live or nested.CURRENT.get() is not None
    return [owner.__dict__[name] for owner, name in PATCHED], on


class Watch(SpanProcessor):
    """What sits on PATCHED, and whether the runner's scope is on, when each span starts
    and ends."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, tuple[list[Any], bool]]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.seen.append(("start", span.name, now()))

    def on_end(self, span: Any) -> None:
        self.seen.append(("end", span.name, now()))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_replayed_graph_call_replaces_nothing_and_opens_no_scope(
    configured: Any, mode: str
) -> None:
    in_node: list[tuple[list[Any], bool]] = []

    def bump(state: Count) -> dict[str, int]:
        in_node.append(now())
        return {"n": state["n"] + 1}

    g = StateGraph(Count)
    g.add_node("bump", bump)
    g.add_edge(START, "bump")
    g.add_edge("bump", END)
    runner = GraphRunner(
        g.compile(), name="counter", durability=DurabilityPolicy(warn_in_process=False)
    )

    def call() -> Any:
        if mode == "sync":
            return runner.invoke({"n": 1}, thread_id="w-1")
        return asyncio.run(runner.ainvoke({"n": 1}, thread_id="w-1"))

    with spanpoint.run("wraps-1"):
        executed = call()
    [(applied, on)] = in_node  # the executing graph ran in the scope, over spanpoint's wrappers
    assert on
    assert [getattr(f, "__module__", "") for f in applied] == [
        *["spanpoint.calls.seams"] * 4,
        *["spanpoint.graph.nested"] * 2,
    ]
    watch = Watch()
    configured.provider.add_span_processor(watch)
    with spanpoint.run("wraps-1"):
        replayed = call()
    assert not executed.replayed and replayed.replayed and replayed.output == {"n": 2}
    replay_span = f"invoke_workflow counter{semconv.REPLAYED_NAME_SUFFIX}"
    seen = [(when, found) for when, name, found in watch.seen if name == replay_span]
    # Nothing replaced per call (the same wrappers), and no scope: a replay runs no graph.
    assert seen == [("start", (applied, False)), ("end", (applied, False))]
    assert now() == (applied, False)
