"""Draft -> interrupt -> send, and a RetryPolicy node (issue 15, acceptance 1 and 2).

A custom StateGraph node drafts with ``model.invoke``, calls ``interrupt({"approve": draft})``
and then sends the draft with ``send_email.invoke``. LangGraph re-runs an interrupted node from
its first line on resume. The fake model's drafts carry ``os.urandom`` bytes, so a second real
execution writes a different draft: "the text sent equals the text shown" holds only if the
resume *replayed* the model call. Every real model execution and every send is logged to a
file under a lock.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from durable_agents import draft_graph, send_email_tool
from durable_fakes import DraftModel, labels, read_log
from durable_support import DURABLE_ENV, HERE, child_env, load_instrumentor
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, RetryPolicy

import spanpoint
from harness import Telemetry
from spawn import run_python

REQUEST = "refund order 42"
MODEL_CALL = f"draft:{REQUEST}"


def sent_texts(log: Path) -> list[str]:
    return [e["text"] for e in read_log(log) if e["label"] == "send_email"]


def assert_sent_what_was_shown(log: Path, shown: str) -> None:
    assert labels(log, "model") == {MODEL_CALL: 1}, "the model ran again on resume"
    assert sent_texts(log) == [shown], "the text sent is not the draft the person approved"


@pytest.fixture
def thread_scoped(otel: Telemetry, monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    """Zero-code: the instrumentor with the documented durable switch set to the thread."""
    monkeypatch.setenv(DURABLE_ENV, "thread")
    instrumentor = load_instrumentor()
    instrumentor.instrument(tracer_provider=otel.provider, store=otel.store)
    yield otel
    instrumentor.uninstrument()


# --- one process -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "via"),
    [("graph_call", "invoke"), ("calls", "invoke"), ("graph_call", "step"), ("calls", "step")],
)
def test_resume_in_one_process_sends_the_draft_that_was_shown(
    otel: Telemetry, log: Path, strategy: str, via: str
) -> None:
    graph = draft_graph(checkpointer=InMemorySaver(), via=via)
    runner = spanpoint.GraphRunner(graph, name="drafter", strategy=strategy)
    with spanpoint.run("ticket-1"):
        paused = runner.invoke({"request": REQUEST}, thread_id="t-1")
        assert paused.status == "interrupted"
        shown = paused.interrupts[0].value["approve"]
        done = runner.invoke(paused.resume_request("yes"))
    assert done.status == "completed"
    assert done.output["sent"] == shown
    assert_sent_what_was_shown(log, shown)


@pytest.mark.parametrize("strategy", ["graph_call", "calls"])
async def test_resume_with_ainvoke_sends_the_draft_that_was_shown(
    otel: Telemetry, log: Path, strategy: str
) -> None:
    graph = draft_graph(checkpointer=InMemorySaver(), via="ainvoke")
    runner = spanpoint.GraphRunner(graph, name="drafter", strategy=strategy)
    async with spanpoint.run("ticket-2"):
        paused = await runner.ainvoke({"request": REQUEST}, thread_id="t-2")
        shown = paused.interrupts[0].value["approve"]
        done = await runner.ainvoke(paused.resume_request("yes"))
    assert done.output["sent"] == shown
    assert_sent_what_was_shown(log, shown)


# --- zero code: the documented switch, nothing else --------------------------------------


def test_zero_code_thread_switch_resume_sends_the_draft_that_was_shown(
    thread_scoped: Telemetry, log: Path
) -> None:
    graph = draft_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t-3"}}
    paused = graph.invoke({"request": REQUEST}, config)
    shown = paused["__interrupt__"][0].value["approve"]
    done = graph.invoke(Command(resume="yes"), config)
    assert done["sent"] == shown
    assert_sent_what_was_shown(log, shown)


def test_zero_code_thread_switch_with_ainvoke(thread_scoped: Telemetry, log: Path) -> None:
    graph = draft_graph(checkpointer=InMemorySaver(), via="ainvoke")
    config = {"configurable": {"thread_id": "t-4"}}

    async def both() -> tuple[Any, Any]:
        paused = await graph.ainvoke({"request": REQUEST}, config)
        return paused, await graph.ainvoke(Command(resume="yes"), config)

    paused, done = asyncio.run(both())
    shown = paused["__interrupt__"][0].value["approve"]
    assert done["sent"] == shown
    assert_sent_what_was_shown(log, shown)


def test_zero_code_thread_switch_a_different_thread_or_turn_executes(
    thread_scoped: Telemetry, log: Path
) -> None:
    """Only a re-execution of one task replays: another thread, or the thread's next turn
    with the very same input, calls the model again."""
    graph = draft_graph(checkpointer=InMemorySaver())
    drafts = []
    for thread in ("t-5", "t-6", "t-5"):
        config = {"configurable": {"thread_id": thread}}
        paused = graph.invoke({"request": REQUEST}, config)
        drafts.append(paused["__interrupt__"][0].value["approve"])
        graph.invoke(Command(resume="yes"), config)
    assert labels(log, "model") == {MODEL_CALL: 3}
    assert len(set(drafts)) == 3
    assert sent_texts(log) == drafts


# --- across two processes (SqliteSaver, resume in a new process) -------------------------


def phase(
    folder: Path, name: str, mode: str, log: Path, *, kill: str | None = None
) -> dict[str, Any]:
    env = child_env(DURABLE_LOG=str(log), SPANPOINT_TRACE_FILE=str(folder / "traces.jsonl"))
    if kill is not None:
        env["DRAFT_KILL"] = kill
    command = [str(HERE / "draft_app.py"), name, str(folder), "ticket-9", mode]
    executable = None
    if mode == "plain":
        # Zero code: the real launcher, the documented switch, an app that never imports us.
        launcher = Path(sys.executable).with_name("opentelemetry-instrument")
        command, executable = [sys.executable, *command], str(launcher)
        env.update(
            {
                DURABLE_ENV: "thread",
                "SPANPOINT_STORE": str(folder / "spanpoint.db"),
                # The other LangChain instrumentations of the dev environment stay out of it.
                "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "langchain",
            }
        )
    # The launcher is another interpreter: run_python falls back to a real subprocess for it.
    done = run_python(command, timeout=120, cwd=folder, env=env, executable=executable)
    if kill is not None:
        assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-4000:])
        return {}
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["graph_call", "calls", "plain"])
def test_resume_in_a_new_process_sends_the_draft_that_was_shown(tmp_path: Path, mode: str) -> None:
    log = tmp_path / "executions.jsonl"
    started = phase(tmp_path, "start", mode, log)
    shown = started["shown"]
    assert shown and shown.startswith("Draft reply to")
    resumed = phase(tmp_path, "resume", mode, log)
    assert resumed["sent"] == shown
    assert_sent_what_was_shown(log, shown)
    pids = {e["pid"] for e in read_log(log)}
    assert len(pids) == 2, "the model ran in the first process and the send in the second"


@pytest.mark.parametrize("mode", ["graph_call", "calls", "plain"])
def test_a_node_killed_between_its_model_call_and_its_interrupt_shows_the_same_draft(
    tmp_path: Path, mode: str
) -> None:
    # SIGKILL inside the node, after its model call committed and before interrupt(): the
    # next process runs the node again from its first line; the model call replays, so the
    # person is shown the draft attempt 1 paid for, and that draft is what is sent. The
    # runner's rerun continues the thread itself; a plain LangGraph app (zero-code, thread
    # scope) resumes a crashed thread as LangGraph says, with `None` input (a second submission
    # of the input there is a new turn of the thread, which executes).
    log = tmp_path / "executions.jsonl"
    phase(tmp_path, "start", mode, log, kill="before-interrupt")
    assert labels(log, "model") == {MODEL_CALL: 1} and sent_texts(log) == []
    started = phase(tmp_path, "continue" if mode == "plain" else "start", mode, log)
    shown = started["shown"]
    assert shown and shown.startswith("Draft reply to")
    resumed = phase(tmp_path, "resume", mode, log)
    assert resumed["sent"] == shown
    assert_sent_what_was_shown(log, shown)
    assert len({e["pid"] for e in read_log(log)}) == 2, "model in process 1, send in process 3"


# --- a node with a RetryPolicy -----------------------------------------------------------


class RetryState(TypedDict, total=False):
    request: str
    sent: str


def retry_graph(failures_file: Path, *, checkpointer: Any = None) -> Any:
    """model.invoke, then a tool that fails twice before it succeeds, under a RetryPolicy."""
    model = DraftModel()
    send_email = send_email_tool()

    def node(state: RetryState) -> dict[str, str]:
        draft = str(model.invoke([HumanMessage(state["request"])]).content)
        with open(failures_file, "a+", encoding="utf-8") as fh:
            fh.seek(0)
            tries = len(fh.read().split()) + 1
            fh.write("try\n")
        if tries <= 2:
            raise ConnectionError(f"mail server unavailable (try {tries})")
        send_email.invoke({"text": draft})
        return {"sent": draft}

    builder = StateGraph(RetryState)
    policy = RetryPolicy(
        max_attempts=3, initial_interval=0.01, jitter=False, retry_on=ConnectionError
    )
    builder.add_node("draft_and_send", node, retry_policy=policy)
    builder.add_edge(START, "draft_and_send")
    builder.add_edge("draft_and_send", END)
    return builder.compile(checkpointer=checkpointer, name="retrying")


@pytest.mark.parametrize("strategy", ["graph_call", "calls"])
@pytest.mark.parametrize("saver", ["none", "memory"])
def test_a_retried_node_calls_the_model_once(
    otel: Telemetry, log: Path, tmp_path: Path, strategy: str, saver: str
) -> None:
    checkpointer = InMemorySaver() if saver == "memory" else None
    graph = retry_graph(tmp_path / "tries.txt", checkpointer=checkpointer)
    runner = spanpoint.GraphRunner(graph, name="retrying", strategy=strategy)
    with spanpoint.run("ticket-r"):
        done = runner.invoke({"request": REQUEST}, thread_id="t-r")
    assert done.status == "completed"
    assert (tmp_path / "tries.txt").read_text().split() == ["try"] * 3
    assert labels(log, "model") == {MODEL_CALL: 1}, "each retry called the model again"
    [logged] = [e["text"] for e in read_log(log) if e["kind"] == "model"]
    assert sent_texts(log) == [logged] == [done.output["sent"]]


def test_zero_code_thread_switch_retried_node_calls_the_model_once(
    thread_scoped: Telemetry, log: Path, tmp_path: Path
) -> None:
    saver = SqliteSaver(sqlite3.connect(tmp_path / "lg.db", check_same_thread=False))
    graph = retry_graph(tmp_path / "tries.txt", checkpointer=saver)
    graph.invoke({"request": REQUEST}, {"configurable": {"thread_id": "t-z"}})
    assert labels(log, "model") == {MODEL_CALL: 1}
    assert len(sent_texts(log)) == 1
