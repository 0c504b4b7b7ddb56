"""What a replayed graph call does, and what it leaves alone (issue 15: replay at <= 0.06 of a
run). A replay runs no graph: nothing that exists only for an executing graph may happen."""

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
from spanpoint.graph import DurabilityPolicy, GraphRunner

#: The class methods spanpoint wraps while a graph executes under a GraphRunner: the model and
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


def patched_now(originals: list[Any]) -> list[bool]:
    return [
        owner.__dict__[name] is not o for (owner, name), o in zip(PATCHED, originals, strict=True)
    ]


class Watch(SpanProcessor):
    """Which of PATCHED are wrapped when each span starts and ends."""

    def __init__(self, originals: list[Any]) -> None:
        self.originals = originals
        self.seen: list[tuple[str, str, list[bool]]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.seen.append(("start", span.name, patched_now(self.originals)))

    def on_end(self, span: Any) -> None:
        self.seen.append(("end", span.name, patched_now(self.originals)))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_replayed_graph_call_wraps_no_class(configured: Any, mode: str) -> None:
    originals = [owner.__dict__[name] for owner, name in PATCHED]
    in_node: list[list[bool]] = []

    def bump(state: Count) -> dict[str, int]:
        in_node.append(patched_now(originals))
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
    watch = Watch(originals)
    configured.provider.add_span_processor(watch)
    with spanpoint.run("wraps-1"):
        replayed = call()
    assert not executed.replayed and replayed.replayed and replayed.output == {"n": 2}
    assert in_node == [[True] * len(PATCHED)]  # the executing graph had them all
    replay_span = f"invoke_workflow counter{semconv.REPLAYED_NAME_SUFFIX}"
    seen = [(when, flags) for when, name, flags in watch.seen if name == replay_span]
    assert seen == [("start", [False] * len(PATCHED)), ("end", [False] * len(PATCHED))]
    assert patched_now(originals) == [False] * len(PATCHED)
