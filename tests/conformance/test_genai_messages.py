"""Every captured GenAI message attribute validates against its JSON Schema.

Input messages, output messages (with the ``finish_reason`` viewers require), system
instructions and tool definitions: from the middleware and from the zero-code patches,
executed and replayed, sync and async. The schemas are ``tests/conformance/schemas``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import langchain.agents
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.calls.attributes import describe_model_response, model_call_attributes
from spanpoint.capture import CapturePolicy
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry

from .genai import MESSAGE_SCHEMAS, message_schema_errors, message_violations, violations

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]
REQUEST = {"messages": [{"role": "user", "content": "Ticket 7 please"}]}
CONTENT = CapturePolicy(content="SPAN_AND_EVENT")


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def agent(*, middleware: bool = True) -> Any:
    # Looked up on each call: the zero-code patches replace langchain.agents.create_agent.
    return langchain.agents.create_agent(
        ConversationModel(plan=PLAN),
        [lookup_ticket],
        system_prompt="You are a support agent.",
        middleware=[spanpoint.CheckpointMiddleware()] if middleware else [],
    )


@pytest.fixture
def content(configured: Telemetry) -> Telemetry:
    spanpoint.configure(tracer_provider=configured.provider, capture=CONTENT)
    return configured


@pytest.fixture
def zero_code(content: Telemetry) -> Iterator[Telemetry]:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=content.provider)
    yield content
    instrumentor.uninstrument()


def twice_sync(build: Callable[[], Any], run_id: str) -> None:
    for _ in range(2):
        with spanpoint.run(run_id):
            build().invoke(REQUEST)


def twice_async(build: Callable[[], Any], run_id: str) -> None:
    async def go() -> None:
        for _ in range(2):
            async with spanpoint.run(run_id):
                await build().ainvoke(REQUEST)

    asyncio.run(go())


def chat_spans(telemetry: Telemetry) -> list[Any]:
    return [s for s in telemetry.spans() if s.name.startswith(semconv.OP_CHAT + " ")]


def assert_all_valid(telemetry: Telemetry) -> list[Any]:
    spans = telemetry.spans()
    problems = [p for span in spans for p in message_violations(span)]
    assert problems == []
    for span in spans:
        if semconv.GEN_AI_OPERATION_NAME in (span.attributes or {}):
            assert violations(span, content=True) == []
    return chat_spans(telemetry)


def assert_messages_on(chat: Any, *, tools: bool = True) -> None:
    attrs = chat.attributes
    assert semconv.GEN_AI_INPUT_MESSAGES in attrs
    output = json.loads(attrs[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert [m["finish_reason"] for m in output] in (["tool_call"], ["stop"])
    if tools:
        definitions = json.loads(attrs[semconv.GEN_AI_TOOL_DEFINITIONS])
        assert [d["name"] for d in definitions] == ["lookup_ticket"]
        assert definitions[0]["parameters"]["properties"]["ticket_id"]["type"] == "integer"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_middleware_messages_valid_executed_and_replayed(content: Telemetry, mode: str) -> None:
    (twice_sync if mode == "sync" else twice_async)(agent, f"m-{mode}")
    chats = assert_all_valid(content)
    executed = [s for s in chats if s.attributes[semconv.REPLAYED] is False]
    replayed = [s for s in chats if s.attributes[semconv.REPLAYED] is True]
    assert len(executed) == len(replayed) == 2  # the second attempt replays both calls
    for chat in chats:
        assert_messages_on(chat)
        assert semconv.GEN_AI_SYSTEM_INSTRUCTIONS in chat.attributes
    first, second = (json.loads(s.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]) for s in executed)
    assert first[0]["finish_reason"] == "tool_call" and second[0]["finish_reason"] == "stop"
    assert first[0]["parts"][0]["type"] == "tool_call"
    assert second[0]["parts"] == [{"type": "text", "content": "All done."}]
    # The replayed span tells what the model answered, exactly as the executed one did.
    for old, new in zip(executed, replayed, strict=True):
        assert (
            new.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
            == old.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
        )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_zero_code_patch_messages_valid(zero_code: Telemetry, mode: str) -> None:
    # Default graph_call strategy: the model node's own model.invoke is a patched chat span.
    (twice_sync if mode == "sync" else twice_async)(lambda: agent(middleware=False), f"z-{mode}")
    chats = assert_all_valid(zero_code)
    assert len(chats) == 2  # the second attempt replays the whole graph call
    for chat in chats:
        assert_messages_on(chat, tools=False)
        roles = [m["role"] for m in json.loads(chat.attributes[semconv.GEN_AI_INPUT_MESSAGES])]
        assert roles[:2] == ["system", "user"]
    # The graph call's span (a boundary here, replayed on the second attempt) shows its
    # input and the last reply.
    graphs = zero_code.graph_spans("invoke_agent")
    assert [s.attributes[semconv.REPLAYED] for s in graphs] == [False, True]
    for span in graphs:
        (asked,) = json.loads(span.attributes[semconv.GEN_AI_INPUT_MESSAGES])
        assert asked["parts"] == [{"type": "text", "content": "Ticket 7 please"}]
        (answer,) = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
        assert answer["parts"] == [{"type": "text", "content": "All done."}]


def test_zero_code_graph_call_outside_a_run_shows_input_and_output(zero_code: Telemetry) -> None:
    agent(middleware=False).invoke(REQUEST)
    assert_all_valid(zero_code)
    (graph,) = zero_code.graph_spans("invoke_agent")
    assert semconv.BOUNDARY_PATH not in graph.attributes  # a plain span, not a boundary
    (answer,) = json.loads(graph.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert answer["finish_reason"] == "stop"
    assert json.loads(graph.attributes[semconv.GEN_AI_INPUT_MESSAGES])[0]["role"] == "user"


def test_zero_code_calls_strategy_messages_valid(
    zero_code: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zero-code ``calls``: no middleware is injected, the seams make and describe each call.
    The seams do not yet describe the tools bound to a model call (``gen_ai.tool.definitions``
    comes only from ``CheckpointMiddleware``), so only the messages are checked here."""
    monkeypatch.setenv("SPANPOINT_STRATEGY", "calls")
    zero_code.clear()
    instrumentor = SpanpointInstrumentor()
    instrumentor.uninstrument()
    instrumentor.instrument(tracer_provider=zero_code.provider)
    twice_sync(lambda: agent(middleware=False), "z-calls")
    chats = assert_all_valid(zero_code)
    assert {s.attributes[semconv.REPLAYED] for s in chats} == {True, False}
    for chat in chats:
        assert_messages_on(chat, tools=False)


