"""Callbacks and stream chunks are span events only: they never commit or satisfy a replay."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from fakes import ConversationModel, count_effect, read_effects
from spanpoint import semconv
from spanpoint.capture import CapturePolicy
from spanpoint.events import MAX_EVENTS_PER_SPAN, SpanEventCallbackHandler, StreamRecorder

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7, "api_key": "plain-secret-9"}}]]
REQUEST = {"messages": [{"role": "user", "content": "Ticket 7 please"}]}


def make_agent(effects: Path, *, middleware: bool) -> Any:
    @tool
    def lookup_ticket(ticket_id: int, api_key: str) -> str:
        """Look up a support ticket."""
        count_effect(effects, "lookup_ticket")
        return f"ticket {ticket_id}: printer out of toner"

    return create_agent(
        ConversationModel(plan=PLAN, final="Ticket seven is solved"),
        [lookup_ticket],
        middleware=[spanpoint.CheckpointMiddleware()] if middleware else [],
    )


def callback_types(span: Any) -> list[str]:
    return [
        e.attributes[semconv.CALLBACK_TYPE] for e in span.events if e.name == semconv.EVENT_CALLBACK
    ]


def observed_only(agent: Any, run_id: str) -> None:
    """One run of ``agent`` observed by callbacks and stream events, nothing else."""
    tracer = spanpoint.settings().tracer
    config = {"callbacks": [SpanEventCallbackHandler(chains=True)]}
    with spanpoint.run(run_id), tracer.start_as_current_span("observer") as span:
        recorder = StreamRecorder(span, stream_mode=["updates", "messages", "custom", "tasks"])
        for chunk in agent.stream(
            REQUEST, config, stream_mode=["updates", "messages", "custom", "tasks"]
        ):
            recorder.record(chunk)
        recorder.finish()


def test_a_run_observed_only_by_callbacks_and_streams_commits_nothing(
    configured: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    agent = make_agent(effects, middleware=False)
    observed_only(agent, "observed")
    (observer,) = configured.spans("observer")
    types = callback_types(observer)
    assert {"llm_start", "llm_end", "tool_start", "tool_end", "chain_start"} <= set(types)
    assert any(e.name == semconv.EVENT_STREAM_CHUNK for e in observer.events)
    assert configured.store.list_checkpoints("observed") == []

    observed_only(agent, "observed")
    assert read_effects(effects)["lookup_ticket"] == 2  # nothing replayed
    assert configured.store.list_checkpoints("observed") == []


def test_no_callback_can_satisfy_a_replay(configured: Any, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    observed_only(make_agent(effects, middleware=False), "then-boundaries")
    configured.clear()
    with spanpoint.run("then-boundaries"):
        make_agent(effects, middleware=True).invoke(REQUEST)
    spans = configured.spans("chat") + configured.spans("execute_tool")
    assert len(spans) == 3
    assert not any(s.attributes[semconv.REPLAYED] for s in spans)
    assert read_effects(effects)["lookup_ticket"] == 2


def test_callbacks_land_on_the_call_spans(configured: Any, tmp_path: Path) -> None:
    agent = make_agent(tmp_path / "effects.txt", middleware=True)
    with spanpoint.run("on-spans"):
        agent.invoke(REQUEST, {"callbacks": [SpanEventCallbackHandler()]})
    chats = configured.spans("chat")
    assert [callback_types(s) for s in chats] == [["llm_start", "llm_end"]] * 2
    llm_end = [e for e in chats[0].events if e.attributes[semconv.CALLBACK_TYPE] == "llm_end"]
    assert llm_end[0].attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0
    (tool_span,) = configured.spans("execute_tool")
    assert callback_types(tool_span) == ["tool_start", "tool_end"]

    # A replay calls nothing, so no callback fires: the replayed spans carry no such events.
    configured.clear()
    with spanpoint.run("on-spans"):
        agent.invoke(REQUEST, {"callbacks": [SpanEventCallbackHandler()]})
    assert all(s.attributes[semconv.REPLAYED] for s in configured.spans("chat"))
    assert all(callback_types(s) == [] for s in configured.spans())


def test_time_to_first_token_of_a_streamed_model_call(configured: Any, tmp_path: Path) -> None:
    agent = make_agent(tmp_path / "effects.txt", middleware=True)
    with spanpoint.run("ttft"):
        chunks = list(
            agent.stream(
                REQUEST, {"callbacks": [SpanEventCallbackHandler()]}, stream_mode="messages"
            )
        )
    assert chunks
    final = configured.spans("chat")[-1]
    assert final.attributes[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] >= 0
    (end,) = [e for e in final.events if e.attributes[semconv.CALLBACK_TYPE] == "llm_end"]
    # One chunk per word of "Ticket seven is solved", then the closing chunk with usage.
    assert end.attributes[semconv.CALLBACK_TOKENS] == 5


def test_tool_inputs_only_with_content_capture_and_redacted(
    configured: Any, tmp_path: Path
) -> None:
    agent = make_agent(tmp_path / "effects.txt", middleware=True)
    for mode in ("NO_CONTENT", "SPAN_AND_EVENT"):
        policy = CapturePolicy(content=mode)  # type: ignore[arg-type]
        configured.clear()
        agent.invoke(REQUEST, {"callbacks": [SpanEventCallbackHandler(policy)]})
        (tool_span,) = configured.spans("execute_tool")
        (start,) = [
            e for e in tool_span.events if e.attributes[semconv.CALLBACK_TYPE] == "tool_start"
        ]
        text = json.dumps([dict(e.attributes) for e in tool_span.events])
        assert "plain-secret-9" not in text
        if mode == "NO_CONTENT":
            assert semconv.CALLBACK_CONTENT not in start.attributes
        else:
            content = json.loads(start.attributes[semconv.CALLBACK_CONTENT])
            assert content["ticket_id"] == 7 and content["api_key"] == "[REDACTED]"


def test_callback_events_are_bounded_per_span(configured: Any) -> None:
    handler = SpanEventCallbackHandler()
    tracer = spanpoint.settings().tracer
    with tracer.start_as_current_span("busy"):
        for _ in range(MAX_EVENTS_PER_SPAN + 10):
            handler.on_tool_error(RuntimeError("x"), run_id=uuid.uuid4())
    (busy,) = configured.spans("busy")
    assert len(busy.events) == MAX_EVENTS_PER_SPAN
    assert busy.attributes[semconv.EVENTS_DROPPED] == 10


def test_callbacks_of_an_async_agent_land_on_the_call_spans(
    configured: Any, tmp_path: Path
) -> None:
    agent = make_agent(tmp_path / "effects.txt", middleware=True)

    async def run() -> None:
        async with spanpoint.run("async-callbacks"):
            config = {"callbacks": [SpanEventCallbackHandler()]}
            async for _ in agent.astream(REQUEST, config, stream_mode="messages"):
                pass

    asyncio.run(run())
    chats = configured.spans("chat")
    assert [callback_types(s)[:1] + callback_types(s)[-1:] for s in chats] == [
        ["llm_start", "llm_end"]
    ] * 2
    assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in chats[-1].attributes
    (tool_span,) = configured.spans("execute_tool")
    assert callback_types(tool_span) == ["tool_start", "tool_end"]
