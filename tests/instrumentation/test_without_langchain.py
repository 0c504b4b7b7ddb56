"""LangGraph-only users install langchain-core alone: ``langchain`` is the
``spanpoint[langchain]`` extra, for ``create_agent`` middleware.

In a subprocess where ``langchain`` (not ``langchain_core``) cannot be imported: ``import
spanpoint``, ``GraphRunner`` on a ``StateGraph``, the zero-code instrumentor, and the model
and tool seams (every call a boundary in a run, replayed on a second attempt) all work, and a
name that needs ``langchain`` says which extra to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import importlib.abc, json, sys

class NoLangchain(importlib.abc.MetaPathFinder):
    """As if only langchain-core were installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "langchain" or name.startswith("langchain."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoLangchain())
sys.path.insert(0, TESTS)

from typing import TypedDict
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanpoint
from fakes import ConversationModel
from spanpoint.instrumentation import SpanpointInstrumentor

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
store = spanpoint.SqliteStore(DB)
spanpoint.configure(tracer_provider=provider, store=store)
out = {}

class Counter(TypedDict):
    n: int

builder = StateGraph(Counter)
builder.add_node("add", lambda s: {"n": s["n"] + 1})
builder.add_edge(START, "add")
builder.add_edge("add", END)
runner = spanpoint.GraphRunner(builder.compile(), name="counter")
with spanpoint.run("lg-only"):
    out["runner"] = runner.invoke({"n": 1}, thread_id="t").output

@tool
def lookup(ticket: str) -> str:
    """Look up a ticket."""
    EFFECTS.append(ticket)
    return f"ticket {ticket}: open"

EFFECTS = []
model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": "42"}}]])

def call_model(state):
    return {"messages": [model.bind_tools([lookup]).invoke(state["messages"])]}

agent = StateGraph(MessagesState)
agent.add_node("model", call_model)
agent.add_node("tools", ToolNode([lookup]))
agent.add_edge(START, "model")
agent.add_conditional_edges("model", tools_condition, ["tools", END])
agent.add_edge("tools", "model")
graph = agent.compile(name="handmade")

instrumentor = SpanpointInstrumentor()
instrumentor.instrument(tracer_provider=provider, strategy="calls")
answers = []
for attempt in range(2):
    with spanpoint.run("seams"):
        answers.append(graph.invoke({"messages": [("user", "hi")]})["messages"][-1].content)
instrumentor.uninstrument()
out["answers"] = answers
out["effects"] = EFFECTS
out["kinds"] = sorted(r.kind for r in store.list_checkpoints("seams"))
out["spans"] = sorted({s.name for s in exporter.get_finished_spans()})
out["replayed"] = sum(
    1 for s in exporter.get_finished_spans() if (s.attributes or {}).get("spanpoint.replayed")
)
try:
    spanpoint.CheckpointMiddleware
except ImportError as exc:
    out["middleware_error"] = str(exc)
try:
    from spanpoint.guard import GuardMiddleware
except ImportError as exc:
    out["guard_error"] = str(exc)
out["langchain_loaded"] = sorted(
    m for m in sys.modules if m == "langchain" or m.startswith("langchain.")
)
print(json.dumps(out))
'''


@pytest.mark.slow
def test_langgraph_only_users_need_no_langchain(tmp_path: Path) -> None:
    script = f"TESTS = {str(TESTS)!r}\nDB = {str(tmp_path / 'sp.db')!r}\n" + SCRIPT
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["runner"] == {"n": 2}
    assert out["answers"] == ["All done.", "All done."]
    assert out["effects"] == ["42"], "the tool ran once: the second attempt replayed it"
    assert out["kinds"] == ["model_call", "model_call", "tool_call"]
    assert {"chat fake-chat", "execute_tool lookup", "invoke_workflow handmade"} <= set(
        out["spans"]
    )
    assert out["replayed"] == 3
    for error in (out["middleware_error"], out["guard_error"]):
        assert "spanpoint[langchain]" in error
    assert out["langchain_loaded"] == []
