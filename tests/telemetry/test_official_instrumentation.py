"""spanpoint beside the official LangChain instrumentation: one ``chat`` span per model call.

``opentelemetry-instrumentation-genai-langchain`` (the real package, with
``opentelemetry-util-genai``) is active on the same tracer provider as spanpoint, and a real
``ChatOpenAI`` talks to a local OpenAI-compatible server. The rule (docs/compatibility.md,
"Beside the official LangChain instrumentation"): for a call spanpoint traces, spanpoint's
span is kept and the official handler starts none; a replayed call has spanpoint's replayed
span and no official one; a call spanpoint does not trace keeps its official span; the
official ``invoke_agent`` span stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import wrapt
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from opentelemetry.sdk.trace import ReadableSpan

import spanpoint
from openai_server import ChatServer
from spanpoint import semconv
from spanpoint._patches import PatchSet, patched
from spanpoint.instrumentation import SpanpointInstrumentor

official = pytest.importorskip("opentelemetry.instrumentation.genai.langchain")

MODEL = "gpt-4o"
PLANS = {MODEL: [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]}
FINALS = {MODEL: "Ticket 7: the printer is out of toner."}
REQUEST = {"messages": [{"role": "user", "content": "What about ticket 7?"}]}
OFFICIAL_SCOPE = "opentelemetry.instrumentation.genai.langchain"


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def chat_model(base_url: str, streaming: bool) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key="sk-local-test-key",  # type: ignore[arg-type]
        streaming=streaming,
        stream_usage=True,
        max_retries=0,
    )


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer(PLANS, FINALS) as running:
        yield running


@pytest.fixture
def both(configured: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """The official instrumentation, and spanpoint as the test's ``setup`` parameter asks:
    ``middleware`` (a GraphRunner with the calls strategy and CheckpointMiddleware),
    ``middleware_alone`` (CheckpointMiddleware in the agent, no runner),
    ``zero_code`` (the instrumentor, graph_call strategy), ``zero_code_calls``, or ``none``
    (the agent as it is)."""
    setup = request.param
    theirs = official.LangChainInstrumentor()
    theirs.instrument(tracer_provider=configured.provider)
    ours = SpanpointInstrumentor() if setup.startswith("zero_code") else None
    if ours is not None:
        strategy = "calls" if setup == "zero_code_calls" else "graph_call"
        ours.instrument(tracer_provider=configured.provider, strategy=strategy)
    try:
        yield setup
    finally:
        if ours is not None:
            ours.uninstrument()
        theirs.uninstrument()


def agent_for(setup: str, base_url: str, streaming: bool) -> Any:
    middleware = [spanpoint.CheckpointMiddleware()] if setup.startswith("middleware") else []
    agent = create_agent(
        chat_model(base_url, streaming), [lookup_ticket], middleware=middleware, name="support"
    )
    if setup == "middleware":
        return spanpoint.GraphRunner(agent, name="support", strategy="calls")
    return agent


def run_agent(run_id: str, agent: Any, setup: str, how: str) -> None:
    kwargs: dict[str, Any] = {}
    if setup == "middleware":
        kwargs["thread_id"] = f"t-{run_id}"

    async def ago() -> None:
        async with spanpoint.run(run_id):
            if how == "ainvoke":
                await agent.ainvoke(REQUEST, **kwargs)
            else:
                async for _ in agent.astream(REQUEST, stream_mode="updates", **kwargs):
                    pass

    if how.startswith("a"):
        asyncio.run(ago())
        return
    with spanpoint.run(run_id):
        if how == "invoke":
            agent.invoke(REQUEST, **kwargs)
        else:
            for _ in agent.stream(REQUEST, stream_mode="updates", **kwargs):
                pass


def operation_spans(telemetry: Any, operation: str) -> list[ReadableSpan]:
    """Every span of a GenAI operation, whoever made it."""
    return [
        s
        for s in telemetry.spans()
        if (s.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == operation
    ]


def scopes(spans: list[ReadableSpan]) -> list[str]:
    return sorted(s.instrumentation_scope.name for s in spans if s.instrumentation_scope)


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream", "astream"])
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "sse"])
@pytest.mark.parametrize(
    "both", ["middleware", "middleware_alone", "zero_code", "zero_code_calls"], indirect=True
)
def test_one_chat_span_per_call_executed_and_replayed(
    configured: Any, server: ChatServer, both: str, streaming: bool, how: str
) -> None:
    setup = both
    run_id = f"official-{setup}-{streaming}-{how}"
    run_agent(run_id, agent_for(setup, server.base_url, streaming), setup, how)
    assert server.hits == 2  # the tool call, then the answer

    chats = operation_spans(configured, semconv.OP_CHAT)
    assert scopes(chats) == ["spanpoint", "spanpoint"], [s.name for s in chats]
    assert all(s.attributes[semconv.REPLAYED] is False for s in chats)
    tools = operation_spans(configured, semconv.OP_EXECUTE_TOOL)
    assert scopes(tools) == ["spanpoint"]
    # The official instrumentation was active all along: its agent span is there.
    agents = [s for s in operation_spans(configured, semconv.OP_INVOKE_AGENT)]
    assert OFFICIAL_SCOPE in scopes(agents)

    server.stop()  # a replayed call that reached it would fail
    configured.clear()
    run_agent(run_id, agent_for(setup, server.base_url, streaming), setup, how)
    assert server.hits == 2

    chats = operation_spans(configured, semconv.OP_CHAT)
    tools = operation_spans(configured, semconv.OP_EXECUTE_TOOL)
    assert OFFICIAL_SCOPE not in scopes(chats + tools)
    if setup == "zero_code" and how.endswith("invoke"):
        # The whole graph call replays: no model or tool call is made again, nor traced.
        assert chats == tools == []
        return
    assert scopes(chats) == ["spanpoint", "spanpoint"]
    assert all(s.attributes[semconv.REPLAYED] is True for s in chats + tools)
    assert scopes(tools) == ["spanpoint"]


@pytest.mark.parametrize("both", ["none"], indirect=True)
def test_calls_spanpoint_does_not_trace_keep_their_official_span(
    configured: Any, server: ChatServer, both: str
) -> None:
    # spanpoint is loaded and its hook applied, but nothing of it is on for this agent (no
    # runner, no instrumentor, no middleware): the official spans are the agent's only ones.
    from spanpoint.calls import official as beside_official

    beside_official.watch()
    assert "calls.official" in patched()
    agent = agent_for(both, server.base_url, streaming=False)
    with spanpoint.run("official-untraced"):
        agent.invoke(REQUEST)
    assert server.hits == 2
    assert scopes(operation_spans(configured, semconv.OP_CHAT)) == [OFFICIAL_SCOPE] * 2
    assert scopes(operation_spans(configured, semconv.OP_EXECUTE_TOOL)) == [OFFICIAL_SCOPE]


@pytest.mark.parametrize("both", ["zero_code_calls"], indirect=True)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_explicit_model_stream_keeps_its_official_span(
    configured: Any, server: ChatServer, both: str, is_async: bool
) -> None:
    # model.stream() never passes the model seam (streams are events, never replayed): the
    # official span is its only chat span, in a run and under the zero-code instrumentor.
    model = chat_model(server.base_url, streaming=True)

    async def astream() -> str:
        async with spanpoint.run("official-explicit-astream"):
            return "".join([str(c.content) async for c in model.astream("hello")])

    if is_async:
        text = asyncio.run(astream())
    else:
        with spanpoint.run("official-explicit-stream"):
            text = "".join(str(c.content) for c in model.stream("hello"))
    assert text.startswith(FINALS[MODEL])
    (chat,) = operation_spans(configured, semconv.OP_CHAT)
    assert chat.instrumentation_scope.name == OFFICIAL_SCOPE
    assert chat.attributes[semconv.GEN_AI_REQUEST_MODEL] == MODEL


@pytest.mark.parametrize("both", ["zero_code"], indirect=True)
def test_a_model_call_outside_a_run_has_one_span(
    configured: Any, server: ChatServer, both: str
) -> None:
    # Outside a run the zero-code instrumentor traces every model call (a plain span).
    model = chat_model(server.base_url, streaming=False)
    model.invoke("hello")
    (chat,) = operation_spans(configured, semconv.OP_CHAT)
    assert chat.instrumentation_scope.name == "spanpoint"
    assert semconv.CHECKPOINT_KEY not in (chat.attributes or {})


def test_official_instrumentation_first_then_spanpoint_seams(
    configured: Any, server: ChatServer
) -> None:
    # Whoever wraps first: spanpoint's patch registry binds a wrapt wrapper it finds on a
    # class (the official instrumentation's) instead of calling it with the instance as its
    # first argument, which the official wrapper takes for a second positional argument.
    class Model:
        def answer(self, question: str, *, polite: bool = False) -> str:
            return f"{question}?" + ("!" if polite else "")

    seen: list[Any] = []

    def theirs(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(instance)
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(Model, "answer", theirs)

    def ours(original: Callable[..., Any]) -> Callable[..., Any]:
        def answer(self: Any, question: str, **kwargs: Any) -> str:
            return "ours: " + original(self, question, **kwargs)

        return answer

    PatchSet("tests.official.bound", lambda: [(Model, "answer", ours)]).apply()
    model = Model()
    assert model.answer("ready", polite=True) == "ours: ready?!"
    assert seen == [model]


@pytest.mark.parametrize("both", ["zero_code_calls"], indirect=True)
def test_one_operation_duration_point_per_call_on_a_shared_meter_provider(
    configured: Any, server: ChatServer, both: str
) -> None:
    # Both instrumentations record gen_ai.client.operation.duration; on one meter provider a
    # call spanpoint traces is measured once (the official handler started no invocation).
    from signals import install_signals

    signals = install_signals()
    theirs = official.LangChainInstrumentor()
    theirs.uninstrument()  # the fixture's, on the global meter provider
    theirs.instrument(tracer_provider=configured.provider, meter_provider=signals.meter_provider)
    try:
        run_agent("official-metrics", agent_for(both, server.base_url, False), both, "invoke")
    finally:
        signals.meter_provider.force_flush()
    assert server.hits == 2
    chat_points = [
        p
        for p in signals.points(semconv.METRIC_GEN_AI_OPERATION_DURATION)
        if p.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT
    ]
    assert sum(p.count for p in chat_points) == 2
    signals.meter_provider.shutdown()
