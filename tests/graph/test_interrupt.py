"""Interrupts are results, not errors: resume requests, several interrupts, subgraphs."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from opentelemetry.trace import StatusCode

import spanpoint
from spanpoint import semconv
from spanpoint.errors import NotInterruptedError
from spanpoint.graph import DurabilityPolicy, GraphRunner, RunRequest, build_resume_request
from spanpoint.graph.results import RunResult

QUIET = DurabilityPolicy(warn_in_process=False)


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def approval_graph(executed: list[str]) -> Any:
    def draft(state: State) -> dict[str, Any]:
        executed.append("draft")
        return {"log": ["drafted"]}

    def approve(state: State) -> dict[str, Any]:
        executed.append("approve")
        answer = interrupt({"question": "ship it?"})
        return {"log": [f"approved={answer}"]}

    g = StateGraph(State)
    g.add_node("draft", draft)
    g.add_node("approve", approve)
    g.add_edge(START, "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=InMemorySaver())


def test_interrupt_then_resume_on_the_same_thread_both_calls_are_boundaries(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(approval_graph(executed), name="review", durability=QUIET)

    def flow() -> list[RunResult]:
        with spanpoint.run("R-1"):
            first = runner.invoke({"log": []}, thread_id="thread-1")
            second = runner.invoke(build_resume_request(first, "yes"))
        return [first, second]

    first, second = flow()
    assert first.status == "interrupted" and first.interrupted
    assert first.next_nodes == ("approve",)
    (info,) = first.interrupts
    assert (info.index, info.value, info.node, info.namespace) == (
        0,
        {"question": "ship it?"},
        "approve",
        "",
    )
    assert first.pending_state["interrupt_ids"] == [info.id]
    assert first.latest_checkpoint_id and first.checkpoint_ns == ""
    assert second.status == "completed" and second.thread_id == first.thread_id == "thread-1"
    assert second.output == {"log": ["drafted", "approved=yes"]}
    assert executed == ["draft", "approve", "approve"]  # the resume re-enters the node

    spans = configured.spans("invoke_workflow review")
    assert [s.attributes[semconv.STATUS] for s in spans] == ["interrupted", "completed"]
    assert all(s.status.status_code is StatusCode.OK for s in spans)  # not an error
    assert all(s.attributes[semconv.BOUNDARY_KIND] == "graph_call" for s in spans)
    paused = [e for e in spans[0].events if e.name == semconv.EVENT_AGENT_PAUSED]
    assert paused and paused[0].attributes[semconv.LANGGRAPH_INTERRUPT_IDS] == (info.id,)
    resumed = [e for e in spans[1].events if e.name == semconv.EVENT_AGENT_RESUMED]
    assert resumed and resumed[0].attributes[semconv.GEN_AI_CONVERSATION_ID] == "thread-1"
    assert spans[0].attributes[semconv.LANGGRAPH_INTERRUPT_COUNT] == 1
    assert spans[0].attributes[semconv.LANGGRAPH_NEXT_NODES] == ("approve",)
    assert spans[0].attributes[semconv.GEN_AI_AGENT_CHECKPOINT_ID] == first.latest_checkpoint_id

    configured.clear()
    again = flow()  # the whole run replayed: both calls come from the store
    assert again == [first, second]
    assert all(r.replayed for r in again)
    assert executed == ["draft", "approve", "approve"]
    spans = configured.spans("invoke_workflow review")
    assert [s.attributes[semconv.REPLAYED] for s in spans] == [True, True]
    kinds = [[(link.attributes or {}).get("spanpoint.link") for link in s.links] for s in spans]
    # Each replay links to its original execution; the resume also to the span that paused.
    assert kinds == [["original_execution"], ["original_execution", "paused"]]
    # A replayed call tells the same lifecycle story: paused, then resumed.
    assert [e.name for e in spans[0].events if e.name.startswith("gen_ai.agent.")] == [
        semconv.EVENT_AGENT_CHECKPOINTED,
        semconv.EVENT_AGENT_PAUSED,
    ]
    assert semconv.EVENT_AGENT_RESUMED in [e.name for e in spans[1].events]


def parallel_interrupts_graph() -> Any:
    def ask(name: str) -> Any:
        def node(state: State) -> dict[str, Any]:
            return {"log": [f"{name}={interrupt(f'{name}?')}"]}

        return node

    g = StateGraph(State)
    for name in ("legal", "finance"):
        g.add_node(name, ask(name))
        g.add_edge(START, name)
        g.add_edge(name, END)
    return g.compile(checkpointer=InMemorySaver())


def test_two_simultaneous_interrupts_resume_by_id(configured) -> None:
    runner = GraphRunner(parallel_interrupts_graph(), name="signoff", durability=QUIET)
    with spanpoint.run("R-2"):
        first = runner.invoke({"log": []}, thread_id="t")
        assert first.status == "interrupted"
        assert sorted(i.node for i in first.interrupts) == ["finance", "legal"]
        assert [i.index for i in first.interrupts] == [0, 1]
        with pytest.raises(NotInterruptedError, match="interrupt_index"):
            build_resume_request(first, "ok")
        by_node = {i.node: i for i in first.interrupts}
        legal_only = build_resume_request(first, "ok", interrupt_index=by_node["legal"].index)
        assert legal_only.input.resume == {by_node["legal"].id: "ok"}
        second = runner.invoke(legal_only)
        assert second.status == "interrupted"
        assert [i.node for i in second.interrupts] == ["finance"]
        third = runner.invoke(build_resume_request(second, "fine"))
    assert third.status == "completed"
    assert sorted(third.output["log"]) == ["finance=fine", "legal=ok"]


def test_both_interrupts_answered_at_once_with_a_mapping(configured) -> None:
    runner = GraphRunner(parallel_interrupts_graph(), name="signoff", durability=QUIET)
    first = runner.invoke({"log": []}, thread_id="t2")
    answers = {i.id: i.node.upper() for i in first.interrupts}
    done = runner.invoke(build_resume_request(first, answers))
    assert sorted(done.output["log"]) == ["finance=FINANCE", "legal=LEGAL"]


def test_a_subgraph_interrupt_reports_its_namespace(configured) -> None:
    def inner(state: State) -> dict[str, Any]:
        return {"log": [f"inner={interrupt('inner?')}"]}

    sub = StateGraph(State)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    parent = StateGraph(State)
    parent.add_node("child", sub.compile())
    parent.add_edge(START, "child")
    runner = GraphRunner(parent.compile(checkpointer=InMemorySaver()), name="p", durability=QUIET)

    first = runner.invoke({"log": []}, thread_id="t3")
    (info,) = first.interrupts
    assert info.node == "inner"
    assert info.namespace.startswith("child:")
    assert info.value == "inner?"
    done = runner.invoke(build_resume_request(first, "yes"))
    assert done.output == {"log": ["inner=yes"]}


def test_resume_errors_are_clear(configured) -> None:
    runner = GraphRunner(approval_graph([]), name="review", durability=QUIET)
    first = runner.invoke({"log": []}, thread_id="t4")
    done = runner.invoke(build_resume_request(first, 1))
    with pytest.raises(NotInterruptedError, match="completed, not interrupted"):
        build_resume_request(done, 1)
    with pytest.raises(NotInterruptedError, match="out of range"):
        build_resume_request(first, 1, interrupt_index=3)
    with pytest.raises(spanpoint.ConfigurationError, match="RunResult"):
        build_resume_request({"status": "interrupted"}, 1)  # type: ignore[arg-type]


def test_a_static_breakpoint_continues_with_no_input(configured) -> None:
    executed: list[str] = []
    graph = approval_graph(executed)
    runner = GraphRunner(graph, name="review", durability=QUIET)
    stopped = runner.invoke({"log": []}, thread_id="t5", interrupt_before=["approve"])
    assert stopped.status == "interrupted" and stopped.interrupts == ()
    assert stopped.next_nodes == ("approve",)
    with pytest.raises(NotInterruptedError, match="breakpoint"):
        build_resume_request(stopped, "x")
    request = build_resume_request(stopped, None)
    assert request.input is None and request.thread_id == "t5"
    assert runner.invoke(request).status == "interrupted"  # now at the node's own interrupt


def test_resume_request_forms() -> None:
    request = RunRequest.resume("yes", thread_id="t")
    assert isinstance(request.input, Command) and request.input.resume == "yes"
    assert request.is_resume
    command = Command(resume={"id": 1})
    assert RunRequest.resume(command, thread_id="t").input is command
    assert not RunRequest.start({"a": 1}, thread_id="t").is_resume


def test_invoke_version_v2_results_replay_equal(configured) -> None:
    from langgraph.types import GraphOutput

    runner = GraphRunner(approval_graph([]), name="review", durability=QUIET)
    attempts = []
    for _ in range(2):
        with spanpoint.run("R-v2"):
            first = runner.invoke({"log": []}, thread_id="t", version="v2")
            second = runner.invoke(build_resume_request(first, "ok"), version="v2")
        attempts.append((first, second))
    (first, second), replayed = attempts
    assert isinstance(first.output, GraphOutput) and first.status == "interrupted"
    assert second.output == GraphOutput(value={"log": ["drafted", "approved=ok"]})
    assert replayed == (first, second)
    assert all(r.replayed for r in replayed)
    assert isinstance(replayed[0].output.interrupts, tuple)
