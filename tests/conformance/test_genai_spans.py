"""Every chat and execute_tool span spanpoint emits follows the GenAI conventions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from opentelemetry.trace import StatusCode

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.capture import CapturePolicy

from .genai import missing_recommended, violations

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]
REQUEST = {"messages": [{"role": "user", "content": "Ticket 7 please"}]}


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def agent(model: Any = None) -> Any:
    return create_agent(
        model or ConversationModel(plan=PLAN),
        [lookup_ticket],
        system_prompt="You are a support agent.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )


def genai_spans(telemetry: Any) -> list[Any]:
    spans = [s for s in telemetry.spans() if semconv.GEN_AI_OPERATION_NAME in (s.attributes or {})]
    operations = {s.attributes[semconv.GEN_AI_OPERATION_NAME] for s in spans}
    # The run's root is a GenAI workflow span too (absent outside a run).
    assert operations - {"invoke_workflow"} == {"chat", "execute_tool"}
    return spans


def run_sync(run_id: str | None) -> None:
    if run_id is None:
        agent().invoke(REQUEST)
        return
    with spanpoint.run(run_id):
        agent().invoke(REQUEST)


def run_async(run_id: str) -> None:
    async def go() -> None:
        async with spanpoint.run(run_id):
            await agent().ainvoke(REQUEST)

    asyncio.run(go())


SCENARIOS = {
    "executed": lambda: run_sync("c-1"),
    "replayed": lambda: (run_sync("c-2"), run_sync("c-2")),
    "outside_a_run": lambda: run_sync(None),
    "async_executed_and_replayed": lambda: (run_async("c-3"), run_async("c-3")),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_spans_conform(configured: Any, scenario: str) -> None:
    SCENARIOS[scenario]()
    for span in genai_spans(configured):
        assert violations(span) == []
        if not span.attributes.get(semconv.RUN_ROOT):  # a run spans threads and models
            assert missing_recommended(span) == []


def test_spans_conform_with_content_capture(configured: Any) -> None:
    spanpoint.configure(
        tracer_provider=configured.provider, capture=CapturePolicy(content="SPAN_AND_EVENT")
    )
    run_sync("c-content")
    spans = genai_spans(configured)
    for span in spans:
        assert violations(span, content=True) == []
    chat = next(s for s in spans if s.name.startswith("chat"))
    tool_span = next(s for s in spans if s.name.startswith("execute_tool"))
    assert semconv.GEN_AI_INPUT_MESSAGES in chat.attributes
    assert semconv.GEN_AI_OUTPUT_MESSAGES in chat.attributes
    assert semconv.GEN_AI_SYSTEM_INSTRUCTIONS in chat.attributes
    assert semconv.GEN_AI_TOOL_CALL_ARGUMENTS in tool_span.attributes
    assert semconv.GEN_AI_TOOL_CALL_RESULT in tool_span.attributes


class BrokenModel(ConversationModel):
    """A model whose provider is down."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider unavailable")


def test_a_failed_call_is_an_error_span_with_error_type(configured: Any) -> None:
    with pytest.raises(ConnectionError), spanpoint.run("c-error"):
        agent(BrokenModel(plan=PLAN)).invoke(REQUEST)
    (chat,) = configured.spans("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes[semconv.ERROR_TYPE] == "ConnectionError"
    assert violations(chat) == []
    assert configured.store.list_checkpoints("c-error") == []


class BedrockLikeModel(ConversationModel):
    """Reports LangChain's provider id for Bedrock."""

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "amazon_bedrock"
        return params


def test_provider_names_use_the_well_known_values(configured: Any) -> None:
    agent(BedrockLikeModel(plan=PLAN)).invoke(REQUEST)
    chats = configured.spans("chat")
    assert {s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats} == {"aws.bedrock"}
