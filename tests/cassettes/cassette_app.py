"""An agent recorded into a cassette and replayed from it, each in its own process.

``python tests/cassettes/cassette_app.py CASSETTE MODE SYNC|ASYNC EFFECTS [SYSTEM_PROMPT]`` runs a
``create_agent`` agent (parallel tool calls, a sub-agent inside a tool, a tool that is
``always_execute``) inside ``spanpoint.cassette(CASSETTE, mode=MODE)`` and prints the final
messages as JSON. Every model call and tool execution appends a line to EFFECTS. With
``SPANPOINT_TEST_OFFLINE=1`` the model is unreachable: a call raises, as a provider would with
no network. ``SPANPOINT_TEST_PLANT=1`` makes the model pass an API key as a tool argument.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool

import spanpoint
from fakes import CountingModel, count_effect
from spanpoint.stores import MemoryStore

EFFECTS = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("effects.txt")


def counted(name: str) -> dict[str, Any]:
    """Count the model's executions under its name; unreachable when the test is offline."""
    offline = os.environ.get("SPANPOINT_TEST_OFFLINE") == "1"
    return {"effects": str(EFFECTS), "effect": f"model:{name}", "offline": offline}


API_KEY = "sk-PLANTtoolArgKey0123456789abcdef"  # planted in a tool argument
CONFIG_SECRET = "PLANTcfgApiKey7f3a"  # planted in the config


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    count_effect(EFFECTS, "tool:lookup_ticket")
    return f"ticket {ticket_id}: printer out of toner"


@tool
def call_vendor(order: str, api_key: str = "") -> str:
    """Order from the vendor (with an API key, when the model passes one)."""
    count_effect(EFFECTS, "tool:call_vendor")
    return f"vendor accepted order {order}"


@tool
def clock() -> str:
    """The time now (always executed: never replayed)."""
    count_effect(EFFECTS, "tool:clock")
    return "12:00"


SUB_PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 99}}]]


@tool
def ask_specialist(question: str) -> str:
    """Ask a specialist sub-agent."""
    count_effect(EFFECTS, "tool:ask_specialist")
    sub = create_agent(
        CountingModel(
            plan=SUB_PLAN,
            final="Specialist: replace the toner.",
            model_name="sub",
            **counted("sub"),
        ),
        [lookup_ticket],
        system_prompt="You are a printer specialist.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    result = sub.invoke({"messages": [{"role": "user", "content": question}]})
    return str(result["messages"][-1].content)


@tool
async def aask_specialist(question: str) -> str:
    """Ask a specialist sub-agent (async)."""
    count_effect(EFFECTS, "tool:ask_specialist")
    sub = create_agent(
        CountingModel(
            plan=SUB_PLAN,
            final="Specialist: replace the toner.",
            model_name="sub",
            **counted("sub"),
        ),
        [lookup_ticket],
        system_prompt="You are a printer specialist.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    result = await sub.ainvoke({"messages": [{"role": "user", "content": question}]})
    return str(result["messages"][-1].content)


PLAN = [
    [  # parallel tool calls
        {"name": "lookup_ticket", "args": {"ticket_id": 7}},
        {"name": "lookup_ticket", "args": {"ticket_id": 8}},
        {"name": "clock", "args": {}},
    ],
    [{"name": "call_vendor", "args": {"order": "toner"}}],
    [{"name": "SPECIALIST", "args": {"question": "Why is the printer empty?"}}],
]


def make_agent(system_prompt: str, is_async: bool) -> Any:
    specialist = aask_specialist if is_async else ask_specialist
    plan = [
        [{**c, "name": specialist.name} if c["name"] == "SPECIALIST" else c for c in turn]
        for turn in PLAN
    ]
    if os.environ.get("SPANPOINT_TEST_PLANT") == "1":  # the model passes a key to a tool
        plan[1] = [{"name": "call_vendor", "args": {"order": "toner", "api_key": API_KEY}}]
    policy = spanpoint.CallCheckpointPolicy(tools={"clock": "always_execute"})
    return create_agent(
        CountingModel(
            plan=plan, final="Done: toner ordered.", model_name="main", **counted("main")
        ),
        [lookup_ticket, call_vendor, clock, specialist],
        system_prompt=system_prompt,
        middleware=[spanpoint.CheckpointMiddleware(policy)],
    )


def dump(messages: list[BaseMessage]) -> list[Any]:
    return [
        [m.type, m.content, [[c["name"], c["args"], c["id"]] for c in getattr(m, "tool_calls", [])]]
        for m in messages
    ]


def main() -> None:
    path, mode, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    system_prompt = sys.argv[5] if len(sys.argv) > 5 else "You are a support agent."
    spanpoint.configure(store=MemoryStore())
    agent = make_agent(system_prompt, kind == "ASYNC")
    request = {"messages": [{"role": "user", "content": "Tickets 7 and 8, order toner"}]}
    config = {"configurable": {"api_key": CONFIG_SECRET, "thread_id": "t-1"}}
    if kind == "ASYNC":

        async def go() -> Any:
            async with spanpoint.cassette(path, mode=mode):  # type: ignore[arg-type]
                return await agent.ainvoke(request, config)

        result = asyncio.run(go())
    else:
        with spanpoint.cassette(path, mode=mode):  # type: ignore[arg-type]
            result = agent.invoke(request, config)
    print(json.dumps(dump(result["messages"][1:])))  # without the human message's random id


if __name__ == "__main__":
    main()
