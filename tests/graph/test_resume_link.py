"""A resume links to the span that paused, in this process or in another one later that
shares spanpoint's store. The pausing call notes its span's traceparent in spanpoint's store
under the paused checkpoint (LangGraph's checkpoint metadata carries nothing of it); the
resume finds the paused checkpoint with the thread's state, the span from the note, and links
to it, next to its ``gen_ai.agent.resumed`` event with the interrupt ids and
``gen_ai.agent.resumed_from.*``.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import spanpoint
from spanpoint import semconv
from spanpoint.graph import DurabilityPolicy, GraphRunner, build_resume_request

QUIET = DurabilityPolicy(warn_in_process=False)


class State(TypedDict, total=False):
    answer: str


def ask(state: State) -> dict[str, str]:
    return {"answer": str(interrupt("approve?"))}


def graph(db: Path) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    conn = sqlite3.connect(db, check_same_thread=False)
    return g.compile(checkpointer=SqliteSaver(conn))


def paused_links(span: Any) -> list[tuple[str, str]]:
    return [
        (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x"))
        for link in span.links
        if (link.attributes or {}).get("spanpoint.link") == "paused"
    ]


def resumed_event(span: Any) -> Any:
    [event] = [e for e in span.events if e.name == semconv.EVENT_AGENT_RESUMED]
    return event


def test_a_resume_in_the_same_process_links_to_the_paused_span(
    configured: Any, tmp_path: Path
) -> None:
    runner = GraphRunner(graph(tmp_path / "lg.db"), name="approver", durability=QUIET)
    paused = runner.invoke({"answer": ""}, thread_id="t")
    runner.invoke(build_resume_request(paused, "yes"))
    _, resume = configured.graph_spans("invoke_workflow approver")
    assert paused_links(resume) == [(paused.trace_id, paused.span_id)]
    event = resumed_event(resume)
    assert list(event.attributes[semconv.LANGGRAPH_INTERRUPT_IDS]) == [paused.interrupts[0].id]
    assert event.attributes[semconv.GEN_AI_AGENT_RESUMED_FROM_ID] == paused.interrupts[0].id


PAUSE_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from opentelemetry.sdk.trace import TracerProvider
import spanpoint
from test_resume_link import QUIET, graph
spanpoint.configure(tracer_provider=TracerProvider(), store=spanpoint.SqliteStore({store!r}))
runner = spanpoint.GraphRunner(graph({db!r}), name="approver", durability=QUIET)
paused = runner.invoke({{"answer": ""}}, thread_id="t")
print(json.dumps([paused.trace_id, paused.span_id, paused.interrupts[0].id]))
"""


def test_a_resume_in_another_process_links_to_the_span_that_paused(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    configured = configured_sqlite  # the store both processes share
    db = tmp_path / "lg.db"
    script = PAUSE_SCRIPT.format(
        tests=str(Path(__file__).parent), db=str(db), store=str(tmp_path / "checkpoints.db")
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    trace_id, span_id, interrupt_id = json.loads(done.stdout.strip().splitlines()[-1])
    from langgraph.types import Command

    runner = GraphRunner(graph(db), name="approver", durability=QUIET)  # knows nothing of it
    result = runner.invoke(Command(resume="yes"), thread_id="t")
    assert result.output == {"answer": "yes"}
    [resume] = configured.graph_spans("invoke_workflow approver")
    assert paused_links(resume) == [(trace_id, span_id)]
    assert resume.context.trace_id != int(trace_id, 16), "precondition: another trace"
    event = resumed_event(resume)
    assert list(event.attributes[semconv.LANGGRAPH_INTERRUPT_IDS]) == [interrupt_id]
    assert event.attributes[semconv.GEN_AI_AGENT_RESUMED_FROM_TYPE] == "pause"


# --- zero-code: the unchanged graph under the instrumentor ---------------------------------


@pytest.fixture
def instrumented(configured: Any) -> Iterator[Any]:
    from spanpoint.instrumentation import SpanpointInstrumentor

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    yield configured
    instrumentor.uninstrument()


@pytest.fixture
def thread_scope() -> Iterator[None]:
    """SPANPOINT_DURABLE=thread for one test, as the instrumentor would set it."""
    from spanpoint.calls import tasks

    before = tasks.durable_scope()
    tasks.set_durable_scope("thread")
    yield
    tasks.set_durable_scope(before)


@pytest.mark.parametrize("in_run", [False, True])
def test_a_zero_code_resume_links_to_the_paused_span_and_lists_the_ids(
    instrumented: Any, tmp_path: Path, in_run: bool, request: pytest.FixtureRequest
) -> None:
    from langgraph.types import Command

    if not in_run:  # outside a run, only the thread scope lets spanpoint write to the thread
        request.getfixturevalue("thread_scope")
    app = graph(tmp_path / "lg.db")
    config = {"configurable": {"thread_id": "t"}}
    with spanpoint.run("R-zero") if in_run else nullcontext():
        paused = app.invoke({"answer": ""}, config)
        [pending] = paused["__interrupt__"]
        assert app.invoke(Command(resume="yes"), config) == {"answer": "yes"}
    first, second = instrumented.graph_spans("invoke_workflow LangGraph")
    assert paused_links(second) == [
        (format(first.context.trace_id, "032x"), format(first.context.span_id, "016x"))
    ]
    event = resumed_event(second)
    assert list(event.attributes[semconv.LANGGRAPH_INTERRUPT_IDS]) == [pending.id]
    assert event.attributes[semconv.GEN_AI_CONVERSATION_ID] == "t"


def test_outside_a_durable_scope_zero_code_leaves_langgraph_checkpoints_unchanged(
    instrumented: Any, tmp_path: Path
) -> None:
    """docs/compatibility.md: the instrumentor changes nothing LangGraph keeps. LangGraph's
    own suite compares checkpoint metadata, so no spanpoint key may land there unasked."""
    from langgraph.types import Command

    app = graph(tmp_path / "lg.db")
    config = {"configurable": {"thread_id": "t"}}
    paused = app.invoke({"answer": ""}, config)
    [pending] = paused["__interrupt__"]
    assert app.invoke(Command(resume="yes"), config) == {"answer": "yes"}
    for snapshot in app.get_state_history(config):
        assert not [key for key in snapshot.metadata or {} if "spanpoint" in key]
    # The resume is still described on its span: the ids it answers, read from the thread.
    _first, second = instrumented.graph_spans("invoke_workflow LangGraph")
    event = resumed_event(second)
    assert list(event.attributes[semconv.LANGGRAPH_INTERRUPT_IDS]) == [pending.id]
