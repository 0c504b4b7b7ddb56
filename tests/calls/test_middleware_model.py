"""Model calls of a create_agent agent as boundaries: replay fidelity, identity, span shape."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.types import ModelResponse
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from opentelemetry.trace import SpanKind

import spanpoint
from fakes import ConversationModel
from spanpoint import semconv
from spanpoint.calls.spec import decode_model_response, encode_model_response

PLAN = [
    [{"name": "lookup_ticket", "args": {"ticket_id": 7}}],
    [{"name": "lookup_ticket", "args": {"ticket_id": 8}}],
]


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def make_agent(
    *,
    system_prompt: str = "You are a support agent.",
    tools: list[Any] | None = None,
    model: ConversationModel | None = None,
    policy: spanpoint.CallCheckpointPolicy | None = None,
) -> Any:
    return create_agent(
        model or ConversationModel(plan=PLAN),
        tools if tools is not None else [lookup_ticket],
        system_prompt=system_prompt,
        middleware=[spanpoint.CheckpointMiddleware(policy)],
    )


REQUEST = {"messages": [{"role": "user", "content": "Ticket 7 and 8 please"}]}


def ai_messages(result: dict[str, Any]) -> list[AIMessage]:
    return [m for m in result["messages"] if isinstance(m, AIMessage)]


def replayed(telemetry: Any, prefix: str = "chat") -> list[bool]:
    return [bool(s.attributes.get(semconv.REPLAYED)) for s in telemetry.spans(prefix)]


@pytest.mark.parametrize("store", ["configured", "configured_sqlite"])
def test_replayed_model_calls_return_equal_ai_messages(
    request: pytest.FixtureRequest, store: str
) -> None:
    configured = request.getfixturevalue(store)  # each embedded store in turn
    agent = make_agent()
    with spanpoint.run("fidelity"):
        first = agent.invoke(REQUEST)
    configured.clear()
    with spanpoint.run("fidelity"):
        second = agent.invoke(REQUEST)

    original, replay = ai_messages(first), ai_messages(second)
    assert len(original) == 3
    assert replay == original  # content, tool_calls, ids, usage and response metadata
    for before, after in zip(original, replay, strict=True):
        assert after.id == before.id and after.tool_calls == before.tool_calls
        assert after.usage_metadata == before.usage_metadata
    assert replayed(configured) == [True, True, True]
    assert replayed(configured, "execute_tool") == [True, True]


def test_async_model_calls_are_true_boundaries(configured: Any) -> None:
    agent = make_agent()

    async def once() -> dict[str, Any]:
        async with spanpoint.run("async-fidelity"):
            return await agent.ainvoke(REQUEST)

    first = asyncio.run(once())
    configured.clear()
    second = asyncio.run(once())
    assert ai_messages(second) == ai_messages(first)
    assert replayed(configured) == [True, True, True]
    keys = {cp.kind for cp in configured.store.list_checkpoints("async-fidelity")}
    assert keys == {semconv.KIND_MODEL_CALL, semconv.KIND_TOOL_CALL}


def test_sync_and_async_agents_share_checkpoints(configured: Any) -> None:
    """Same run, same inputs: an async rerun replays what the sync run committed."""
    agent = make_agent()
    with spanpoint.run("mixed"):
        first = agent.invoke(REQUEST)
    configured.clear()

    async def again() -> dict[str, Any]:
        async with spanpoint.run("mixed"):
            return await agent.ainvoke(REQUEST)

    assert ai_messages(asyncio.run(again())) == ai_messages(first)
    assert replayed(configured) == [True, True, True]


@pytest.mark.parametrize(
    "change",
    [
        {"system_prompt": "You are a terse support agent."},
        {"model": ConversationModel(plan=PLAN, model_name="fake-chat-2")},
    ],
    ids=["system_prompt", "model"],
)
def test_changed_prompt_or_model_misses_the_cache(configured: Any, change: dict[str, Any]) -> None:
    with spanpoint.run("identity"):
        make_agent().invoke(REQUEST)
    configured.clear()
    with spanpoint.run("identity"):
        make_agent(**change).invoke(REQUEST)
    assert replayed(configured) == [False, False, False]


def test_changed_tool_definition_misses_the_cache(configured: Any) -> None:
    @tool("lookup_ticket")
    def lookup_ticket_v2(ticket_id: int, verbose: bool = False) -> str:
        """Look up a support ticket."""
        return f"ticket {ticket_id}: printer out of toner"

    with spanpoint.run("tool-def"):
        make_agent().invoke(REQUEST)
    configured.clear()
    with spanpoint.run("tool-def"):
        make_agent(tools=[lookup_ticket_v2]).invoke(REQUEST)
    assert replayed(configured) == [False, False, False]
    # The re-executed model chose new tool-call ids, so the tool calls are new calls too.
    assert replayed(configured, "execute_tool") == [False, False]


def test_message_ids_assigned_at_run_time_do_not_enter_identity(configured: Any) -> None:
    agent = make_agent()
    with spanpoint.run("ids"):
        agent.invoke({"messages": [{"role": "user", "content": "hi", "id": "first-id"}]})
    configured.clear()
    with spanpoint.run("ids"):
        agent.invoke({"messages": [{"role": "user", "content": "hi", "id": "other-id"}]})
    assert replayed(configured) == [True, True, True]


def test_chat_span_shape(configured: Any) -> None:
    with spanpoint.run("shape"):
        make_agent().invoke(REQUEST)
    with spanpoint.run("shape"):
        make_agent().invoke(REQUEST)
    executed, replay = configured.spans("chat")[0], configured.spans("chat")[3]
    assert executed.name == "chat fake-chat" and replay.name == "chat fake-chat (replayed)"
    for span in (executed, replay):
        attrs = span.attributes
        assert span.kind is SpanKind.CLIENT
        assert attrs[semconv.GEN_AI_OPERATION_NAME] == "chat"
        assert attrs[semconv.GEN_AI_PROVIDER_NAME] == "fake"
        assert attrs[semconv.GEN_AI_REQUEST_MODEL] == "fake-chat"
        assert attrs[semconv.GEN_AI_RESPONSE_MODEL] == "fake-chat"
        assert attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
        assert attrs[semconv.BOUNDARY_KIND] == semconv.KIND_MODEL_CALL
    # A replay paid nothing: its usage is what it saved (docs/design-notes.md, "Cost").
    assert executed.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert executed.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert semconv.GEN_AI_USAGE_INPUT_TOKENS not in replay.attributes
    assert replay.attributes[semconv.REPLAY_SAVED_OUTPUT_TOKENS] == 5
    assert replay.attributes[semconv.REPLAYED] is True
    assert replay.links[0].context.span_id == executed.context.span_id
    # Content is off by default: no message text on spans.
    assert semconv.GEN_AI_INPUT_MESSAGES not in executed.attributes


def test_calls_nest_under_the_current_span_of_the_same_trace(configured: Any) -> None:
    tracer = spanpoint.settings().tracer
    with spanpoint.run("nesting"), tracer.start_as_current_span("invoke_agent support") as agent:
        make_agent().invoke(REQUEST)
    parent = agent.get_span_context()
    for span in configured.spans("chat") + configured.spans("execute_tool"):
        assert span.context.trace_id == parent.trace_id
        assert span.parent is not None and span.parent.span_id == parent.span_id


def test_outside_a_run_calls_are_only_traced(configured: Any) -> None:
    make_agent().invoke(REQUEST)
    make_agent().invoke(REQUEST)
    chats = configured.spans("chat")
    assert len(chats) == 6
    assert all(semconv.CHECKPOINT_KEY not in s.attributes for s in chats)
    assert all(semconv.REPLAYED not in s.attributes for s in chats)
    assert configured.store.list_runs() == []


def test_model_calls_off_are_not_spans_nor_boundaries(configured: Any) -> None:
    policy = spanpoint.CallCheckpointPolicy(model_calls=False)
    with spanpoint.run("off"):
        make_agent(policy=policy).invoke(REQUEST)
    assert configured.spans("chat") == []
    kinds = {cp.kind for cp in configured.store.list_checkpoints("off")}
    assert kinds == {semconv.KIND_TOOL_CALL}


def test_nested_trace_policy_leaves_the_outer_step_the_unit_of_replay(configured: Any) -> None:
    policy = spanpoint.CallCheckpointPolicy(nested="trace")
    agent = make_agent(policy=policy)

    @spanpoint.step(name="triage")
    def triage() -> str:
        return str(agent.invoke(REQUEST)["messages"][-1].content)

    with spanpoint.run("nested"):
        assert triage() == "All done."
    assert [cp.kind for cp in configured.store.list_checkpoints("nested")] == ["step"]
    assert all(
        s.attributes[semconv.CALL_MODE] == "always_execute" for s in configured.spans("chat")
    )


def test_nested_checkpoint_policy_commits_inner_calls(configured: Any) -> None:
    agent = make_agent()

    @spanpoint.step(name="triage")
    def triage() -> str:
        return str(agent.invoke(REQUEST)["messages"][-1].content)

    with spanpoint.run("nested-cp"):
        triage()
    paths = {cp.path for cp in configured.store.list_checkpoints("nested-cp")}
    assert paths == {"triage", "triage/fake-chat", "triage/lookup_ticket"}


def test_stored_view_is_structural(configured: Any) -> None:
    with spanpoint.run("view"):
        make_agent().invoke({"messages": [{"role": "user", "content": "my password is hunter2"}]})
    views = [cp.view for cp in configured.store.list_checkpoints("view") if cp.kind == "model_call"]
    assert views[0]["model"] == "fake-chat" and views[0]["tools"] == ["lookup_ticket"]
    assert views[0]["last_message"] == {"type": "human", "content_chars": 22}
    assert "hunter2" not in repr(views)


def test_model_response_round_trips_with_structured_output() -> None:
    response = ModelResponse(
        result=[AIMessage(content="x", id="a1", usage_metadata=None)],
        structured_response={"priority": "high"},
    )
    tag, data = spanpoint.serde.dumps(encode_model_response(response))
    assert decode_model_response(spanpoint.serde.loads(tag, data)) == response
