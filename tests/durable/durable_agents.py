"""Real upstream agents for the durable-calls tests, driven by conversation-derived fakes.

- ``deep_agent``: Deep Agents (``create_deep_agent``, deepagents 0.7.x) with the todo list
  (LangChain's ``TodoListMiddleware``: deepagents 0.7.32 has no ``write_todos`` of its own),
  ``write_file`` and ``write_todos`` in one model turn, a ``task`` call to the default
  ``general-purpose`` sub-agent that reads the file, and ``notify_customer``.
- ``supervisor_app``: ``langgraph_supervisor.create_supervisor`` over two ``create_agent``
  members (billing, travel), each with one side-effect tool.
- ``swarm_app``: ``langgraph_swarm.create_swarm`` of alice (invoices, then hands off) and bob
  (books the flight).
- ``refund_agent``: a plain ``create_agent`` for the rerun table.

Every model reply is derived from the conversation (which ``ToolMessage``s are present), so a
replayed call and a re-executed one lead to the same next step. Side-effect tools log each
real execution (``durable_fakes.record``) and have kill points ``in:<tool>`` (after the
effect, before the tool returns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durable_fakes import (
    ScriptModel,
    first_human,
    kill_point,
    log_path,
    record,
    tool_call,
    tool_results,
)
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool

PLAN = "Refund 42 EUR for order 42. Apologise for the delay."
SUBTASK = "SUBTASK: read /plan.md and draft the message to the customer"
REQUEST = "Customer 7 asks for a refund of order 42."


def side_effect(name: str, **fields: Any) -> None:
    """Log a real execution of a side-effect tool, then honour the kill point inside it."""
    record(log_path(), "tool", name, **fields)
    kill_point(f"in:{name}")


# --- Deep Agents -------------------------------------------------------------------------


def deep_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    """The main agent's and the sub-agent's next step, from the tool results present."""
    done = tool_results(messages)
    if first_human(messages).startswith("SUBTASK"):
        if "read_file" not in done:
            call = tool_call("read_file", file_path="/plan.md")
            return "sub:read", AIMessage("", tool_calls=[call])
        text = f"Message for the customer, from the plan: {done['read_file']}"
        return "sub:draft", AIMessage(text)
    if "write_file" not in done or "write_todos" not in done:
        todos = [
            {"content": "Draft the refund message", "status": "in_progress"},
            {"content": "Notify the customer", "status": "pending"},
        ]
        calls = [
            tool_call("write_todos", todos=todos),
            tool_call("write_file", file_path="/plan.md", content=PLAN),
        ]
        return "main:plan", AIMessage("", tool_calls=calls)
    if "task" not in done:
        call = tool_call("task", description=SUBTASK, subagent_type="general-purpose")
        return "main:delegate", AIMessage("", tool_calls=[call])
    if "notify_customer" not in done:
        call = tool_call("notify_customer", customer="7", text=done["task"])
        return "main:notify", AIMessage("", tool_calls=[call])
    return "main:final", AIMessage(f"Done. The customer was told: {done['notify_customer']}")


#: Every model call of a crash-free Deep Agents run, in order.
DEEP_MODEL_CALLS = [
    "main:plan", "main:delegate", "sub:read", "sub:draft", "main:notify", "main:final",
]  # fmt: skip


@tool
def notify_customer(customer: str, text: str) -> str:
    """Send a message to the customer."""
    side_effect("notify_customer", customer=customer, text=text)
    return f"notified customer {customer}: {text[:400]}"


def deep_agent(
    *, checkpointer: Any = None, middleware: Sequence[Any] = (), name: str = "support"
) -> Any:
    """A Deep Agent with the todo list, the file system, the ``task`` sub-agent and notify."""
    from deepagents import create_deep_agent
    from langchain.agents.middleware import TodoListMiddleware

    model = ScriptModel(role="deep", decide=deep_decide)
    return create_deep_agent(
        model=model,
        tools=[notify_customer],
        middleware=[*middleware, TodoListMiddleware()],
        checkpointer=checkpointer,
        name=name,
    )


def deep_input() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": REQUEST}]}


# --- langgraph-supervisor ----------------------------------------------------------------


def supervisor_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    """Hand off to billing, then to travel, then answer; from the hand-backs present."""
    backs = sum(
        1 for m in messages if m.type == "tool" and str(m.name or "").startswith("transfer_back")
    )
    if backs == 0:
        return "handoff:billing", AIMessage("", tool_calls=[tool_call("transfer_to_billing")])
    if backs == 1:
        return "handoff:travel", AIMessage("", tool_calls=[tool_call("transfer_to_travel")])
    return "final", AIMessage("All done: the invoice is sent and the flight is booked.")


def member_decide(tool_name: str, done_text: str) -> Any:
    def decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
        # A member sees the whole conversation; its own tool's result tells it where it is.
        if tool_name not in tool_results(messages):
            call = tool_call(tool_name, customer="bob")
            return f"call:{tool_name}", AIMessage("", tool_calls=[call])
        return "final", AIMessage(f"{done_text}: {tool_results(messages)[tool_name]}")

    return decide


@tool
def send_invoice(customer: str) -> str:
    """Send the customer's invoice."""
    side_effect("send_invoice", customer=customer)
    return f"invoice INV-42 sent to {customer}"


@tool
def book_flight(customer: str) -> str:
    """Book the customer's flight."""
    side_effect("book_flight", customer=customer)
    return f"flight LH-7 booked for {customer}"


def member(name: str, tool_obj: Any, done_text: str, middleware: Sequence[Any]) -> Any:
    from langchain.agents import create_agent

    model = ScriptModel(role=name, decide=member_decide(tool_obj.name, done_text))
    return create_agent(model, [tool_obj], middleware=list(middleware), name=name)


