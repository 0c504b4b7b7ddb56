"""The ticket flow of ``spanpoint demo``: a support ticket that crashes once, then replays.

The flow: load ticket → triage agent (a ``create_agent`` agent with a fake chat model, a tool
that posts to Slack after a supervisor approves it through a LangGraph interrupt) → write
report → notify customer. On the first attempt "write report" crashes *after* the agent
finished; the second attempt with the same run id replays the load step and both graph calls
from the store — the model is not called and Slack is not posted to again — and runs only
what had not completed.

Everything runs on embedded defaults: the SQLite checkpoint store under ``.spanpoint/``, a
SQLite LangGraph checkpointer next to it, traces to ``OTEL_EXPORTER_OTLP_ENDPOINT`` when set,
else to the local trace file. No server, no API key.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.types import interrupt

import spanpoint
from spanpoint._files import claim_regular, private_folder
from spanpoint.graph import GraphRunner, RunRequest, build_resume_request, wait_for_interrupt
from spanpoint.graph.results import RunResult
from spanpoint.run import current_run

TICKETS = {
    "42": {
        "id": "42",
        "customer": "ACME Corp",
        "email": "ops@acme.example",
        "text": "Checkout is down for all our customers since 09:10 — total outage, please help!",
    },
    "7": {
        "id": "7",
        "customer": "Globex",
        "email": "it@globex.example",
        "text": "The export button is greyed out for one user.",
    },
}

Effects = Callable[[str], None]


class ReportStoreDown(RuntimeError):
    """The injected crash of the first attempt's "write report" step."""


