"""The model and tool seams and the task anchor (issue 15 build items 1 and 2).

Model and tool calls made anywhere in a LangGraph task are boundaries inside a durable run,
keyed by the task LangGraph executes, so a task executed again replays its completed calls;
never two boundaries for one call; streams stay events; the seams are applied once and act
only inside a runner call's context.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import InjectedState
from langgraph.types import Command, interrupt

import spanpoint
import spanpoint.graph
from fakes import ConversationModel, count_effect, read_effects
from harness import count_redactions
from spanpoint.calls import seams, tasks
from spanpoint.errors import ConfigurationError
from spanpoint.instrumentation import durable_from_env

REQUEST = {"messages": [{"role": "user", "content": "ticket 42?"}]}


class State(TypedDict, total=False):
    request: str
    draft: str
    sent: str


def kinds(telemetry: Any, run_id: str) -> list[str]:
    return sorted(cp.kind for cp in telemetry.store.list_checkpoints(run_id))


def test_a_middleware_call_gets_one_boundary_not_two(configured: Any, tmp_path: Path) -> None:
    """CheckpointMiddleware's boundary is around the model and the tool already: the seams,
    installed for the runner's call, step aside (same kind, same task execution)."""
    effects = tmp_path / "effects.txt"

    @tool
    def lookup(ticket: int) -> str:
        """Look a ticket up."""
        count_effect(effects, "lookup")
        return f"ticket {ticket}: open"

    model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": 42}}]])
    agent = create_agent(model, [lookup], middleware=[spanpoint.CheckpointMiddleware()])
    runner = spanpoint.GraphRunner(agent, name="support", strategy="calls")
    with spanpoint.run("one-boundary"):
        runner.invoke(REQUEST, thread_id="t-1")
    assert kinds(configured, "one-boundary") == ["model_call", "model_call", "tool_call"]
    assert len(configured.spans("chat fake-chat")) == 2
    assert len(configured.spans("execute_tool lookup")) == 1
    assert read_effects(effects) == {"lookup": 1}


def draft_node_graph(effects: Path, *, stream: bool = False) -> Any:
    model = ConversationModel(final="Dear customer, your refund is on its way.")

    def draft(state: State) -> dict[str, str]:
        messages = [HumanMessage(state["request"])]
        if stream:
            text = "".join(str(chunk.content) for chunk in model.stream(messages))
        else:
            text = str(model.invoke(messages).content)
        count_effect(effects, "draft")
        answer = interrupt({"approve": text})
        return {"draft": text, "sent": f"{answer}: {text}"}

    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", END)
    return builder.compile(checkpointer=InMemorySaver(), name="drafter")


def test_a_node_executed_again_on_resume_replays_its_model_call(
    configured: Any, tmp_path: Path
) -> None:
    """The resume is another graph call; the task is the same one: the model call replays."""
    effects = tmp_path / "effects.txt"
    runner = spanpoint.GraphRunner(draft_node_graph(effects), name="drafter", strategy="calls")
    with spanpoint.run("resume-1"):
        paused = runner.invoke({"request": "refund"}, thread_id="t-2")
        done = runner.invoke(spanpoint.graph.build_resume_request(paused, "yes"))
    assert done.output["sent"].startswith("yes: Dear customer")
    chats = configured.spans("chat fake-chat")
    assert [bool(s.attributes.get("spanpoint.replayed")) for s in chats] == [False, True]
    assert kinds(configured, "resume-1") == ["model_call"]


