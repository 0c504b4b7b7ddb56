"""``OTEL_SEMCONV_STABILITY_OPT_IN``: which spelling of a renamed GenAI name spanpoint emits.

A real ``ChatOpenAI`` against the local OpenAI-compatible server, whose usage reports tokens
read from and written to the provider's prompt cache. By default a chat span carries the
cache-write count under the name ``opentelemetry-semantic-conventions`` defines
(``gen_ai.usage.cache_creation.input_tokens``); ``gen_ai_latest_experimental`` gives the
newest name (``gen_ai.usage.cache_write.input_tokens``, semantic-conventions-genai #440), the
one the official LangChain instrumentation emits; ``gen_ai_latest_experimental/dup``
(spanpoint's own dual mode) gives both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import spanpoint
from openai_server import ChatServer
from spanpoint import semconv
from spanpoint.instrumentation import SpanpointInstrumentor

MODEL = "gpt-4o"
READ, WRITTEN = 11, 7
PREVIOUS = semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
NEWEST = semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS


class CachingServer(ChatServer):
    """The chat server, reporting prompt-cache reads and writes in every reply's usage."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().reply(body)
        details = answer["usage"]["prompt_tokens_details"]
        details.update(cached_tokens=READ, cache_write_tokens=WRITTEN)
        return answer


@pytest.fixture
def server() -> Iterator[CachingServer]:
    with CachingServer({}, {MODEL: "Hello."}) as running:
        yield running


@pytest.fixture
def opt_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set ``$OTEL_SEMCONV_STABILITY_OPT_IN`` for the test (read once, so read again)."""

    def choose(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(semconv.SEMCONV_STABILITY_OPT_IN, raising=False)
        else:
            monkeypatch.setenv(semconv.SEMCONV_STABILITY_OPT_IN, value)
        semconv.gen_ai_opt_in.cache_clear()

    yield choose
    semconv.gen_ai_opt_in.cache_clear()


def chat(base_url: str, streaming: bool) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key="sk-local-test-key",  # type: ignore[arg-type]
        streaming=streaming,
        stream_usage=True,
        max_retries=0,
    )


def chat_attributes(telemetry: Any) -> dict[str, Any]:
    (span,) = telemetry.spans(f"chat {MODEL}")
    return dict(span.attributes or {})


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "sse"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, {PREVIOUS}),
        ("http", {PREVIOUS}),  # another signal's opt-in leaves GenAI names alone
        ("gen_ai_latest_experimental", {NEWEST}),
        ("http/dup, gen_ai_latest_experimental", {NEWEST}),
        ("gen_ai_latest_experimental/dup", {PREVIOUS, NEWEST}),
    ],
    ids=["default", "other-signal", "latest", "latest-in-a-list", "dup"],
)
def test_cache_write_tokens_under_the_chosen_names(
    configured: Any,
    server: CachingServer,
    opt_in: Any,
    value: str | None,
    expected: set[str],
    streaming: bool,
) -> None:
    opt_in(value)
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    try:
        with spanpoint.run(f"cache-names-{value}-{streaming}"):
            chat(server.base_url, streaming).invoke("hello")
    finally:
        instrumentor.uninstrument()
    attrs = chat_attributes(configured)
    assert attrs[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == READ
    assert {k for k in attrs if k in (PREVIOUS, NEWEST)} == expected
    assert all(attrs[name] == WRITTEN for name in expected)


def test_the_newest_name_is_the_official_instrumentations(
    configured: Any, server: CachingServer, opt_in: Any
) -> None:
    # The official LangChain instrumentation, alone on this model call, names the count so.
    official = pytest.importorskip("opentelemetry.instrumentation.genai.langchain")
    theirs = official.LangChainInstrumentor()
    theirs.instrument(tracer_provider=configured.provider)
    try:
        chat(server.base_url, streaming=False).invoke("hello")
    finally:
        theirs.uninstrument()
    attrs = chat_attributes(configured)
    assert attrs[NEWEST] == WRITTEN
    assert PREVIOUS not in attrs


def test_the_choice_is_read_once(opt_in: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    opt_in("gen_ai_latest_experimental")
    assert semconv.gen_ai_names(PREVIOUS) == (NEWEST,)
    monkeypatch.setenv(semconv.SEMCONV_STABILITY_OPT_IN, "gen_ai_latest_experimental/dup")
    assert semconv.gen_ai_names(PREVIOUS) == (NEWEST,)  # the process's first answer
