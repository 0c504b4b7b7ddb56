"""A create_agent agent with three tool calls in three model turns, for the crash tests.

Usage: calls_agent.py RUN_ID STORE EFFECTS [--crash-after-tools N [--sigkill]] [--async]

Each tool counts its side effect in EFFECTS (a line per call, under a lock). With
``--crash-after-tools N`` the process calls ``os._exit(17)`` right after the N-th tool call
returned (its boundary span has ended, so it is committed, or queued under
``SPANPOINT_DURABILITY=async``); ``--sigkill`` kills it with SIGKILL instead. Prints a JSON
line with the final conversation and, per span, its name and whether it was replayed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentMiddleware
from langchain_core.tools import StructuredTool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

import spanpoint
from fakes import ConversationModel, count_effect

PLAN = [
    [{"name": "lookup_ticket", "args": {"ticket_id": 7}}],
    [{"name": "check_inventory", "args": {"sku": "toner-42"}}],
    [{"name": "approve_ticket", "args": {"ticket_id": 7, "note": "ship toner"}}],
]


class CrashAfterTools(AgentMiddleware):  # type: ignore[type-arg]
    """Kills the process once the N-th tool call of the conversation has returned."""

    def __init__(self, after: int | None, sigkill: bool = False) -> None:
        self.after = after
        self.sigkill = sigkill

    def _maybe_crash(self, request: Any) -> None:
        done = sum(1 for m in request.state["messages"] if m.type == "tool") + 1
        if self.after is not None and done >= self.after:
            if self.sigkill:  # no exit handler runs: nothing queued is flushed
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(17)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = handler(request)
        self._maybe_crash(request)
        return result

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        result = await handler(request)
        self._maybe_crash(request)
        return result


def build_tools(effects: str, use_async: bool) -> list[StructuredTool]:
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, "lookup_ticket")
        return f"ticket {ticket_id}: printer out of toner"

    def check_inventory(sku: str) -> str:
        """Check stock for a SKU."""
        count_effect(effects, "check_inventory")
        return f"{sku}: 3 in stock"

    def approve_ticket(ticket_id: int, note: str) -> str:
        """Approve a ticket's resolution."""
        count_effect(effects, "approve_ticket")
        return f"ticket {ticket_id} approved: {note}"

    async def alookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        await asyncio.sleep(0)
        return lookup_ticket(ticket_id)

    async def acheck_inventory(sku: str) -> str:
        """Check stock for a SKU."""
        await asyncio.sleep(0)
        return check_inventory(sku)

    async def aapprove_ticket(ticket_id: int, note: str) -> str:
        """Approve a ticket's resolution."""
        await asyncio.sleep(0)
        return approve_ticket(ticket_id, note)

    if use_async:  # coroutine-only tools: a sync call path would fail loudly
        pairs = [
            (alookup_ticket, "lookup_ticket"),
            (acheck_inventory, "check_inventory"),
            (aapprove_ticket, "approve_ticket"),
        ]
        return [StructuredTool.from_function(coroutine=fn, name=name) for fn, name in pairs]
    return [
        StructuredTool.from_function(fn) for fn in (lookup_ticket, check_inventory, approve_ticket)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_id")
    parser.add_argument("store")
    parser.add_argument("effects")
    parser.add_argument("--crash-after-tools", type=int, default=None)
    parser.add_argument("--sigkill", action="store_true")
    parser.add_argument("--async", dest="use_async", action="store_true")
    args = parser.parse_args()

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spanpoint.configure(tracer_provider=provider, store=args.store)

    agent = create_agent(
        ConversationModel(plan=PLAN, final="Ticket 7 resolved."),
        build_tools(args.effects, args.use_async),
        system_prompt="You are a support agent.",
        middleware=[
            CrashAfterTools(args.crash_after_tools, args.sigkill),
            spanpoint.CheckpointMiddleware(),
        ],
    )
    request = {"messages": [{"role": "user", "content": "Ticket 7: the printer is out of toner"}]}
    if args.use_async:

        async def run_async() -> Any:
            async with spanpoint.run(args.run_id, name="support"):
                return await agent.ainvoke(request)

        result = asyncio.run(run_async())
    else:
        with spanpoint.run(args.run_id, name="support"):
            result = agent.invoke(request)
    spans = [
        # The call's GenAI name (a replay adds " (replayed)"), and whether it was replayed.
        [s.name.removesuffix(" (replayed)"), bool((s.attributes or {}).get("spanpoint.replayed"))]
        for s in exporter.get_finished_spans()
        if s.name.startswith(("chat ", "execute_tool "))
    ]
    conversation = [
        [m.type, m.content, [c["name"] for c in getattr(m, "tool_calls", [])]]
        for m in result["messages"]
    ]
    print(json.dumps({"conversation": conversation, "spans": spans}))


if __name__ == "__main__":
    main()
