"""Explicit continuation: resume with a correction, and every rejection changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from guard_fakes import corrected, stuck_on_search
from guard_support import Tools, assert_history_valid, kinds, make_agent, make_graph_builder
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver

from harness import Telemetry
from spanpoint import semconv
from spanpoint.errors import (
    ConfigurationError,
    GuardConcurrentResumeError,
    GuardNotResumableError,
    GuardResumeArgumentError,
    GuardRunNotStoppedError,
    GuardStaleCheckpointError,
    GuardThreadStoppedError,
    GuardUnknownThreadError,
)
from spanpoint.guard import GuardConfig, GuardedGraph, compile_guarded_graph, guard_graph

HERE = Path(__file__).resolve().parent


def cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def stopped_runner(tools: Tools, script: Any = stuck_on_search, **config: Any) -> GuardedGraph:
    builder = make_graph_builder(script, [tools.make("search")])
    runner = compile_guarded_graph(builder, GuardConfig(**config), checkpointer=InMemorySaver())
    out = runner.invoke({"messages": [("user", "meaning of life?")]}, cfg("t"))
    assert out["guard_terminated"] is True
    return runner


def latest_checkpoint(runner: GuardedGraph, thread: str = "t") -> str:
    return runner.graph.get_state(cfg(thread)).config["configurable"]["checkpoint_id"]


def test_resume_with_a_correction_completes(otel: Telemetry, tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    runner = compile_guarded_graph(
        builder, GuardConfig(), checkpointer=InMemorySaver(), meter_provider=otel.meter_provider
    )
    runner.invoke({"messages": [("user", "meaning of life?")]}, cfg("t"))
    report = runner.get_report("t")
    assert report.terminated and report.resumable and report.checkpoint_id

    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = runner.resume(
            cfg("t", report.checkpoint_id),
            correction="Stop searching: the answer is 42.",
            additional_reflections=2,
            author="alice",
        )

    messages = out["messages"]
    assert kinds(messages)[-5:] == ["ai(search)", "skipped", "stop", "correction", "ai()"]
    assert messages[-1].text == "The answer is 42."
    correction = messages[-2]
    assert isinstance(correction, HumanMessage)
    assert correction.additional_kwargs["spanpoint_guard"] == {
        "kind": "correction",
        "author": "alice",
        "resume": 1,
    }
    assert_history_valid(messages)
    assert out["guard_terminated"] is False and out["guard_reason"] is None
    after = runner.get_report("t")
    assert (after.status, after.breaker, after.steps, after.tool_calls) == (
        "completed",
        "closed",
        5,
        4,
    )  # cumulative across the stop
    assert after.resumes[0]["author"] == "alice" and after.resumes[0]["granted"] == 2
    assert tools.count() == 3
    names = [n for n, _ in otel.guard_events("test")]
    assert names == [semconv.EVENT_GUARD_RESUMED, semconv.EVENT_GUARD_RECOVERED]
    assert runner.invoke({"messages": [("user", "thanks")]}, cfg("t"))  # no longer stopped


async def test_aresume_on_a_create_agent_agent(tools: Tools) -> None:
    agent = make_agent(stuck_on_search, [tools.make("search")], GuardConfig())
    runner = GuardedGraph(agent)
    await runner.ainvoke({"messages": [("user", "q")]}, cfg("a"))
    assert (await runner.aget_report("a")).terminated
    out = await runner.aresume(cfg("a"), correction="Answer from what you know.")
    assert out["messages"][-1].text == "The answer is 42."
    assert kinds(out["messages"])[-3:] == ["stop", "correction", "ai()"]


def test_a_stopped_thread_again_after_resume_needs_another_resume(tools: Tools) -> None:
    def ignores_first_correction(turn: int, messages: Sequence[BaseMessage]) -> Any:
        marks = [m.additional_kwargs.get("spanpoint_guard") or {} for m in messages]
        if sum(1 for mark in marks if mark.get("kind") == "correction") >= 2:
            return "fine"
        return [{"name": "search", "args": {"query": "again"}}]

    runner = stopped_runner(tools, ignores_first_correction)
    out = runner.resume(cfg("t"), correction="try something else")
    # The granted reflection was used, then the guard stopped again: counters continued.
    assert kinds(out["messages"])[-7:] == [
        "correction", "ai(search)", "t", "reflection", "ai(search)", "skipped", "stop"
    ]  # fmt: skip
    assert out["guard_reason"] == "tool_repeat"
    assert runner.get_report("t").resumable
    final = runner.resume(cfg("t"), correction="really, stop")
    assert final["messages"][-1].text == "fine"


def assert_unchanged(runner: GuardedGraph, before: str) -> None:
    assert latest_checkpoint(runner) == before


def test_plain_invoke_of_a_stopped_thread_is_refused(tools: Tools) -> None:
    runner = stopped_runner(tools)
    before = latest_checkpoint(runner)
    with pytest.raises(GuardThreadStoppedError, match="resume"):
        runner.invoke({"messages": [("user", "go on")]}, cfg("t"))
    with pytest.raises(GuardThreadStoppedError):
        list(runner.stream(None, cfg("t")))
    assert_unchanged(runner, before)


def test_unknown_thread_is_refused(tools: Tools) -> None:
    runner = stopped_runner(tools)
    with pytest.raises(GuardUnknownThreadError):
        runner.resume(cfg("nobody"), correction="x")
    with pytest.raises(GuardUnknownThreadError):
        runner.get_report("nobody")


def test_completed_run_is_refused(tools: Tools) -> None:
    builder = make_graph_builder(lambda turn, messages: "hello", [tools.make("search")])
    runner = compile_guarded_graph(builder, GuardConfig(), checkpointer=InMemorySaver())
    runner.invoke({"messages": [("user", "hi")]}, cfg("t"))
    before = latest_checkpoint(runner)
    with pytest.raises(GuardRunNotStoppedError, match="completed"):
        runner.resume(cfg("t"), correction="x")
    assert_unchanged(runner, before)


def test_budget_stop_is_not_resumable(tools: Tools) -> None:
    def diverse(turn: int, messages: Sequence[BaseMessage]) -> Any:
        return [{"name": "search", "args": {"query": f"q{turn}"}}]

    runner = stopped_runner(tools, diverse, max_steps=2)
    assert runner.get_report("t").termination["kind"] == "budget"
    before = latest_checkpoint(runner)
    with pytest.raises(GuardNotResumableError, match="max_steps"):
        runner.resume(cfg("t"), correction="x")
    with pytest.raises(GuardThreadStoppedError, match="budget stop is final"):
        runner.invoke({"messages": [("user", "more")]}, cfg("t"))
    assert_unchanged(runner, before)


def test_detector_stop_without_budget_left_is_not_resumable(tools: Tools) -> None:
    runner = stopped_runner(tools, max_steps=4)  # the 4th step is both the stop and the limit
    stop = runner.get_report("t").termination
    assert (stop["kind"], stop["reason"], stop["budget_spent"]) == (
        "detector",
        "tool_repeat",
        "max_steps",
    )
    before = latest_checkpoint(runner)
    with pytest.raises(GuardNotResumableError, match="max_steps budget spent"):
        runner.resume(cfg("t"), correction="x")
    assert_unchanged(runner, before)


def test_changed_checkpoint_is_refused(tools: Tools) -> None:
    runner = stopped_runner(tools)
    at_stop = latest_checkpoint(runner)
    runner.graph.update_state(cfg("t"), {"messages": [HumanMessage("edited meanwhile")]})
    moved = latest_checkpoint(runner)
    with pytest.raises(GuardStaleCheckpointError):
        runner.resume(cfg("t", at_stop), correction="x")
    with pytest.raises(GuardStaleCheckpointError):
        runner.resume(cfg("t"), correction="x")  # the stop is no longer the last word
    assert_unchanged(runner, moved)


@pytest.mark.parametrize(
    ("correction", "grant"),
    [
        ("", 1),
        ("   ", 1),
        (None, 1),
        ("ok", 0),
        ("ok", -1),
        ("ok", float("inf")),
        ("ok", 1.5),
        ("ok", True),
    ],
)
def test_bad_resume_arguments_are_refused(tools: Tools, correction: Any, grant: Any) -> None:
    runner = stopped_runner(tools)
    before = latest_checkpoint(runner)
    with pytest.raises(GuardResumeArgumentError):
        runner.resume(cfg("t"), correction=correction, additional_reflections=grant)
    assert_unchanged(runner, before)


def test_of_two_simultaneous_resumes_exactly_one_wins(tools: Tools) -> None:
    def slow_after_correction(turn: int, messages: Sequence[BaseMessage]) -> Any:
        if corrected(messages):
            time.sleep(0.5)  # keep the winner busy while the other one tries
            return "The answer is 42."
        return stuck_on_search(turn, messages)

    runner = stopped_runner(tools, slow_after_correction)
    at_stop = latest_checkpoint(runner)
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def attempt() -> None:
        barrier.wait()
        try:
            outcomes.append(runner.resume(cfg("t", at_stop), correction="answer now"))
        except GuardConcurrentResumeError as exc:
            outcomes.append(exc)

    workers = [threading.Thread(target=attempt) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    wins = [o for o in outcomes if isinstance(o, dict)]
    assert len(wins) == 1 and len(outcomes) == 2
    assert wins[0]["messages"][-1].text == "The answer is 42."
    assert kinds(wins[0]["messages"]).count("correction") == 1
    # Late, not simultaneous: the stop it names was consumed.
    with pytest.raises(GuardConcurrentResumeError, match="already resumed"):
        runner.resume(cfg("t", at_stop), correction="answer now")


WORKER = HERE / "guard_resume_worker.py"


def worker(db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(db), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )


def result_of(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_resume_in_another_process(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"

    def run(*args: str) -> dict[str, Any]:
        return result_of(worker(db, *args))

    stopped = run("start")
    assert stopped == {"terminated": True, "reason": "tool_repeat", "tool_runs": 3}
    resumed = run("resume")
    assert resumed["last"] == "The answer is 42."
    assert resumed["tool_runs"] == 0 and resumed["steps"] == 5
    assert resumed["kinds"][-3:] == ["stop", "correction", "ai()"]


@pytest.mark.slow
def test_of_two_processes_resuming_one_stop_exactly_one_wins(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    assert result_of(worker(db, "start"))["terminated"] is True
    stop = result_of(worker(db, "report"))["checkpoint_id"]
    racers = [worker(db, "race", "2", stop) for _ in range(2)]
    results = [result_of(p) for p in racers]
    assert sorted(r["won"] for r in results) == [False, True], results
    loser = next(r for r in results if not r["won"])
    assert loser["error"] == "GuardConcurrentResumeError"
    assert next(r for r in results if r["won"])["last"] == "The answer is 42."


def test_resume_an_error_loop_stopped_before_the_model(tools: Tools) -> None:
    @tool
    def flaky(query: str) -> str:
        """Always fails."""
        raise ToolException("down")

    flaky.handle_tool_error = True

    def until_corrected(turn: int, messages: Sequence[BaseMessage]) -> Any:
        if corrected(messages):
            return "Reported the outage instead."
        return [{"name": "flaky", "args": {"query": f"v{turn}"}}]

    runner = GuardedGraph(make_agent(until_corrected, [flaky], GuardConfig()))
    out = runner.invoke({"messages": [("user", "go")]}, cfg("e"))
    assert out["guard_reason"] == "error_loop"
    assert kinds(out["messages"])[-3:] == ["ai(flaky)", "t", "stop"]  # nothing was pending
    out = runner.resume(cfg("e"), correction="The service is down; report it.")
    assert kinds(out["messages"])[-3:] == ["stop", "correction", "ai()"]
    assert out["messages"][-1].text == "Reported the outage instead."
    assert_history_valid(out["messages"])


async def test_astream_of_a_stopped_thread_is_refused(tools: Tools) -> None:
    runner = stopped_runner(tools)
    with pytest.raises(GuardThreadStoppedError):
        async for _ in runner.astream(None, cfg("t")):
            pass


def test_runner_needs_a_guarded_checkpointed_graph(tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    with pytest.raises(ConfigurationError, match="needs a checkpointer"):
        compile_guarded_graph(builder, checkpointer=None)
    with pytest.raises(ConfigurationError, match="needs a guarded graph"):
        GuardedGraph(builder.compile(checkpointer=InMemorySaver()))
    with pytest.raises(ConfigurationError, match="compiled with a checkpointer"):
        GuardedGraph(guard_graph(builder).compile())
    with pytest.raises(ConfigurationError, match="tools_node='act'"):
        GuardedGraph(guard_graph(builder).compile(checkpointer=InMemorySaver()), tools_node="act")
    runner = compile_guarded_graph(builder, checkpointer=InMemorySaver())
    with pytest.raises(ConfigurationError, match="needs a thread"):
        runner.invoke({"messages": [("user", "q")]}, {})


def test_compile_guarded_graph_keeps_a_compiled_graphs_options(tools: Tools) -> None:
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    compiled = builder.compile(interrupt_before=["tools"], name="researcher")
    runner = compile_guarded_graph(compiled, checkpointer=InMemorySaver())
    assert runner.graph.name == "researcher"
    out = runner.invoke({"messages": [("user", "q")]}, cfg("i"))
    assert runner.graph.get_state(cfg("i")).next == ("tools",)  # paused before the tools
    assert tools.count() == 0 and out["guard_terminated"] is False
    with pytest.raises(ConfigurationError, match="already compiled"):
        compile_guarded_graph(compiled, checkpointer=InMemorySaver(), debug=True)
