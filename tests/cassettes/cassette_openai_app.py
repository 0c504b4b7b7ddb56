"""A ``create_agent`` agent on a real ``ChatOpenAI`` client, for the cassette tests.

The client talks to :class:`openai_server.ChatServer` on 127.0.0.1. The agent makes parallel
tool calls, then asks a sub-agent (another ``ChatOpenAI`` model) through a tool, then
answers. Every tool execution appends a line to an effects file. ``setup`` chooses how
spanpoint sees the calls: ``plain`` (nothing but the cassette), ``middleware``
(``CheckpointMiddleware``) or ``zero_code`` (``SpanpointInstrumentor`` applied).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import spanpoint
from fakes import count_effect

SETUPS = ("plain", "middleware", "zero_code")
MAIN, SUB = "gpt-4o", "gpt-4o-mini"
PLANS = {
    MAIN: [
        [  # parallel tool calls
            {"name": "lookup_ticket", "args": {"ticket_id": 7}},
            {"name": "lookup_ticket", "args": {"ticket_id": 8}},
        ],
        [{"name": "ask_specialist", "args": {"question": "Why is the printer empty?"}}],
    ],
    SUB: [[{"name": "lookup_ticket", "args": {"ticket_id": 99}}]],
}
FINALS = {MAIN: "Done: toner ordered.", SUB: "Specialist: replace the toner."}
REQUEST = {"messages": [{"role": "user", "content": "Tickets 7 and 8, please"}]}


def chat(base_url: str, model: str, *, streaming: bool) -> ChatOpenAI:
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key="sk-local-test-key",  # type: ignore[arg-type]
        streaming=streaming,
        stream_usage=True,
        max_retries=0,
        timeout=5,
    )


def make_agent(
    base_url: str,
    effects: Path,
    *,
    setup: str = "plain",
    streaming: bool = False,
    system_prompt: str = "You are a support agent.",
) -> Any:
    """The agent: ``lookup_ticket`` and ``ask_specialist`` (a sub-agent) as tools."""
    middleware = [spanpoint.CheckpointMiddleware()] if setup == "middleware" else []

    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, "tool:lookup_ticket")
        return f"ticket {ticket_id}: printer out of toner"

    @tool
    def ask_specialist(question: str) -> str:
        """Ask a specialist sub-agent."""
        count_effect(effects, "tool:ask_specialist")
        sub = create_agent(
            chat(base_url, SUB, streaming=streaming),
            [lookup_ticket],
            system_prompt="You are a printer specialist.",
            middleware=list(middleware),
        )
        return str(sub.invoke({"messages": [("user", question)]})["messages"][-1].content)

    return create_agent(
        chat(base_url, MAIN, streaming=streaming),
        [lookup_ticket, ask_specialist],
        system_prompt=system_prompt,
        middleware=middleware,
    )


@contextmanager
def instrumented(setup: str) -> Iterator[None]:
    """The zero-code instrumentation for ``zero_code``; nothing otherwise."""
    if setup != "zero_code":
        yield
        return
    from spanpoint.instrumentation import SpanpointInstrumentor

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument()
    try:
        yield
    finally:
        instrumentor.uninstrument()


def dump(result: dict[str, Any]) -> list[Any]:
    """The messages after the user's, with what replay must give back exactly."""
    out = []
    for m in result["messages"][1:]:
        calls = [[c["name"], c["args"], c["id"]] for c in getattr(m, "tool_calls", [])]
        out.append([m.type, m.content, calls, getattr(m, "tool_call_id", None)])
    return out
