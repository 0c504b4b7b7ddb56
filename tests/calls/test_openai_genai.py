"""GenAI attributes and cost of a real ``ChatOpenAI`` against a local OpenAI-compatible server.

Every setup (``CheckpointMiddleware``, the zero-code instrumentation), streamed or not, sync
or async: an executed chat span says which response it was (the id the server sent), where it
went (the server's address and port), how it was asked (the model's settings), why it ended,
what it used and what that cost by the price table; a replayed run (the server is stopped)
has no span that claims a paid cost, a replayed chat span reports no paid usage and says what
replaying it saved, and the run's root span sums both under spanpoint's names only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from genai_prices import Usage as PricedUsage
from genai_prices import calc_price
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import spanpoint
from openai_server import ChatServer
from spanpoint import semconv

MODEL = "gpt-4o"  # a model the price table knows
PLANS = {MODEL: [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]}
FINALS = {MODEL: "Ticket 7: the printer is out of toner."}
REQUEST = {"messages": [{"role": "user", "content": "What about ticket 7?"}]}
SETTINGS = {
    "temperature": 0.25,
    "max_tokens": 64,
    "top_p": 0.5,
    "seed": 11,
    "frequency_penalty": 0.125,
    "presence_penalty": 0.375,
    "stop": ["\n\nUser:"],
}


class RecordingServer(ChatServer):
    """The chat server, keeping what it sent: each reply's id, finish reason and usage."""

    def __init__(self) -> None:
        super().__init__(PLANS, FINALS)
        self.sent: dict[str, tuple[str, dict[str, Any]]] = {}
        self._sent_lock = threading.Lock()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().reply(body)
        with self._sent_lock:
            self.sent[answer["id"]] = (answer["choices"][0]["finish_reason"], answer["usage"])
        return answer


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
        **SETTINGS,  # type: ignore[arg-type]
    )


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with RecordingServer() as running:
        yield running


@pytest.fixture(params=["middleware", "zero_code"])
def setup(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "middleware":
        yield request.param
        return
    from spanpoint.instrumentation import SpanpointInstrumentor

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument()
    try:
        yield request.param
    finally:
        instrumentor.uninstrument()


def run_agent(run_id: str, base_url: str, setup: str, streaming: bool, is_async: bool) -> Any:
    middleware = [spanpoint.CheckpointMiddleware()] if setup == "middleware" else []
    agent = create_agent(chat_model(base_url, streaming), [lookup_ticket], middleware=middleware)
    if setup == "middleware":
        agent = spanpoint.GraphRunner(agent, name="support", strategy="calls")

    async def go() -> Any:
        async with spanpoint.run(run_id):
            return await agent.ainvoke(REQUEST, **thread(setup, run_id))

    if is_async:
        return asyncio.run(go())
    with spanpoint.run(run_id):
        return agent.invoke(REQUEST, **thread(setup, run_id))


def thread(setup: str, run_id: str) -> dict[str, Any]:
    return {"thread_id": f"t-{run_id}"} if setup == "middleware" else {}


def chats(telemetry: Any) -> list[Any]:
    """The chat spans, in the order their calls started."""
    return sorted(telemetry.spans(f"chat {MODEL}"), key=lambda s: s.start_time)


def table_price(usage: dict[str, Any]) -> float:
    priced = PricedUsage(
        input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"]
    )
    return float(calc_price(priced, MODEL).total_price)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "sse"])
