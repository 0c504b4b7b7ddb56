"""GraphRunner: the graph_call span, requests, failures, durability policy, strategies."""

from __future__ import annotations

import asyncio
import logging
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver, MemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from opentelemetry.trace import StatusCode

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.errors import ConfigurationError, MissingCheckpointerError
from spanpoint.graph import DurabilityPolicy, GraphRunner, RunRequest


class Count(TypedDict):
    n: int


def counting_graph(
    executed: list[str], checkpointer: Any = None, fail_at: int | None = None
) -> Any:
    def bump(state: Count) -> dict[str, int]:
        executed.append("bump")
        if fail_at is not None and state["n"] == fail_at:
            raise KeyError(f"boom at {state['n']}")
        return {"n": state["n"] + 1}

    g = StateGraph(Count)
    g.add_node("bump", bump)
    g.add_edge(START, "bump")
    g.add_edge("bump", END)
    return g.compile(checkpointer=checkpointer)


def test_a_graph_call_is_one_workflow_span_with_genai_attributes(configured) -> None:
    runner = GraphRunner(counting_graph([], InMemorySaver()), name="counter")
    with spanpoint.run("G-1"):
        result = runner.invoke({"n": 1}, thread_id="th-1")
    assert result.status == "completed" and result.output == {"n": 2}
    (span,) = configured.spans("invoke_workflow counter")
    attrs = span.attributes
    assert span.name == "invoke_workflow counter"
    assert attrs[semconv.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert attrs[semconv.GEN_AI_AGENT_NAME] == "counter"
    assert attrs[semconv.GEN_AI_WORKFLOW_NAME] == "counter"
    assert attrs[semconv.GEN_AI_CONVERSATION_ID] == "th-1"
    assert attrs[semconv.BOUNDARY_KIND] == "graph_call"
    assert attrs[semconv.REPLAYED] is False
    assert attrs[semconv.STATUS] == "completed"
    assert attrs[semconv.GEN_AI_AGENT_CHECKPOINT_ID] == result.latest_checkpoint_id
    assert attrs[semconv.LANGGRAPH_CHECKPOINTER] == "InMemorySaver"
    ctx = span.get_span_context()
    assert (result.trace_id, result.span_id) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    (checkpoint,) = configured.store.list_checkpoints("G-1")
    assert checkpoint.kind == "graph_call" and checkpoint.path == "counter"
    assert checkpoint.view == {"graph": "counter", "thread_id": "th-1", "resume": False}


def test_an_agent_is_an_invoke_agent_span_and_usage_is_summed(configured) -> None:
    agent = create_agent(ConversationModel(final="hello"), [], name="helper")
    runner = GraphRunner(agent, name="helper")
    result = runner.invoke({"messages": [HumanMessage("hi")]}, thread_id="a-1")
    (span,) = configured.spans("invoke_agent helper")
    assert span.attributes[semconv.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert semconv.GEN_AI_WORKFLOW_NAME not in span.attributes
    assert result.output["messages"][-1].content == "hello"
    assert result.latest_checkpoint_id is None  # no checkpointer: no get_state
    assert set(result.usage) <= {"input_tokens", "output_tokens", "total_tokens"}


def test_a_failure_is_an_error_span_the_exception_unchanged_and_nothing_committed(
    configured,
) -> None:
    executed: list[str] = []
    runner = GraphRunner(counting_graph(executed, fail_at=5), name="counter")
    with pytest.raises(KeyError, match="boom at 5") as caught, spanpoint.run("G-2"):
        runner.invoke({"n": 5}, thread_id="t")
    assert type(caught.value) is KeyError
    (span,) = configured.spans("invoke_workflow counter")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[semconv.ERROR_TYPE] == "KeyError"
    assert any(e.name == "exception" for e in span.events)
    assert configured.store.list_checkpoints("G-2") == []
    with spanpoint.run("G-2"):  # the rerun executes again: nothing was committed
        assert runner.invoke({"n": 4}, thread_id="t").output == {"n": 5}


def test_outside_a_run_it_traces_without_a_store(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(counting_graph(executed), name="counter")
    runner.invoke({"n": 0}, thread_id="t")
    runner.invoke({"n": 0}, thread_id="t")
    assert executed == ["bump", "bump"]
    assert len(configured.spans("invoke_workflow counter")) == 2
    assert configured.store.list_runs() == []


def test_repeated_identical_calls_in_one_run_are_distinct_boundaries(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(counting_graph(executed), name="counter")
    for _ in range(2):
        with spanpoint.run("G-3"):
            first = runner.invoke({"n": 0}, thread_id="t")
            second = runner.invoke({"n": 0}, thread_id="t")
    assert executed == ["bump", "bump"]  # two executions on attempt 1, none on attempt 2
    assert first.output == second.output and first.replayed and second.replayed
    assert first.span_id != second.span_id  # each replays its own original call
    graph_spans = configured.graph_spans("invoke_workflow")
    ordinals = [s.attributes[semconv.BOUNDARY_ORDINAL] for s in graph_spans]
    assert ordinals == [0, 1, 0, 1]


def test_run_request_merges_the_thread_and_passes_the_rest_through() -> None:
    request = RunRequest.start(
        {"n": 1},
        thread_id="mine",
        checkpoint_ns="",
        context={"user": "u"},
        configurable={"model": "small"},
        config={"configurable": {"thread_id": "theirs", "x": 1}, "tags": ["a"]},
    )
    config = request.graph_config()
    assert config["configurable"] == {
        "thread_id": "mine",
        "x": 1,
        "model": "small",
        "checkpoint_ns": "",
    }
    assert config["tags"] == ["a"]
    for bad in ("", "   ", None, 3):
        with pytest.raises(ConfigurationError, match="thread_id"):
            RunRequest.start({}, thread_id=bad)  # type: ignore[arg-type]


def test_bad_runner_arguments_are_rejected_with_the_fix(configured) -> None:
    graph = counting_graph([])
    with pytest.raises(ConfigurationError, match="stable non-empty name"):
        GraphRunner(graph, name="")
    with pytest.raises(ConfigurationError, match="strategy"):
        GraphRunner(graph, name="g", strategy="nodes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="invoke"):
        GraphRunner(object(), name="g")
    runner = GraphRunner(graph, name="g")
    with pytest.raises(ConfigurationError, match="thread_id"):
        runner.invoke({"n": 1})
    with pytest.raises(ConfigurationError, match="conflicts"):
        runner.invoke(RunRequest.start({"n": 1}, thread_id="a"), thread_id="b")


def test_durability_policy_detects_in_process_checkpointers_by_type(
    configured, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    class TeamSaver(InMemorySaver):
        """A subclass with an innocent name is still in-process."""

    for saver in (InMemorySaver(), MemorySaver(), TeamSaver()):
        runner = GraphRunner(counting_graph([], saver), name="g")
        assert any("lives in this process" in w for w in runner.info.warnings)
        with pytest.raises(MissingCheckpointerError, match="SqliteSaver"):
            GraphRunner(
                counting_graph([], saver),
                name="g",
                durability=DurabilityPolicy(require_checkpointer=True),
            )
    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        bare = GraphRunner(counting_graph([]), name="bare")
    assert "no checkpointer" in caplog.text
    assert bare.invoke({"n": 0}, thread_id="t").warnings == bare.info.warnings
    executed: list[str] = []
    with pytest.raises(MissingCheckpointerError):
        GraphRunner(
            counting_graph(executed),
            name="g",
            durability=DurabilityPolicy(require_checkpointer=True),
        )
    assert executed == []  # raised before the graph ran
    with SqliteSaver.from_conn_string(str(tmp_path / "lg.db")) as durable:
        runner = GraphRunner(
            counting_graph([], durable),
            name="g",
            durability=DurabilityPolicy(require_checkpointer=True),
        )
        assert runner.info.warnings == ()


def test_calls_strategy_needs_no_middleware_and_is_not_a_boundary(configured) -> None:
    # The seams make every model and tool call a boundary, middleware or not (issue 15).
    agent = create_agent(ConversationModel(final="ok"), [])
    runner = GraphRunner(agent, name="plain", strategy="calls")
    assert not any("CheckpointMiddleware" in w for w in runner.info.warnings)
    checkpointed = create_agent(
        ConversationModel(final="ok"), [], middleware=[spanpoint.CheckpointMiddleware()]
    )
    calls = GraphRunner(checkpointed, name="agent", strategy="calls")
    assert not any("nothing to checkpoint" in w for w in calls.info.warnings)
    with spanpoint.run("C-1"):
        result = calls.invoke({"messages": [HumanMessage("hi")]}, thread_id="t")
    assert result.output["messages"][-1].content == "ok"
    (graph_span,) = configured.spans("invoke_agent agent")
    assert semconv.BOUNDARY_KIND not in graph_span.attributes
    assert graph_span.attributes[semconv.STRATEGY] == "calls"
    (chat,) = [s for s in configured.spans() if s.name.startswith("chat")]
    assert chat.parent is not None and chat.parent.span_id == graph_span.context.span_id
    kinds = [cp.kind for cp in configured.store.list_checkpoints("C-1")]
    assert kinds == ["model_call"]  # the call is the boundary, not the graph
    with spanpoint.run("C-0"):
        runner.invoke({"messages": [HumanMessage("hi")]}, thread_id="t0")
    assert [cp.kind for cp in configured.store.list_checkpoints("C-0")] == ["model_call"]


def test_ainvoke_behaves_like_invoke(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(counting_graph(executed, InMemorySaver()), name="counter")

    async def flow() -> Any:
        async with spanpoint.run("A-1"):
            return await runner.ainvoke({"n": 1}, thread_id="t")

    first = asyncio.run(flow())
    second = asyncio.run(flow())
    assert executed == ["bump"]
    assert first == second and second.replayed and not first.replayed
    assert first.output == {"n": 2} and first.latest_checkpoint_id
    spans = configured.spans("invoke_workflow counter")
    assert [s.attributes[semconv.REPLAYED] for s in spans] == [False, True]


def test_any_object_with_invoke_works(configured) -> None:
    class Echo:
        def invoke(self, value: Any, config: Any = None, **kwargs: Any) -> Any:
            return {"echo": value, "thread": config["configurable"]["thread_id"]}

    runner = GraphRunner(Echo(), name="echo")
    with spanpoint.run("E-1"):
        assert runner.invoke("x", thread_id="t").output == {"echo": "x", "thread": "t"}
    assert asyncio.run(runner.ainvoke("y", thread_id="t")).output["echo"] == "y"


def test_counting_nodes_returns_exactly_what_langgraph_invoke_returns(configured) -> None:
    """The summary's node counters come from LangGraph's own stream; outputs must not drift."""
    from collections import Counter

    from langgraph.types import interrupt

    from spanpoint.graph.invoke import counts_nodes, invoke_counting

    class Pair(TypedDict):
        log: Annotated[list[str], operator.add]

    def ask(name: str) -> Any:
        return lambda state: {"log": [f"{name}={interrupt(name)}"]}

    fan = StateGraph(Pair)
    for name in ("x", "y"):
        fan.add_node(name, ask(name))
        fan.add_edge(START, name)
    sub = StateGraph(Pair)
    sub.add_node("inner", ask("inner"))
    sub.add_edge(START, "inner")
    parent = StateGraph(Pair)
    parent.add_node("child", sub.compile())
    parent.add_edge(START, "child")
    agent = create_agent(ConversationModel(final="done"), [])
    cases = [
        (counting_graph([], InMemorySaver()), {"n": 1}, 1),
        (fan.compile(checkpointer=InMemorySaver()), {"log": []}, 0),
        (parent.compile(checkpointer=InMemorySaver()), {"log": []}, 0),
        (agent, {"messages": [HumanMessage("hi")]}, 1),
    ]

    def same_shape(output: dict[str, Any]) -> dict[str, Any]:
        # Interrupt ids, message ids and checkpoint ids differ between two real runs.
        shaped = dict(output)
        shaped["__interrupt__"] = [i.value for i in output.get("__interrupt__", ())]
        shaped["messages"] = [(m.type, m.content) for m in output.get("messages", ())]
        return shaped

    for graph, graph_input, expected_nodes in cases:
        nodes: Counter[str] = Counter()
        assert counts_nodes(graph, {})
        ours = invoke_counting(graph, graph_input, {"configurable": {"thread_id": "a"}}, {}, nodes)
        theirs = graph.invoke(graph_input, {"configurable": {"thread_id": "b"}})
        assert same_shape(ours) == same_shape(theirs)
        assert set(ours) == set(theirs)
        assert sum(nodes.values()) == expected_nodes
    assert not counts_nodes(agent, {"stream_mode": "updates"})


def test_the_fast_fingerprint_of_a_plain_request_is_the_general_identity_digest() -> None:
    """Checkpoint keys must not depend on which path computed them (nor change across
    versions): a request with only an input and a thread takes a shortcut to the same
    ``serde.fingerprint`` of the full identity."""
    from langgraph.types import Command

    from spanpoint import serde
    from spanpoint.graph import request_fingerprint

    inputs: list[Any] = [
        {"n": 1},
        {"messages": [HumanMessage("héllo ✓", id="volatile")], "x": [1.5, None, True]},
        {"nested": {"b": {"c": (1, 2)}, "a": {3, 4}}},
        "plain text",
        None,
        Command(resume={"id-1": "yes"}),
    ]
    for graph_input in inputs:
        req = RunRequest.start(graph_input, thread_id="thread-ü")
        identity = {
            "input": req.input,
            "thread_id": req.thread_id,
            "checkpoint_ns": None,
            "context": None,
            "configurable": {},
            "kwargs": {},
        }
        assert request_fingerprint(req, {}) == serde.fingerprint(identity), graph_input
    # Anything beyond an input and a thread takes the general path.
    assert request_fingerprint(RunRequest.start(1, thread_id="t", context={"k": 1}), {}) is None
    assert request_fingerprint(RunRequest.start(1, thread_id="t"), {"durability": "sync"}) is None


def test_a_run_result_survives_the_store_field_for_field() -> None:
    """encode_result lists the fields by hand (it runs on every graph call): a field added to
    RunResult must be added there too, or a replayed result would silently lose it."""
    import dataclasses

    from spanpoint import serde
    from spanpoint.graph.results import InterruptInfo, RunResult, decode_result, encode_result

    result = RunResult(
        status="interrupted",
        output={"messages": [HumanMessage("hi")], "__interrupt__": []},
        thread_id="t",
        latest_checkpoint_id="cp-1",
        checkpoint_ns="",
        next_nodes=("ask",),
        interrupts=(InterruptInfo(0, "i-1", {"q": "ok?"}, "ask", "task-1", "child:1"),),
        pending_state={"thread_id": "t", "interrupt_ids": ["i-1"]},
        usage={"input_tokens": 3},
        warnings=("no checkpointer",),
        trace_id="a" * 32,
        span_id="b" * 16,
    )
    encoded = encode_result(result)
    names = {f.name for f in dataclasses.fields(RunResult)} - {"replayed"}
    assert set(encoded) == names | {"v"}
    replayed = decode_result(serde.loads(*serde.dumps(encoded)))
    assert replayed == result and replayed.replayed


def test_a_completed_call_reports_the_state_get_state_reports(configured) -> None:
    """A call that ran to its end reads only the latest checkpoint (not the whole snapshot);
    what it reports must be what get_state says, and a stop (breakpoint compiled into the
    graph) must still be found."""

    def check(result: Any, graph: Any, thread_id: str) -> None:
        state = graph.get_state({"configurable": {"thread_id": thread_id}})
        assert result.latest_checkpoint_id == state.config["configurable"]["checkpoint_id"]
        assert result.checkpoint_ns == state.config["configurable"]["checkpoint_ns"] == ""
        assert result.next_nodes == tuple(state.next)

    graph = counting_graph([], InMemorySaver())
    runner = GraphRunner(graph, name="counter", durability=DurabilityPolicy(warn_in_process=False))
    with spanpoint.run("S-1"):
        done = runner.invoke({"n": 1}, thread_id="s")
        again = runner.invoke({"n": 5}, thread_id="s")  # a later checkpoint on the thread
    adone = asyncio.run(runner.ainvoke({"n": 1}, thread_id="a"))
    assert done.status == again.status == adone.status == "completed"
    assert done.latest_checkpoint_id != again.latest_checkpoint_id
    check(again, graph, "s")
    check(adone, graph, "a")

    g = StateGraph(Count)
    g.add_node("bump", lambda state: {"n": state["n"] + 1})
    g.add_node("last", lambda state: {"n": state["n"] * 10})
    g.add_edge(START, "bump")
    g.add_edge("bump", "last")
    g.add_edge("last", END)
    stopping = g.compile(checkpointer=InMemorySaver(), interrupt_after=["bump"])
    runner = GraphRunner(stopping, name="stops", durability=DurabilityPolicy(warn_in_process=False))
    stopped = runner.invoke({"n": 1}, thread_id="b")
    assert stopped.status == "interrupted" and stopped.next_nodes == ("last",)
    check(stopped, stopping, "b")
    finished = runner.invoke(None, thread_id="b")
    assert finished.status == "completed" and finished.output == {"n": 20}
    check(finished, stopping, "b")
