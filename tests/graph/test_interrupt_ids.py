"""spanpoint reports LangGraph's own interrupt ids (``Interrupt.id``), never ids of its own.

Generated over how many ``interrupt()`` calls one task makes in a row (LangGraph 1.2.20+
gives each its own id; older versions gave them all the task's first), sync and async: each
pause's id in the ``RunResult``, the span and the resume request is the id LangGraph's thread
state holds, and answering each by id resumes the task to the end, every side effect once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import spanpoint
from fakes import count_effect, read_effects
from spanpoint import semconv
from spanpoint.graph import DurabilityPolicy, GraphRunner, build_resume_request


class Answers(TypedDict, total=False):
    answers: list[str]


def asking_graph(effects: Path, questions: int) -> Any:
    def ask(state: Answers) -> dict[str, Any]:
        got = [str(interrupt({"question": n})) for n in range(questions)]
        count_effect(effects, "asked")
        return {"answers": got}

    g = StateGraph(Answers)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("questions", [1, 2, 3])
def test_each_pause_carries_langgraph_s_own_interrupt_id(
    configured: Any, tmp_path: Path, questions: int, form: str
) -> None:
    effects = tmp_path / "effects"
    graph = asking_graph(effects, questions)
    runner = GraphRunner(graph, name="asker", durability=DurabilityPolicy(warn_in_process=False))

    def call(request: Any, **kwargs: Any) -> Any:
        if form == "sync":
            return runner.invoke(request, **kwargs)
        return asyncio.run(runner.ainvoke(request, **kwargs))

    state = {"configurable": {"thread_id": "t"}}
    with spanpoint.run(f"ids-{questions}-{form}"):
        result = call({}, thread_id="t")
        for n in range(questions):
            (pending,) = graph.get_state(state).interrupts
            (info,) = result.interrupts
            assert info.id == pending.id  # LangGraph's id, as its thread holds it
            assert info.value == {"question": n}
            assert result.pending_state["interrupt_ids"] == [pending.id]
            request = build_resume_request(result, f"answer {n}", interrupt_index=0)
            assert request.input.resume == {pending.id: f"answer {n}"}
            result = call(request)
    assert result.status == "completed"
    assert result.output == {"answers": [f"answer {n}" for n in range(questions)]}
    assert read_effects(effects) == {"asked": 1}
    paused = [
        s.attributes[semconv.LANGGRAPH_INTERRUPT_IDS]
        for s in configured.graph_spans("invoke_workflow asker")
        if semconv.LANGGRAPH_INTERRUPT_IDS in s.attributes
    ]
    assert len(paused) == questions
