"""The guard on a stuck agent: reflection, a clean stop, then a resume with a correction.

A fake model keeps calling ``search`` with the same arguments (as a real one does when a
search keeps returning nothing useful). The guard notices the repeat, sends the model a
reflection note, stops the run cleanly when the note does not help, and an operator then
resumes the thread with a correction that leads to the final answer.

Runs offline: ``.venv/bin/python examples/guard_loop.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanpoint


class StuckModel(BaseChatModel):
    """Searches for the same thing until a person's correction appears in the conversation."""

    @property
    def _llm_type(self) -> str:
        return "stuck-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        return self.bind(**kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        usage = {"input_tokens": 250, "output_tokens": 30, "total_tokens": 280}
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        corrected = any(_kind(m) == "correction" for m in messages)
        read = any(isinstance(m, ToolMessage) and m.name == "read_changelog" for m in messages)
        if corrected and read:
            reply = AIMessage(
                content="Release 4.2 shipped on 12 March, per the changelog.",
                usage_metadata=usage,
            )
        else:
            name, args = (
                ("read_changelog", {})
                if corrected
                else ("search", {"query": "release date 4.2", "site": "docs"})
            )
            call = {"name": name, "args": args, "id": f"call_{turn}", "type": "tool_call"}
            reply = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def search(query: str, site: str) -> str:
    """Search the documentation."""
    return "No results."


@tool
def read_changelog() -> str:
    """Read the project's changelog."""
    return "4.2 — released 12 March."


def _kind(message: BaseMessage) -> str | None:
    mark = message.additional_kwargs.get("spanpoint_guard")
    return mark.get("kind") if isinstance(mark, dict) else None


def show(messages: Sequence[BaseMessage]) -> None:
    for m in messages:
        kind = _kind(m) or m.type
        if isinstance(m, AIMessage) and m.tool_calls:
            text = ", ".join(f"{c['name']}({c['args']})" for c in m.tool_calls)
        else:
            text = m.text
        tag = f"[{kind}]" + (
            " (error)" if isinstance(m, ToolMessage) and m.status == "error" else ""
        )
        print(f"  {tag:<20} {text[:110]}")


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("example")

    guard = spanpoint.guard.GuardMiddleware(spanpoint.guard.GuardConfig(max_reflections=1))
    agent = create_agent(
        StuckModel(), [search, read_changelog], middleware=[guard], checkpointer=InMemorySaver()
    )
    runner = spanpoint.guard.GuardedGraph(agent)
    config = {"configurable": {"thread_id": "ticket-7"}}

    print("1. The agent runs and gets stuck; the guard reflects, then stops it:")
    with tracer.start_as_current_span("first run"):
        out = runner.invoke({"messages": [("user", "When did 4.2 ship?")]}, config)
    show(out["messages"])
    print(f"  guard_terminated={out['guard_terminated']} guard_reason={out['guard_reason']!r}")

    report = runner.get_report("ticket-7")
    print(
        f"\n2. Report: {report.steps} steps, {report.tokens} tokens, resumable={report.resumable}"
    )

    try:
        runner.invoke({"messages": [("user", "try again")]}, config)
    except spanpoint.errors.GuardThreadStoppedError as exc:
        print(f"\n3. A plain invoke is refused: {exc}")

    print("\n4. An operator resumes it with a correction:")
    with tracer.start_as_current_span("resume"):
        out = runner.resume(
            {"configurable": {"thread_id": "ticket-7", "checkpoint_id": report.checkpoint_id}},
            correction="Search is broken today. Read the changelog instead.",
            author="ops@example.com",
        )
    show(out["messages"][-5:])
    final = runner.get_report("ticket-7")
    print(f"  status={final.status} steps={final.steps} (cumulative)")

    print("\n5. What OpenTelemetry saw (span events):")
    for span in exporter.get_finished_spans():
        for event in span.events:
            attrs = event.attributes or {}
            detail = attrs.get("spanpoint.guard.pattern") or attrs.get("spanpoint.guard.reason")
            print(f"  {span.name:<10} {event.name:<28} {detail}")


if __name__ == "__main__":
    main()