def test_an_explicit_stream_stays_events_and_is_never_replayed(
    configured: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    runner = spanpoint.GraphRunner(
        draft_node_graph(effects, stream=True), name="drafter", strategy="calls"
    )
    with spanpoint.run("stream-1"):
        paused = runner.invoke({"request": "refund"}, thread_id="t-3")
        runner.invoke(spanpoint.graph.build_resume_request(paused, "yes"))
    assert kinds(configured, "stream-1") == []  # nothing committed for a stream
    assert configured.spans("chat fake-chat") == []


def model_node_graph(effects: Path, before_call: Any = None) -> Any:
    """A graph whose one node asks a model (counted), after ``before_call()``."""
    model = ConversationModel(final="Dear customer, your refund is on its way.")

    def draft(state: State) -> dict[str, str]:
        if before_call is not None:
            before_call()
        text = str(model.invoke([HumanMessage(state["request"])]).content)
        count_effect(effects, "draft")
        return {"draft": text}

    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_edge(START, "draft")
    return builder.compile(name="drafter")


def test_the_seams_are_applied_once_and_act_only_inside_a_runner_call(
    configured: Any, tmp_path: Path
) -> None:
    """No class attribute changes per call: what the first runner call applied stays, the
    same objects, through later calls. Outside a runner call the seams pass calls through:
    the same graph invoked directly in a run commits nothing and opens no chat span."""
    effects = tmp_path / "effects.txt"
    graph = model_node_graph(effects)
    runner = spanpoint.GraphRunner(graph, name="drafter", strategy="calls")
    with spanpoint.run("seams-1"):
        runner.invoke({"request": "refund"}, thread_id="t-4")
    applied = (
        BaseChatModel.__dict__["_generate_with_cache"],
        BaseChatModel.__dict__["_agenerate_with_cache"],
        BaseTool.__dict__["run"],
        BaseTool.__dict__["arun"],
    )
    assert all(getattr(f, "__module__", "") == "spanpoint.calls.seams" for f in applied)
    with spanpoint.run("seams-2"):
        runner.invoke({"request": "cancel"}, thread_id="t-4b")
        graph.invoke({"request": "plain"})  # no runner call here: passed through
    assert (
        BaseChatModel.__dict__["_generate_with_cache"],
        BaseChatModel.__dict__["_agenerate_with_cache"],
        BaseTool.__dict__["run"],
        BaseTool.__dict__["arun"],
    ) == applied
    assert read_effects(effects) == {"draft": 3}
    assert kinds(configured, "seams-1") == ["model_call"]
    assert kinds(configured, "seams-2") == ["model_call"]  # not the plain call
    assert len(configured.spans("chat fake-chat")) == 2


def test_a_call_that_ends_first_leaves_the_seams_to_the_one_still_running(
    configured: Any, tmp_path: Path
) -> None:
    """Two GraphRunner calls overlap (threads of a server): the first one to end does not
    turn the seams off for the second, whose model call, made after, is still a boundary."""
    effects = tmp_path / "effects.txt"
    first_done = threading.Event()
    slow = spanpoint.GraphRunner(
        model_node_graph(effects, lambda: first_done.wait(10)), name="slow", strategy="calls"
    )
    fast = spanpoint.GraphRunner(model_node_graph(effects), name="fast", strategy="calls")

    def call_slow() -> None:
        with spanpoint.run("overlap-slow"):
            slow.invoke({"request": "refund"}, thread_id="t-slow")

    worker = threading.Thread(target=call_slow)
    worker.start()
    with spanpoint.run("overlap-fast"):
        fast.invoke({"request": "cancel"}, thread_id="t-fast")
    first_done.set()
    worker.join(10)
    assert read_effects(effects) == {"draft": 2}
    assert kinds(configured, "overlap-fast") == ["model_call"]
    assert kinds(configured, "overlap-slow") == ["model_call"]


def test_the_deprecated_installed_name_still_turns_the_seams_on() -> None:
    with pytest.warns(DeprecationWarning, match=r"seams\.enabled\(\)"):
        block = seams.installed()
    assert not seams.PATCHES.live
    with block:
        assert seams.PATCHES.live
    assert not seams.PATCHES.live


def test_injected_state_is_part_of_a_tool_calls_identity(configured: Any, tmp_path: Path) -> None:
    """The tool reads the state it is injected: another state is another call (it executes);
    the same state again replays."""
    effects = tmp_path / "effects.txt"

    @tool
    def notify(text: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Notify the customer."""
        count_effect(effects, "notify")
        return f"notified {state['noise']}: {text}"

    def graph(noise: str) -> Any:
        def node(state: State) -> dict[str, str]:
            out = notify.invoke({"text": "refund sent", "state": {"noise": noise}})
            return {"sent": str(out)}

        builder = StateGraph(State)
        builder.add_node("n", node)
        builder.add_edge(START, "n")
        return builder.compile()

    for noise in ("first", "second", "first"):
        runner = spanpoint.GraphRunner(graph(noise), name="notifier", strategy="calls")
        with spanpoint.run("injected-1"):
            result = runner.invoke({"request": "x"}, thread_id="t-5")
        assert result.output["sent"] == f"notified {noise}: refund sent"
    assert read_effects(effects) == {"notify": 2}


def test_a_different_input_executes(configured: Any, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    runner = spanpoint.GraphRunner(draft_node_graph(effects), name="drafter", strategy="calls")
    with spanpoint.run("inputs-1"):
        runner.invoke({"request": "refund"}, thread_id="t-6")
        runner.invoke({"request": "cancel"}, thread_id="t-7")
    assert read_effects(effects) == {"draft": 2}
    chats = configured.spans("chat fake-chat")
    assert [bool(s.attributes.get("spanpoint.replayed")) for s in chats] == [False, False]


def test_the_durable_switch_names_its_values() -> None:
    assert durable_from_env("Thread") == "thread"
    assert durable_from_env("") == "run"
    with pytest.raises(ConfigurationError, match=r"SPANPOINT_DURABLE=.always..*.thread."):
        durable_from_env("always")
    with pytest.raises(ConfigurationError, match="off, run, thread"):
        tasks.set_durable_scope("sometimes")


def test_outside_a_task_the_task_anchor_keeps_the_engine_default(configured: Any) -> None:
    """Not in a LangGraph task: no task frame; a step keys as before."""
    assert tasks.task_parent(None, None) is None
    with spanpoint.run("plain-1") as run:
        assert run.scope is not None
        assert tasks.task_parent(run.scope, run.scope.root) is None
    assert not seams.installed_by(object())


def test_a_resume_command_replays_through_the_instrumentor_in_a_run(
    configured: Any, tmp_path: Path
) -> None:
    """Zero code with the default durable scope (run): inside spanpoint.run, a plain
    graph.invoke resume replays the model call the interrupted node completed."""
    from spanpoint.instrumentation import SpanpointInstrumentor

    effects = tmp_path / "effects.txt"
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    try:
        graph = draft_node_graph(effects)
        config = {"configurable": {"thread_id": "t-8"}}
        with spanpoint.run("zero-1"):
            paused = graph.invoke({"request": "refund"}, config)
            shown = paused["__interrupt__"][0].value["approve"]
            done = graph.invoke(Command(resume="yes"), config)
    finally:
        instrumentor.uninstrument()
    assert done["sent"] == f"yes: {shown}"
    chats = configured.spans("chat fake-chat")
    assert [bool(s.attributes.get("spanpoint.replayed")) for s in chats] == [False, True]


def test_a_thread_scope_follows_the_configured_store(configured: Any) -> None:
    """SPANPOINT_DURABLE=thread keeps one scope per thread; configure() with another store
    moves the thread's next calls there, never into the store it had before."""
    from spanpoint.stores import MemoryStore

    first, second = MemoryStore(), MemoryStore()
    spanpoint.configure(tracer_provider=configured.provider, store=first)
    assert tasks._thread_scope("t-9").store is first
    assert tasks._thread_scope("t-9") is tasks._thread_scope("t-9")
    spanpoint.configure(tracer_provider=configured.provider, store=second)
    assert tasks._thread_scope("t-9").store is second


def test_thread_scope_makes_the_middlewares_calls_durable_once(
    configured: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPANPOINT_DURABLE=thread with CheckpointMiddleware and no run: the middleware's calls
    are the thread's boundaries (not span-only calls the seams would then step aside for)."""
    from spanpoint.instrumentation import SpanpointInstrumentor

    @tool
    def lookup(ticket: int) -> str:
        """Look a ticket up."""
        return f"ticket {ticket}: open"

    monkeypatch.setenv("SPANPOINT_DURABLE", "thread")
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    try:
        model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": 42}}]])
        agent = create_agent(
            model,
            [lookup],
            middleware=[spanpoint.CheckpointMiddleware()],
            checkpointer=InMemorySaver(),
        )
        agent.invoke(REQUEST, {"configurable": {"thread_id": "t-m"}})
    finally:
        instrumentor.uninstrument()
        tasks.set_durable_scope("run")
    assert kinds(configured, "thread:t-m") == ["model_call", "model_call", "tool_call"]
    assert len(configured.spans("chat fake-chat")) == 2
    assert len(configured.spans("execute_tool lookup")) == 1


def test_a_direct_tool_calls_arguments_are_redacted_once_for_both_views(
    configured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool invoked in a node (the tool seam): the checkpoint's view and input view show
    the same redacted arguments, walked once."""
    args = {"ticket": 42, "api_key": "plain-secret-value-3"}
    walked = count_redactions(monkeypatch, args)

    @tool
    def lookup(ticket: int, api_key: str) -> str:
        """Look a ticket up."""
        return f"ticket {ticket}: open"

    def node(state: State) -> dict[str, str]:
        return {"draft": str(lookup.invoke(args))}

    builder = StateGraph(State)
    builder.add_node("lookup", node)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", END)
    runner = spanpoint.GraphRunner(builder.compile(), name="direct", strategy="calls")
    with spanpoint.run("direct-redact"):
        runner.invoke({"request": "x"}, thread_id="t-redact")
    (cp,) = configured.store.list_checkpoints("direct-redact")
    assert cp.kind == "tool_call"
    assert cp.view["args"] == {"ticket": 42, "api_key": "[REDACTED]"}
    assert cp.input_view == {"args": cp.view["args"]}
    assert len(walked) == 1


class _CountedNamespace(str):
    """A checkpoint namespace that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        type(self).compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_tasks_execution_number_is_found_without_scanning_the_runs_earlier_ones() -> None:
    """Anchor R numbers the executions of a logical task under one frame in the order their
    namespaces are first seen. Under a run's root every graph call adds one: finding the
    number must not compare with every earlier namespace (O(k) per call, O(k²) per run)."""
    from spanpoint.run import Frame, RunScope
    from spanpoint.stores.memory import MemoryStore

    scope = RunScope("exec-numbers", None, MemoryStore(), 1, False, 30.0, 30.0)
    enclosing = Frame.at("", "")
    spaces = [_CountedNamespace(f"model:{i:032x}") for i in range(300)]
    numbers = [tasks._execution(scope, enclosing, "model|1|pull", ns) for ns in spaces]
    assert numbers == list(range(300))
    _CountedNamespace.compared = 0
    again = [tasks._execution(scope, enclosing, "model|1|pull", ns) for ns in spaces[::-1]]
    assert again == list(range(300))[::-1]  # the same namespace is the same execution
    assert tasks._execution(scope, enclosing, "tools|2|push", spaces[5]) == 0  # its own count
    assert _CountedNamespace.compared <= 2 * len(spaces)  # not 300 x 300 / 2


def test_a_finished_run_leaves_nothing_alive_in_the_task_frames(
    configured: Any, tmp_path: Path
) -> None:
    """The task frames a run's boundaries hang under are let go of when the run ends: they
    held the run's scope (its journal) and every LangGraph runtime of its tasks, so a process
    running many long runs kept each one alive until 16,384 later tasks pushed it out."""
    import gc
    import weakref

    from spanpoint.run import current_run

    @tool
    def lookup(ticket: int) -> str:
        """Look a ticket up."""
        return f"ticket {ticket}: open"

    model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": 42}}]])
    agent = create_agent(model, [lookup], middleware=[spanpoint.CheckpointMiddleware()])
    runner = spanpoint.GraphRunner(agent, name="support", strategy="calls")
    before = set(tasks._TASKS)
    with spanpoint.run("frames-let-go"):
        scope = current_run()
        assert scope is not None
        runner.invoke(REQUEST, thread_id="t-frames")
        made = [t for t, entry in tasks._TASKS.items() if entry.scope is scope]
        assert made == []  # each task execution's frame left when its task ended
    assert kinds(configured, "frames-let-go") == ["model_call", "model_call", "tool_call"]
    assert not any(entry.scope is scope for entry in tasks._TASKS.values())
    assert set(tasks._TASKS) <= before
    gone = weakref.ref(scope)
    del scope
    gc.collect()
    assert gone() is None, "the finished run's scope is still kept alive"
