"""Task identity by position (docs/design-notes.md, "Task identity"), in one process.

Generated with hypothesis: ``Send`` × N branches into a compiled subgraph nested ``depth``
levels deep, with no checkpointer, run inside a run and then rerun, through a ``GraphRunner``
or the zero-code instrumentor. The order in which the branches reach each step is set per
attempt (each branch's real calls take their own time; replayed ones take none), so whichever
order the branches open their boundaries in, the rerun replays every call (nothing executes
again) and each branch gets its own results back.
Also: task frames leave with their task under ``SPANPOINT_DURABLE=thread`` (bounded memory).
"""

from __future__ import annotations

import gc
import operator
import threading
import time
from typing import Annotated, Any, TypedDict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send

import spanpoint
from fakes import ScriptedModel
from spanpoint.calls import seams, tasks
from spanpoint.graph import DurabilityPolicy, GraphRunner
from spanpoint.instrumentation import SpanpointInstrumentor

QUIET = DurabilityPolicy(warn_in_process=False)


class Executions:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.pace: dict[str, float] = {}

    def run(self, label: str, branch: str) -> None:
        with self.lock:
            self.calls.append(label)
        time.sleep(self.pace.get(branch, 0.0))


def branch_model(executions: Executions) -> ScriptedModel:
    """Answers from the conversation: its branch, and how many AI turns it already has."""

    def reply(turn: int, messages: list[BaseMessage]) -> str:
        branch = str(messages[0].content)
        executions.run(f"{branch}:{turn}", branch)
        return f"{branch} turn {turn}"

    return ScriptedModel(script=reply, usage=None)


class Branch(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    replies: Annotated[list[str], operator.add]


class Outer(TypedDict):
    branches: list[str]
    replies: Annotated[list[str], operator.add]


def branch_graph(model: ScriptedModel, depth: int) -> Any:
    def think(state: Branch) -> dict[str, Any]:
        reply = model.invoke(state["messages"])
        return {"messages": [reply], "replies": [str(reply.content)]}

    g = StateGraph(Branch)
    g.add_node("first", think)
    g.add_node("second", think)
    g.add_edge(START, "first")
    g.add_edge("first", "second")
    inner = g.compile()
    for level in range(depth - 1):  # a subgraph inside a subgraph inside …
        wrap = StateGraph(Branch)
        wrap.add_node(f"level{level}", inner)
        wrap.add_edge(START, f"level{level}")
        inner = wrap.compile()
    return inner


def fan_out(model: ScriptedModel, depth: int) -> Any:
    g = StateGraph(Outer)
    g.add_node("branch", branch_graph(model, depth))

    def sends(state: Outer) -> list[Send]:
        return [
            Send("branch", {"messages": [HumanMessage(b)], "replies": []})
            for b in state["branches"]
        ]

    g.add_conditional_edges(START, sends)
    return g.compile()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    order=st.permutations(["a", "b", "c"]),
    width=st.integers(min_value=2, max_value=3),
    depth=st.integers(min_value=1, max_value=3),
    surface=st.sampled_from(["runner", "zero-code"]),
)
def test_send_branches_replay_by_position_whatever_order_they_run_in(
    configured_sqlite: Any, order: list[str], width: int, depth: int, surface: str
) -> None:
    if surface == "runner":
        _fan_out_twice(order, width, depth, None)
        return
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured_sqlite.provider, strategy="calls")
    try:
        _fan_out_twice(order, width, depth, instrumentor)
    finally:
        instrumentor.uninstrument()


def _fan_out_twice(order: list[str], width: int, depth: int, instrumentor: Any) -> None:
    """Run the fan-out, then rerun it: every call replays, each branch gets its own."""
    executions = Executions()
    branches = ["a", "b", "c"][:width]
    # Attempt 1: the first branch of ``order`` is the slowest, so branches reach each step
    # in another order than the rerun, where every call replays at once.
    executions.pace = {b: 0.02 * (len(order) - i) for i, b in enumerate(order)}
    graph = fan_out(branch_model(executions), depth)
    runner = GraphRunner(graph, name="fan", strategy="calls", durability=QUIET)
    run_id = f"fan-{''.join(order)}-{width}-{depth}-{instrumentor is None}"
    question = {"branches": branches, "replies": []}

    def call() -> Any:
        if instrumentor is None:
            return runner.invoke(question, thread_id="t").output
        return graph.invoke(question, {"configurable": {"thread_id": "t"}})

    with spanpoint.run(run_id):
        first = call()
    assert sorted(executions.calls) == sorted(f"{b}:{t}" for b in branches for t in (0, 1))
    executions.calls.clear()
    with spanpoint.run(run_id):
        again = call()
    assert executions.calls == []
    expected = sorted(f"{b} turn {t}" for b in branches for t in (0, 1))
    assert sorted(first["replies"]) == expected
    assert sorted(again["replies"]) == expected


def test_task_frames_leave_with_their_task_under_thread_durability(configured_sqlite: Any) -> None:
    executions = Executions()
    saver_graph = branch_graph(branch_model(executions), 1).builder.compile(
        checkpointer=InMemorySaver()
    )
    previous = tasks.durable_scope()
    tasks.set_durable_scope("thread")
    try:
        gc.collect()
        before = len(tasks._TASKS)
        with seams.enabled(), tasks.POSITION_PATCHES.enabled():
            for n in range(20):
                saver_graph.invoke(
                    {"messages": [HumanMessage(f"q{n}")], "replies": []},
                    {"configurable": {"thread_id": f"thread-{n}"}},
                )
        gc.collect()
        assert len(executions.calls) == 40
        durable = [
            s
            for s in configured_sqlite.spans()
            if s.attributes.get("spanpoint.boundary.kind") == "model_call"
        ]
        assert len(durable) == 40  # each call was a durable boundary in its task's frame
        assert len(tasks._TASKS) == before
    finally:
        tasks.set_durable_scope(previous)
