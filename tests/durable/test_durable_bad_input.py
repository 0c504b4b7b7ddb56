"""Bad input between attempts (issue 15, acceptance "Bad input").

- A task's code changes between attempts, so its calls differ: the calls that no longer match
  execute, the unchanged ones replay, and nothing wrong is replayed (every reply still
  answers its own prompt).
- A stored output that no longer deserializes (the class it names was renamed in the new
  code) executes again, with a warning, instead of failing the run or replaying garbage.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypedDict

import pytest
from durable_agents import send_email_tool
from durable_fakes import (
    DraftModel,
    ScriptModel,
    labels,
    log_path,
    read_log,
    record,
    tool_call,
    tool_results,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

import spanpoint
from harness import Telemetry


class State(TypedDict, total=False):
    request: str
    sent: str


def writer_graph(order: str) -> Any:
    """Greets, then summarises order ``order``, then sends both: two model calls, one tool."""
    model = DraftModel()
    send_email = send_email_tool()

    def node(state: State) -> dict[str, str]:
        greeting = str(model.invoke([HumanMessage("greet the customer")]).content)
        summary = str(model.invoke([HumanMessage(f"summarize order {order}")]).content)
        text = f"{greeting} | {summary}"
        send_email.invoke({"text": text})
        return {"sent": text}

    builder = StateGraph(State)
    builder.add_node("write", node)
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    return builder.compile(name="writer")


def drafts(log: Path, prompt: str) -> list[str]:
    return [e["text"] for e in read_log(log) if e["label"] == f"draft:{prompt}"]


def test_changed_calls_execute_and_nothing_wrong_is_replayed(otel: Telemetry, log: Path) -> None:
    with spanpoint.run("ticket-code"):
        first = spanpoint.GraphRunner(writer_graph("42"), name="writer", strategy="calls").invoke(
            {"request": "r"}, thread_id="t-code"
        )
    # The new release summarises another order: the second call's content changed.
    with spanpoint.run("ticket-code"):
        second = spanpoint.GraphRunner(writer_graph("43"), name="writer", strategy="calls").invoke(
            {"request": "r"}, thread_id="t-code"
        )
    greetings = drafts(log, "greet the customer")
    assert len(greetings) == 1, "the unchanged first call executed again instead of replaying"
    [greeting] = greetings
    [old_summary] = drafts(log, "summarize order 42")
    new_summaries = drafts(log, "summarize order 43")
    assert len(new_summaries) == 1, "the changed call did not execute"
    [new_summary] = new_summaries
    assert first.output["sent"] == f"{greeting} | {old_summary}"
    assert second.output["sent"] == f"{greeting} | {new_summary}", "a stale reply was replayed"
    sends = [e["text"] for e in read_log(log) if e["label"] == "send_email"]
    assert sends == [first.output["sent"], second.output["sent"]], "the changed send was replayed"


# --- a stored output that no longer deserializes ------------------------------------------

OLD = """
from pydantic import BaseModel

class Quote(BaseModel):
    amount: int
    currency: str
"""
NEW = """
from pydantic import BaseModel

class PriceQuote(BaseModel):  # renamed in the new release: stored Quote rows cannot load
    amount: int
    currency: str
"""
MODULE = "durable_quote_types"


@pytest.fixture
def quote_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    source = tmp_path / "modules" / f"{MODULE}.py"
    source.parent.mkdir()
    source.write_text(textwrap.dedent(OLD))
    monkeypatch.syspath_prepend(str(source.parent))
    importlib.invalidate_caches()
    yield source
    sys.modules.pop(MODULE, None)


def new_release(source: Path) -> None:
    source.write_text(textwrap.dedent(NEW))
    sys.modules.pop(MODULE, None)
    importlib.invalidate_caches()


@tool(response_format="content_and_artifact")
def quote(order: str) -> tuple[str, Any]:
    """Quote the refund of an order."""
    record(log_path(), "tool", "quote", order=order)
    types = importlib.import_module(MODULE)
    cls = getattr(types, "Quote", None) or types.PriceQuote
    return f"quote for order {order} ready", cls(amount=42, currency="EUR")


def quote_node_graph() -> Any:
    def node(state: State) -> dict[str, str]:
        message = quote.invoke(tool_call("quote", order="42"))
        return {"sent": f"{type(message.artifact).__name__}:{message.artifact.amount}"}

    builder = StateGraph(State)
    builder.add_node("quote", node)
    builder.add_edge(START, "quote")
    builder.add_edge("quote", END)
    return builder.compile(name="quoter")


def quote_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    done = tool_results(messages)
    if "quote" not in done:
        return "call:quote", AIMessage("", tool_calls=[tool_call("quote", order="42")])
    return "final", AIMessage(f"Quoted: {done['quote']}")


def quote_agent() -> Any:
    from langchain.agents import create_agent

    model = ScriptModel(role="quoter", decide=quote_decide)
    middleware = [spanpoint.CheckpointMiddleware()]
    return create_agent(model, [quote], middleware=middleware, name="quoter")


@pytest.mark.parametrize("seam", ["node", "agent"])
def test_a_stored_output_that_no_longer_deserializes_executes_again_with_a_warning(
    otel: Telemetry, log: Path, quote_module: Path, seam: str
) -> None:
    allowed = [f"{MODULE}:Quote", f"{MODULE}:PriceQuote"]
    spanpoint.configure(tracer_provider=otel.provider, store=otel.store, allowed_types=allowed)
    build = quote_node_graph if seam == "node" else quote_agent
    payload = {"request": "r"} if seam == "node" else {"messages": [HumanMessage("quote 42")]}

    with spanpoint.run("ticket-quote") as first:
        spanpoint.GraphRunner(build(), name="quoter", strategy="calls").invoke(
            payload, thread_id="t-q"
        )
    assert first.status == "completed"
    assert labels(log, "tool") == {"quote": 1}

    new_release(quote_module)
    with spanpoint.run("ticket-quote") as second:
        result = spanpoint.GraphRunner(build(), name="quoter", strategy="calls").invoke(
            payload, thread_id="t-q"
        )
    assert second.status == "completed", "an undecodable checkpoint failed the run"
    assert labels(log, "tool") == {"quote": 2}, "the undecodable output was not executed again"
    assert second.warnings, "no warning said the stored output could not be read"
    if seam == "node":
        assert result.output["sent"] == "PriceQuote:42"
    else:
        [message] = [m for m in result.output["messages"] if m.type == "tool"]
        assert type(message.artifact).__name__ == "PriceQuote", f"replayed {message.artifact!r}"
