"""What a trace viewer shows without links or a click: replays, runs, interrupts.

Phoenix, and the trace lists of Jaeger and Tempo, show a span's name and status, and drop
span links. So a replayed span names its original as attributes (equal to its link) and says
"replayed" in its name; a run's root is a GenAI workflow span named after the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from conftest import Telemetry
from fakes import ConversationModel
from spanpoint import semconv

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]
REQUEST = {"messages": [{"role": "user", "content": "Ticket 7 please"}]}


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def agent() -> Any:
    return create_agent(
        ConversationModel(plan=PLAN),
        [lookup_ticket],
        middleware=[spanpoint.CheckpointMiddleware()],
        name="support",
    )


def hex_ids(span: Any) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def check_replays_name_their_originals(telemetry: Telemetry) -> None:
    spans = telemetry.spans()
    executed = {hex_ids(s): s for s in spans if s.attributes.get(semconv.REPLAYED) is False}
    replayed = [s for s in spans if s.attributes.get(semconv.REPLAYED) is True]
    assert len(replayed) >= 2  # a graph call and a step, or model and tool calls
    for span in replayed:
        attrs = span.attributes
        [link] = span.links
        ids = (attrs[semconv.REPLAY_ORIGINAL_TRACE_ID], attrs[semconv.REPLAY_ORIGINAL_SPAN_ID])
        assert ids == hex_ids(link)  # the attributes say what the link says
        original = executed[ids]  # and lead to the span that executed
        assert span.name == original.name + " (replayed)"
        assert attrs[semconv.BOUNDARY_PATH] == original.attributes[semconv.BOUNDARY_PATH]
        op = semconv.GEN_AI_OPERATION_NAME  # unchanged: GenAI-aware viewers classify it
        assert attrs.get(op) == original.attributes.get(op)
    # An executed span has neither.
    for span in executed.values():
        assert semconv.REPLAY_ORIGINAL_SPAN_ID not in span.attributes
        assert not span.name.endswith("(replayed)")


def test_a_replayed_call_names_its_original(configured: Telemetry) -> None:
    for _ in range(2):
        with spanpoint.run("v-1"):
            agent().invoke(REQUEST)
    check_replays_name_their_originals(configured)


def test_a_replayed_call_names_its_original_async(configured: Telemetry) -> None:
    async def go() -> None:
        for _ in range(2):
            async with spanpoint.run("v-2"):
                await agent().ainvoke(REQUEST)

    asyncio.run(go())
    check_replays_name_their_originals(configured)


def test_a_replayed_graph_call_and_step_name_their_originals(configured: Telemetry) -> None:
    @spanpoint.step
    def load(ticket: int) -> dict[str, Any]:
        return {"ticket": ticket}

    runner = spanpoint.GraphRunner(
        create_agent(ConversationModel(plan=PLAN), [lookup_ticket]), name="support"
    )
    for _ in range(2):
        with spanpoint.run("v-3"):
            load(7)
            runner.invoke(REQUEST, thread_id="v-3")
    check_replays_name_their_originals(configured)
