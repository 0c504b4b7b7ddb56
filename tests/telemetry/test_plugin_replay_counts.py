"""The instrumented pytest session counts replayed boundaries per test, and a second session
on the same store replays nothing of the first.

``scripts/compat/upstream_suite.py --second-session`` runs an upstream suite twice on one
SQLite store (``SPANPOINT_PLUGIN_STORE``) and compares each test's replays: this pins what
that comparison reads. A small suite, run in real pytest subprocesses with calls durable on
checkpointed threads: two tests use the same thread id and the same conversation (so a
replay across tests would show), and one test pauses and resumes, where the model call made
before ``interrupt()`` replays within the test (so the count is live).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUITE = '''
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from fakes import ConversationModel


@tool
def lookup(ticket: str) -> str:
    """Look a ticket up."""
    return f"{ticket}: open"


def agent_run():
    model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": "T-1"}}]])
    agent = create_agent(model, [lookup], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "1"}}
    out = agent.invoke({"messages": [("user", "ticket T-1?")]}, config)
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"]


def test_agent_first():
    agent_run()


def test_agent_again_same_thread_id():
    agent_run()


class State(TypedDict):
    answer: str


def test_pause_and_resume_replays_within_the_test():
    model = ConversationModel(final="draft")
    seen = []

    def draft(state):
        reply = model.invoke([HumanMessage("write a draft")])
        seen.append(reply.content)
        approved = interrupt("approve?")
        return {"answer": f"{reply.content}:{approved}"}

    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "1"}}
    graph.invoke({"answer": ""}, config)
    assert graph.invoke(Command(resume="yes"), config)["answer"] == "draft:yes"
'''


def session(tmp_path: Path, store: Path, name: str) -> tuple[dict[str, int], str]:
    """One instrumented pytest session over SUITE on ``store``: (replays by test, output)."""
    report = tmp_path / f"{name}.jsonl"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SPANPOINT_", "OTEL_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "SPANPOINT_STRATEGY": "calls",
        "SPANPOINT_DURABLE": "thread",
        "SPANPOINT_PLUGIN_STORE": str(store),
        "SPANPOINT_PLUGIN_REPORT": str(report),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "spanpoint.pytest_plugin",
         "-p", "no:cacheprovider", "-p", "no:randomly", "test_suite.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    replays: dict[str, int] = {}
    for line in report.read_text().splitlines():
        data = json.loads(line)
        assert data["spans"].get("chat", 0) >= 5  # the calls really went through spanpoint
        for test, count in data["replays"].items():
            replays[test] = replays.get(test, 0) + count
    return replays, done.stdout


def test_second_session_on_the_same_store_replays_nothing_of_the_first(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    store = tmp_path / "checkpoints.db"
    first, out = session(tmp_path, store, "first")
    # The resumed task's model call replays (counted, under its test); nothing else does:
    # the second test's same thread id and conversation got nothing of the first's.
    assert first == {"test_suite.py::test_pause_and_resume_replays_within_the_test": 1}, first
    assert "3 passed" in out and "1 replayed" in out
    assert store.exists() and store.stat().st_size > 0
    second, out = session(tmp_path, store, "second")
    assert second == first, (first, second)
    assert "3 passed" in out