def test_every_kind_of_message_and_content_block_is_valid() -> None:
    """Tool results, content blocks, reasoning and images all become schema-valid parts."""
    messages = [
        HumanMessage(
            content=[
                {"type": "text", "text": "What is on this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ]
        ),
        AIMessage(content="", tool_calls=[{"name": "look", "args": {"x": 1}, "id": None}]),
        ToolMessage(content=[{"type": "text", "text": "a cat"}], tool_call_id="c1"),
        AIMessage(content=[{"type": "thinking", "thinking": "hm"}, "It is a cat."]),
    ]
    attrs = model_call_attributes(
        "fake",
        "m",
        {},
        CONTENT,
        messages,
        SystemMessage(content=[{"type": "text", "text": "Be brief."}]),
        [lookup_ticket, {"type": "web_search"}],
    )
    reply = AIMessage(content="A cat.", response_metadata={"stop_reason": "end_turn"})
    attrs.update(describe_model_response(reply, "m", CONTENT))
    for key in MESSAGE_SCHEMAS:
        assert message_schema_errors(key, attrs[key]) == [], key
    assert json.loads(attrs[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["finish_reason"] == "stop"


def test_a_long_conversation_is_cut_and_still_valid() -> None:
    """A bounded attribute is still a JSON document, newest messages kept."""
    policy = CapturePolicy(content="SPAN_ONLY", max_bytes=600)
    messages = [HumanMessage(content=f"turn {i} " + "x" * 200) for i in range(20)]
    messages.append(HumanMessage(content="the last question " + "y" * 2000))
    attrs = model_call_attributes("fake", "m", {}, policy, messages)
    value = attrs[semconv.GEN_AI_INPUT_MESSAGES]
    assert len(value.encode()) <= 600
    assert message_schema_errors(semconv.GEN_AI_INPUT_MESSAGES, value) == []
    kept = json.loads(value)
    assert kept[-1]["parts"][0]["content"].startswith("the last question")


def test_the_schemas_reject_what_viewers_reject() -> None:
    """The schemas are not vacuous: a reply without finish_reason (Phoenix drops the whole
    list), a part without its type, a message without a role all fail."""
    out = semconv.GEN_AI_OUTPUT_MESSAGES
    assert message_schema_errors(out, '[{"role":"assistant","parts":[]}]')
    no_type = '[{"role":"assistant","parts":[{"content":"x"}],"finish_reason":"stop"}]'
    assert message_schema_errors(out, no_type)
    inp = semconv.GEN_AI_INPUT_MESSAGES
    assert message_schema_errors(inp, '[{"parts":[]}]')
    assert message_schema_errors(inp, '[{"role":"user","parts":[{"type":"text","content":[]}]}]')
    assert message_schema_errors(inp, '[{"role":"user","parts":[{"type":"tool_call","id":"1"}]}]')
    assert message_schema_errors(inp, '[{"role":"user","parts":[]}]') == []
    assert message_schema_errors(semconv.GEN_AI_SYSTEM_INSTRUCTIONS, '[{"type":"text"}]')
    assert message_schema_errors(semconv.GEN_AI_TOOL_DEFINITIONS, '[{"type":"function"}]')
    assert message_schema_errors(inp, '[{"role":"user","parts":[]}') != []  # cut JSON


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_run_and_agent_spans_carry_input_and_output(content: Telemetry, mode: str) -> None:
    """With capture on, the agent's graph-call span and the run's root show what they were
    asked and what they answered, executed and replayed."""
    runner = spanpoint.GraphRunner(agent(middleware=False), name="support", capture=CONTENT)

    async def go() -> None:
        for _ in range(2):
            async with spanpoint.run(f"io-{mode}", name="support-run"):
                await runner.ainvoke(REQUEST, thread_id=f"io-{mode}")

    if mode == "async":
        asyncio.run(go())
    else:
        for _ in range(2):
            with spanpoint.run(f"io-{mode}", name="support-run"):
                runner.invoke(REQUEST, thread_id=f"io-{mode}")
    assert_all_valid(content)
    agents = content.spans("invoke_agent support")
    roots = content.runs()
    assert len(agents) == len(roots) == 2
    assert [s.attributes[semconv.REPLAYED] for s in agents] == [False, True]
    for span in agents + roots:
        (asked,) = json.loads(span.attributes[semconv.GEN_AI_INPUT_MESSAGES])
        assert asked == {"role": "user", "parts": [{"type": "text", "content": "Ticket 7 please"}]}
        (answer,) = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
        assert answer["parts"] == [{"type": "text", "content": "All done."}]
        assert answer["finish_reason"] == "stop"


def test_without_capture_no_span_carries_messages(configured: Telemetry) -> None:
    runner = spanpoint.GraphRunner(agent(middleware=False), name="support")
    with spanpoint.run("io-off"):
        runner.invoke(REQUEST, thread_id="io-off")
    for span in configured.spans():
        assert not MESSAGE_SCHEMAS.keys() & (span.attributes or {}).keys(), span.name
