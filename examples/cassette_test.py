"""Test an agent offline: record its model and tool calls once, replay them with no model.

    python examples/cassette_test.py

A ``create_agent`` agent runs inside ``spanpoint.cassette("cassettes/refund.json")`` twice,
each time in a fresh process: the first records the cassette (the model answers), the second
replays it with the model unreachable and gets the identical result, with zero model calls
and zero tool executions. In a test suite the pytest plugin does the same with a marker:

    @pytest.mark.spanpoint_cassette("tests/cassettes/refund")
    def test_refund(): ...

and ``pytest -p spanpoint.pytest_plugin --spanpoint-record=none`` in CI.

The model here is a stand-in that answers from the conversation (so the example runs
offline); any LangChain chat model records the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import spanpoint

CASSETTE = Path("cassettes") / "refund.json"
CALLS = Path("calls.txt")  # one line per model call or tool execution, to show what ran


class StandInModel(BaseChatModel):
    """Asks for the ticket, then answers; unreachable when ``OFFLINE=1`` (like no network)."""

    @property
    def _llm_type(self) -> str:
        return "stand-in"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if os.environ.get("OFFLINE") == "1":
            raise ConnectionError("the model is unreachable")
        with CALLS.open("a") as fh:
            fh.write("model\n")
        if not any(m.type == "tool" for m in messages):
            reply = AIMessage(
                content="",
                tool_calls=[{"name": "refund", "args": {"ticket": "T-42"}, "id": "call-1"}],
            )
        else:
            reply = AIMessage(content=f"Refunded: {messages[-1].content}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def refund(ticket: str) -> str:
    """Refund a ticket."""
    with CALLS.open("a") as fh:
        fh.write("tool\n")
    return f"{ticket} refunded 30 EUR"


def child(mode: str) -> None:
    agent = create_agent(StandInModel(), [refund], middleware=[spanpoint.CheckpointMiddleware()])
    with spanpoint.cassette(CASSETTE, mode=mode):  # type: ignore[arg-type]
        result = agent.invoke({"messages": [{"role": "user", "content": "Refund T-42"}]})
    print(json.dumps(result["messages"][-1].content))


def run(mode: str, **env: str) -> str:
    CALLS.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, __file__, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    calls = CALLS.read_text().split() if CALLS.exists() else []
    print(
        f"{mode:>4}: {done.stdout.strip()}  (model calls: {calls.count('model')}, "
        f"tool executions: {calls.count('tool')})"
    )
    return done.stdout


def main() -> int:
    CASSETTE.unlink(missing_ok=True)
    recorded = run("once")  # no cassette yet: the calls execute and are recorded
    replayed = run("none", OFFLINE="1")  # replay only, with the model unreachable
    assert replayed == recorded, (recorded, replayed)
    assert not CALLS.exists(), "a replay from the cassette calls nothing"
    print(f"cassette: {CASSETTE} ({CASSETTE.stat().st_size} bytes, reviewable JSON)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
    else:
        sys.exit(main())
