"""GenAI attributes and cost of a real ``ChatAnthropic`` against a local Messages server.

Streamed or not: an executed chat span carries the server's address and port, the stop reason
and, when the reply was not streamed, the message id the server sent, its usage and its price;
the run replayed with the server stopped has no span that claims a paid cost, and each
replayed chat span says what it saved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from genai_prices import Usage as PricedUsage
from genai_prices import calc_price
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic

import spanpoint
from anthropic_server import AnthropicServer
from spanpoint import semconv

MODEL = "claude-sonnet-4-5"  # a model the price table knows
REQUEST = {"messages": [{"role": "user", "content": "What about ticket 7?"}]}


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as running:
        yield running


def run_agent(run_id: str, base_url: str, streaming: bool) -> Any:
    model = ChatAnthropic(
        model=MODEL,
        base_url=base_url,  # type: ignore[call-arg]
        api_key="sk-ant-local",  # type: ignore[arg-type]
        streaming=streaming,
        max_retries=0,
        temperature=0.5,
    )
    agent = create_agent(model, [], middleware=[spanpoint.CheckpointMiddleware()])
    with spanpoint.run(run_id):
        return agent.invoke(REQUEST)


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "sse"])
def test_executed_and_replayed_chat_spans_of_a_real_anthropic_client(
    configured: Any, server: AnthropicServer, streaming: bool
) -> None:
    telemetry = configured
    run_agent(f"anthropic-{streaming}", server.base_url, streaming)
    (sent,) = server.sent
    (span,) = telemetry.spans(f"chat {MODEL}")
    attrs = span.attributes
    port = int(server.base_url.rsplit(":", 1)[1])
    assert attrs[semconv.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert (attrs[semconv.SERVER_ADDRESS], attrs[semconv.SERVER_PORT]) == ("127.0.0.1", port)
    assert list(attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS]) == ["end_turn"]
    assert attrs[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.5
    assert attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == sent["usage"]["output_tokens"]
    priced = PricedUsage(
        input_tokens=attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS],
        output_tokens=attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS],
    )
    paid = float(calc_price(priced, MODEL).total_price)
    assert attrs[semconv.GEN_AI_USAGE_COST_AMOUNT] == pytest.approx(paid)
    if streaming:
        # langchain-anthropic keeps neither the message id nor response_metadata["id"] on a
        # streamed reply (docs/semconv.md).
        assert semconv.GEN_AI_RESPONSE_ID not in attrs
    else:
        assert attrs[semconv.GEN_AI_RESPONSE_ID] == sent["id"]
        assert attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] == sent["usage"]["input_tokens"]

    server.stop()
    telemetry.clear()
    run_agent(f"anthropic-{streaming}", server.base_url, streaming)
    assert server.hits == 1
    (replayed,) = telemetry.spans(f"chat {MODEL}")
    assert replayed.attributes[semconv.REPLAYED] is True
    assert not [k for s in telemetry.spans() for k in s.attributes or {} if "gen_ai.usage" in k]
    assert replayed.attributes[semconv.REPLAY_SAVED_COST] == pytest.approx(paid)
    assert replayed.attributes.get(semconv.GEN_AI_RESPONSE_ID) == attrs.get(
        semconv.GEN_AI_RESPONSE_ID
    )
