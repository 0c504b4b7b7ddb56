"""Memory stays flat under thread durability (``SPANPOINT_DURABLE=thread``).

A thread's implicit durable scope never ends, so whatever it keeps per call would grow for
as long as the process serves the thread; the per-message input views a model call's
checkpoint is described with would grow with every conversation ever seen. Each case runs
in a fresh interpreter (zero-code, ``SPANPOINT_STRATEGY=calls``, both stores on disk):
warm up, then count the objects the collector tracks and the bytes tracemalloc holds, make
many more durable invokes, and count again. The growth must stay below a quarter of an
object and 100 bytes per invoke, while the store shows that every model and tool call was
really committed.
(bench/bench_thread_rss.py shows RSS over 10,000 invokes.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRIPT = r"""
import gc, json, sqlite3, sys, tracemalloc
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from fakes import ConversationModel
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.trace import TracerProvider
from typing_extensions import TypedDict

import spanpoint
from spanpoint.instrumentation import SpanpointInstrumentor
from spanpoint.stores import SqliteStore

mode, tmp, warm, more = sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])


@tool
def lookup(ticket: str) -> str:
    '''Look a ticket up.'''
    return f"{ticket}: open"


store = SqliteStore(tmp / "checkpoints.db")
provider = TracerProvider()
spanpoint.configure(tracer_provider=provider, store=store)
SpanpointInstrumentor().instrument(tracer_provider=provider)
saver = SqliteSaver(sqlite3.connect(tmp / "langgraph.db", check_same_thread=False))
model = ConversationModel(plan=[[{"name": "lookup", "args": {"ticket": "T-1"}}]])

if mode == "threads":  # an agent, each invoke on a new thread (many conversations)
    graph = create_agent(model, [lookup], checkpointer=saver)

    def invoke(i):
        request = {"messages": [("user", f"ticket batch {i}?")]}
        graph.invoke(request, {"configurable": {"thread_id": f"t-{i}"}})

    runs = lambda n: [f"thread:t-{i}" for i in range(n)]
    per_invoke = 3  # two model calls, one tool call
else:  # one thread served for ever: its state is replaced, never appended to

    class State(TypedDict):
        n: int
        answer: str

    def ask(state):
        reply = model.invoke([HumanMessage(f"question {state['n']}")])
        return {"answer": lookup.invoke({"ticket": str(reply.content)})}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=saver)

    def invoke(i):
        graph.invoke({"n": i, "answer": ""}, {"configurable": {"thread_id": "one"}})

    runs = lambda n: ["thread:one"]
    per_invoke = 2  # one model call, one tool call

invoke(0)  # untraced: the first call imports and builds whole libraries, far slower traced
# Traced through the rest of the warm-up: what it made and later freed nets out.
tracemalloc.start()
for i in range(1, warm):
    invoke(i)
gc.collect()
objects_before = len(gc.get_objects())
bytes_before = tracemalloc.get_traced_memory()[0]
for i in range(warm, warm + more):
    invoke(i)
gc.collect()
objects_after = len(gc.get_objects())
bytes_after = tracemalloc.get_traced_memory()[0]
tracemalloc.stop()
committed = sum(len(store.list_checkpoints(r)) for r in runs(warm + more))
print(json.dumps({
    "objects": objects_after - objects_before,
    "bytes": bytes_after - bytes_before,
    "committed": committed,
    "expected": (warm + more) * per_invoke,
}))
"""


@pytest.mark.parametrize("mode", ["threads", "one_thread"])
def test_thread_durable_invokes_keep_memory_flat(tmp_path: Path, mode: str) -> None:
    # Warmed past what is kept, bounded, for reuse: the 256 (small, recordless) scopes of new
    # threads, and the 64 input views made last. Kept records or views cost about one object
    # and hundreds of bytes per invoke: 200 invokes show that many times over the bounds below.
    warm, more = (270, 200) if mode == "threads" else (80, 200)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SPANPOINT_", "OTEL_"))},
        "SPANPOINT_STRATEGY": "calls",
        "SPANPOINT_DURABLE": "thread",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(HERE.parent), mode, str(tmp_path), str(warm), str(more)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # Every call was a durable boundary, committed: the invokes really went through spanpoint.
    assert found["committed"] == found["expected"], found
    # Nothing kept per call or per message: under a quarter of an object and 100 bytes per
    # invoke (kept records and views made this 0.9 and 640 with new threads, 8 and 3,200 on
    # one thread).
    assert found["objects"] < more // 4, found
    assert found["bytes"] < 100 * more, found