def test_executed_and_replayed_chat_spans_of_a_real_client(
    configured: Any, server: RecordingServer, setup: str, streaming: bool, is_async: bool
) -> None:
    telemetry = configured
    run_id = f"openai-{setup}-{streaming}-{is_async}"
    run_agent(run_id, server.base_url, setup, streaming, is_async)
    assert server.hits == 2  # the tool call, then the answer
    port = int(server.base_url.split(":")[2].split("/")[0])

    executed = chats(telemetry)
    assert len(executed) == 2
    paid: list[float] = []
    for span, (response_id, (reason, usage)) in zip(executed, server.sent.items(), strict=True):
        attrs = span.attributes
        assert attrs[semconv.REPLAYED] is False
        if streaming:
            # langchain-openai merges the chunks into a message with LangChain's run id and
            # no response_metadata["id"]: the completion id is lost (docs/semconv.md).
            assert semconv.GEN_AI_RESPONSE_ID not in attrs
        else:
            assert attrs[semconv.GEN_AI_RESPONSE_ID] == response_id
        assert list(attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS]) == [reason]
        assert attrs[semconv.SERVER_ADDRESS] == "127.0.0.1"
        assert attrs[semconv.SERVER_PORT] == port
        assert attrs[semconv.GEN_AI_PROVIDER_NAME] == "openai"
        assert attrs[semconv.GEN_AI_OUTPUT_TYPE] == "text"
        assert attrs[semconv.GEN_AI_REQUEST_TEMPERATURE] == SETTINGS["temperature"]
        assert attrs[semconv.GEN_AI_REQUEST_MAX_TOKENS] == SETTINGS["max_tokens"]
        assert attrs[semconv.GEN_AI_REQUEST_TOP_P] == SETTINGS["top_p"]
        assert attrs[semconv.GEN_AI_REQUEST_SEED] == SETTINGS["seed"]
        assert attrs[semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY] == SETTINGS["frequency_penalty"]
        assert attrs[semconv.GEN_AI_REQUEST_PRESENCE_PENALTY] == SETTINGS["presence_penalty"]
        assert list(attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES]) == SETTINGS["stop"]
        assert attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"]
        assert attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"]
        assert attrs[semconv.GEN_AI_USAGE_COST_AMOUNT] == pytest.approx(table_price(usage))
        assert attrs[semconv.GEN_AI_USAGE_COST_CURRENCY] == "USD"
        assert attrs[semconv.GEN_AI_USAGE_COST_SOURCE] == "local"  # priced here, by the table
        paid.append(attrs[semconv.GEN_AI_USAGE_COST_AMOUNT])
    assert {reason for reason, _ in server.sent.values()} == {"tool_calls", "stop"}

    server.stop()  # a replayed call that reached it would fail
    telemetry.clear()
    run_agent(run_id, server.base_url, setup, streaming, is_async)
    assert server.hits == 2

    # No span of the replayed run says it paid anything under the GenAI names.
    assert not [
        (s.name, k) for s in telemetry.spans() for k in s.attributes or {} if "usage.cost" in k
    ]
    (root,) = telemetry.runs()
    assert root.attributes.get(semconv.RUN_EXECUTED_COST, 0.0) == 0.0
    replayed = chats(telemetry)
    if setup == "zero_code":
        # Zero-code, the agent's whole graph call is the boundary that replays: no model
        # call is made again, so none has a span (nor a saved amount: docs/semconv.md).
        assert replayed == []
        return
    assert root.attributes[semconv.RUN_COST_CURRENCY] == "USD"
    assert len(replayed) == 2
    for span, cost, original in zip(replayed, paid, executed, strict=True):
        attrs = span.attributes
        assert attrs[semconv.REPLAYED] is True
        assert not [k for k in attrs if k.startswith("gen_ai.usage.")]  # nothing was paid
        assert attrs.get(semconv.GEN_AI_RESPONSE_ID) == original.attributes.get(
            semconv.GEN_AI_RESPONSE_ID
        )  # the stored reply's own
        assert attrs[semconv.REPLAY_SAVED_COST] == pytest.approx(cost)
        assert attrs[semconv.REPLAY_SAVED_COST_CURRENCY] == "USD"
        assert (
            attrs[semconv.REPLAY_SAVED_INPUT_TOKENS]
            == original.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]
        )
        assert attrs[semconv.SERVER_ADDRESS] == "127.0.0.1" and attrs[semconv.SERVER_PORT] == port
    assert root.attributes[semconv.RUN_SAVED_COST] == pytest.approx(sum(paid))
