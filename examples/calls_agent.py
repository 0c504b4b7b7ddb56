"""A support agent whose every model call and tool call is a replay boundary (offline).

    python examples/calls_agent.py [STORE]

The agent is a LangChain ``create_agent`` agent with two tools, ``lookup_ticket`` and
``approve_ticket``, and a fake chat model, so it runs without network or API keys. It runs
twice with the same run id: the first run executes every call and commits each one to a
SQLite store; the second run replays every call from the store and executes nothing.
Traces go to ``.spanpoint/traces.jsonl`` (or to OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set).
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import spanpoint

EXECUTED: Counter[str] = Counter()  # what really ran in this process, for the printout


class SupportModel(BaseChatModel):
    """A scripted model that answers from the conversation: look up, approve, then reply."""

    @property
    def _llm_type(self) -> str:
        return "support-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        EXECUTED["model"] += 1
        done = [m.name for m in messages if m.type == "tool"]
        usage = {"input_tokens": 20 * len(messages), "output_tokens": 12, "total_tokens": 0}
        if "lookup_ticket" not in done:
            call = {"name": "lookup_ticket", "args": {"ticket_id": "T-42"}}
        elif "approve_ticket" not in done:
            call = {"name": "approve_ticket", "args": {"ticket_id": "T-42", "refund_eur": 30}}
        else:
            reply = AIMessage("Refund of 30 EUR approved for T-42.", usage_metadata=usage)
            return ChatResult(generations=[ChatGeneration(message=reply)])
        call["id"] = f"call_{uuid.uuid4().hex[:8]}"  # a real provider's ids are random too
        message = AIMessage("", tool_calls=[call], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def lookup_ticket(ticket_id: str) -> str:
    """Look up a support ticket."""
    EXECUTED["lookup_ticket"] += 1
    return f"{ticket_id}: customer reports a double charge of 30 EUR"


@tool
def approve_ticket(ticket_id: str, refund_eur: int) -> str:
    """Approve a refund for a ticket (a side effect: it must happen once)."""
    EXECUTED["approve_ticket"] += 1
    return f"{ticket_id}: refund of {refund_eur} EUR approved"


def attempt(agent: Any, run_id: str) -> tuple[str, Counter[str]]:
    EXECUTED.clear()
    with spanpoint.run(run_id, name="support"):
        result = agent.invoke({"messages": [("user", "I was charged twice, ticket T-42")]})
    return str(result["messages"][-1].content), Counter(EXECUTED)


def main() -> int:
    store = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "calls.db"
    spanpoint.configure(store=str(store))
    agent = create_agent(
        SupportModel(),
        [lookup_ticket, approve_ticket],
        system_prompt="You resolve billing tickets.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    run_id = f"ticket-T-42-{uuid.uuid4().hex[:6]}"
    first_answer, first = attempt(agent, run_id)
    second_answer, second = attempt(agent, run_id)
    print(f"store: {store}  run: {run_id}")
    print(f"first run : executed {dict(first)} -> {first_answer!r}")
    print(f"second run: executed {dict(second)} -> {second_answer!r} (replayed from the store)")
    ok = second_answer == first_answer and not second and first["approve_ticket"] == 1
    print("ok: the second run executed no model call and no tool" if ok else "UNEXPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