def supervisor_app(*, checkpointer: Any = None, middleware: Sequence[Any] = ()) -> Any:
    """A supervisor (prebuilt ``create_react_agent``, no middleware) over two members."""
    from langgraph_supervisor import create_supervisor

    billing = member("billing", send_invoice, "Invoice sent", middleware)
    travel = member("travel", book_flight, "Flight booked", middleware)
    model = ScriptModel(role="supervisor", decide=supervisor_decide)
    workflow = create_supervisor([billing, travel], model=model)
    return workflow.compile(checkpointer=checkpointer, name="supervisor_app")


# --- langgraph-swarm ---------------------------------------------------------------------


def alice_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    done = tool_results(messages)
    if "send_invoice" not in done:
        call = tool_call("send_invoice", customer="bob")
        return "call:send_invoice", AIMessage("", tool_calls=[call])
    if "transfer_to_bob" not in done:
        return "handoff:bob", AIMessage("", tool_calls=[tool_call("transfer_to_bob")])
    return "final", AIMessage("Bob takes it from here.")


def bob_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    done = tool_results(messages)
    if "book_flight" not in done:
        call = tool_call("book_flight", customer="bob")
        return "call:book_flight", AIMessage("", tool_calls=[call])
    return "final", AIMessage(f"All set: {done['book_flight']} ({done['send_invoice']})")


def swarm_app(*, checkpointer: Any = None, middleware: Sequence[Any] = ()) -> Any:
    """Alice sends the invoice and hands off to bob, who books the flight."""
    from langchain.agents import create_agent
    from langgraph_swarm import create_handoff_tool, create_swarm

    alice = create_agent(
        ScriptModel(role="alice", decide=alice_decide),
        [send_invoice, create_handoff_tool(agent_name="bob")],
        middleware=list(middleware),
        name="alice",
    )
    bob = create_agent(
        ScriptModel(role="bob", decide=bob_decide),
        [book_flight],
        middleware=list(middleware),
        name="bob",
    )
    workflow = create_swarm([alice, bob], default_active_agent="alice")
    return workflow.compile(checkpointer=checkpointer, name="swarm_app")


def team_input() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Invoice bob, then book his flight."}]}


# --- a plain create_agent for the rerun table --------------------------------------------


def refund_decide(messages: Sequence[BaseMessage]) -> tuple[str, AIMessage]:
    """Per turn (since the last human message): look the order up, notify, then answer."""
    turn = sum(1 for m in messages if m.type == "human")
    question = [m for m in messages if m.type == "human"][-1].content
    since: list[str] = []
    for m in reversed(messages):
        if m.type == "human":
            break
        if m.type == "tool":
            since.append(str(m.name))
    if "lookup_order" not in since:
        return f"lookup:{turn}", AIMessage("", tool_calls=[tool_call("lookup_order", order="42")])
    if "notify_customer" not in since:
        call = tool_call("notify_customer", customer="7", text=f"re: {question}")
        return f"notify:{turn}", AIMessage("", tool_calls=[call])
    return f"final:{turn}", AIMessage(f"Answered {question!r}: refund confirmed.")


@tool
def lookup_order(order: str) -> str:
    """Look the order up."""
    record(log_path(), "tool", "lookup_order", order=order)
    return f"order {order}: paid 42 EUR, delayed"


def refund_agent(*, checkpointer: Any = None, middleware: Sequence[Any] = ()) -> Any:
    from langchain.agents import create_agent

    model = ScriptModel(role="refund", decide=refund_decide)
    return create_agent(
        model, [lookup_order, notify_customer], middleware=list(middleware),
        checkpointer=checkpointer, name="refund",
    )  # fmt: skip


# --- draft -> interrupt -> send ----------------------------------------------------------


def send_email_tool() -> Any:
    @tool
    def send_email(text: str) -> str:
        """Send the approved reply."""
        side_effect("send_email", text=text)
        return f"sent: {text}"

    return send_email


def draft_graph(*, checkpointer: Any, via: str = "invoke", name: str = "drafter") -> Any:
    """One custom node: draft with ``model.invoke``, ``interrupt({"approve": draft})``, send.

    ``via``: ``invoke`` (``model.invoke`` / ``tool.invoke`` in the node), ``ainvoke`` (an async
    node with ``ainvoke``) or ``step`` (the model call inside an ``@spanpoint.step``).
    """
    from typing import TypedDict

    from durable_fakes import DraftModel
    from langchain_core.messages import HumanMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class DraftState(TypedDict, total=False):
        request: str
        sent: str

    model = DraftModel()
    send_email = send_email_tool()

    if via == "step":
        import spanpoint

        @spanpoint.step
        def write_draft(request: str) -> str:
            return str(model.invoke([HumanMessage(request)]).content)

    def node(state: DraftState) -> dict[str, str]:
        if via == "step":
            draft = write_draft(state["request"])
        else:
            draft = str(model.invoke([HumanMessage(state["request"])]).content)
        decision = interrupt({"approve": draft})
        if decision != "yes":
            return {"sent": ""}
        send_email.invoke({"text": draft})
        return {"sent": draft}

    async def anode(state: DraftState) -> dict[str, str]:
        draft = str((await model.ainvoke([HumanMessage(state["request"])])).content)
        decision = interrupt({"approve": draft})
        if decision != "yes":
            return {"sent": ""}
        await send_email.ainvoke({"text": draft})
        return {"sent": draft}

    builder = StateGraph(DraftState)
    builder.add_node("draft_and_send", anode if via == "ainvoke" else node)
    builder.add_edge(START, "draft_and_send")
    builder.add_edge("draft_and_send", END)
    return builder.compile(checkpointer=checkpointer, name=name)