class TicketTriageModel(BaseChatModel):
    """A fake chat model that answers from the conversation, never from a call counter.

    No tool result yet → it calls ``escalate_ticket``; after the tool answered → a final
    summary. Replay skips calls, so a counter-driven script would diverge; this cannot.
    """

    effects: Any = None
    model_name: str = "triage-fake-1"

    @property
    def _llm_type(self) -> str:
        return "ticket-triage-fake"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        """What a real provider reports: its name and the model's (the chat span's name)."""
        params = super()._get_ls_params(stop=stop, **kwargs)
        params.update(ls_provider="spanpoint-demo", ls_model_name=self.model_name)
        return params

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> TicketTriageModel:  # type: ignore[override]
        """Tools are known from the conversation; binding changes nothing."""
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.effects is not None:
            self.effects("model_call")
        ticket = next((m for m in messages if isinstance(m, HumanMessage)), None)
        text = str(ticket.content) if ticket else ""
        ticket_id = text.split("#", 1)[1].split(":", 1)[0] if "#" in text else "unknown"
        tool_results = [m for m in messages if isinstance(m, ToolMessage)]
        usage = {"input_tokens": 12 * len(messages), "output_tokens": 20}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        if not tool_results:
            severity = "critical" if "outage" in text.lower() else "low"
            message = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "escalate_ticket",
                        "args": {"ticket_id": ticket_id, "severity": severity},
                        "id": f"call_escalate_{ticket_id}",
                    }
                ],
                usage_metadata=usage,  # type: ignore[arg-type]
                response_metadata={"model_name": self.model_name, "finish_reason": "tool_calls"},
            )
        else:
            message = AIMessage(
                content=f"Ticket {ticket_id}: {tool_results[-1].content}. Customer to be told "
                "that on-call is working on it.",
                usage_metadata=usage,  # type: ignore[arg-type]
                response_metadata={"model_name": self.model_name, "finish_reason": "stop"},
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def build_triage_agent(effects: Effects, checkpointer: Any) -> Any:
    """The triage agent: fake model + an ``escalate_ticket`` tool gated by an interrupt."""
    from langchain.agents import create_agent

    @tool
    def escalate_ticket(ticket_id: str, severity: str) -> str:
        """Escalate a ticket to the on-call engineer (asks a supervisor first)."""
        approved = interrupt(
            {
                "question": f"Escalate ticket {ticket_id} ({severity}) to on-call?",
                "ticket": ticket_id,
            }
        )
        if not approved:
            return "escalation declined by the supervisor"
        effects("slack_post")  # the side effect a replay must not repeat
        return f"posted to #oncall ({severity})"

    return create_agent(
        TicketTriageModel(effects=effects),
        [escalate_ticket],
        system_prompt="You triage support tickets.",
        checkpointer=checkpointer,
        name="triage",
    )


@dataclass
class FlowHooks:
    """What the steps reach outside their arguments: side-effect counting and the crash."""

    effects: Effects
    crash: str = "none"  # "raise" (demo), "exit" (tests: the process dies), or "none"


#: The hooks the flow's steps read: ``main`` and the crash tests set them before a run.
HOOKS = FlowHooks(effects=lambda name: None)


@spanpoint.step(name="load_ticket")
def load_ticket(ticket_id: str) -> dict[str, str]:
    """Read the ticket (from a fixture table standing in for the help desk)."""
    HOOKS.effects("ticket_loaded")
    return dict(TICKETS[ticket_id])


@spanpoint.step(name="write_report")
def write_report(ticket: dict[str, str], triage: str) -> dict[str, str]:
    """Write the incident report; on the first attempt the report store is down."""
    HOOKS.effects("report_attempt")
    scope = current_run()
    if scope is not None and scope.attempt == 1 and HOOKS.crash != "none":
        if HOOKS.crash == "exit":
            os._exit(17)  # the process dies mid-step: nothing of this step is committed
        raise ReportStoreDown("the report store timed out (injected crash, attempt 1)")
    HOOKS.effects("report_written")
    return {"ticket": ticket["id"], "report": f"[{ticket['customer']}] {triage}"}


@spanpoint.step(name="notify_customer")
def notify_customer(ticket: dict[str, str], report: dict[str, str]) -> str:
    """Email the customer (counted, not sent)."""
    HOOKS.effects("customer_notified")
    return f"emailed {ticket['email']}: {report['report'][:60]}…"


@dataclass
class FlowOutcome:
    """What one attempt of the ticket flow did."""

    run_id: str
    attempt: int | None
    status: str | None
    results: list[RunResult] = field(default_factory=list)
    error: BaseException | None = None


def run_ticket_flow(
    runner: GraphRunner,
    run_id: str,
    ticket_id: str = "42",
    *,
    approve: bool | Literal["wait"] = True,
    on_triaged: Callable[[list[RunResult]], None] | None = None,
) -> FlowOutcome:
    """One attempt of the flow as durable run ``run_id``; exceptions are kept, not raised.

    ``approve`` answers the escalation interrupt; ``"wait"`` turns it into a durable wait
    named ``approval`` (``spanpoint input RUN_ID approval --json true``). ``on_triaged`` sees
    the graph results before the report is written.
    """
    results: list[RunResult] = []
    run = spanpoint.run(run_id, name="ticket-flow")
    error: BaseException | None = None
    try:
        with run:
            ticket = load_ticket(ticket_id)
            text = f"Ticket #{ticket['id']}: {ticket['text']}"
            thread = f"{run_id}:triage"
            result = runner.invoke(
                RunRequest.start({"messages": [HumanMessage(text)]}, thread_id=thread)
            )
            results.append(result)
            if result.interrupted and approve == "wait":
                resume = wait_for_interrupt(result, schema={"type": "boolean"}, name="approval")
                results.append(result := runner.invoke(resume))
            elif result.interrupted:  # the supervisor answers the approval interrupt
                results.append(result := runner.invoke(build_resume_request(result, approve)))
            if on_triaged is not None:
                on_triaged(results)
            final = result.output["messages"][-1].content
            report = write_report(ticket, str(final))
            notify_customer(ticket, report)
    except Exception as exc:  # the demo shows the failure instead of a traceback
        error = exc
    return FlowOutcome(run_id, run.attempt, run.status, results, error)


def langgraph_checkpointer(folder: Path) -> Any:
    """A durable SQLite LangGraph checkpointer in ``folder``: an interrupted thread survives
    the process, so the demo's agents carry no "use a durable checkpointer" warning."""
    from langgraph.checkpoint.sqlite import SqliteSaver  # a dependency of spanpoint

    path = folder / "demo-langgraph.db"
    # Never through a planted symlink nor into another user's file, as the store opens its.
    private_folder(folder)
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        claim_regular(name)
    conn = sqlite3.connect(path, check_same_thread=False)
    return SqliteSaver(conn)
