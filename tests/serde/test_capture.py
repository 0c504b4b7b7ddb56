"""Capture policy: metadata first, secrets never leave the process by default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

import spanpoint
from signals import Signals, install_signals
from spanpoint import semconv
from spanpoint.capture import REDACTED, CapturePolicy, is_secret_key
from spanpoint.graph import DurabilityPolicy, GraphRunner, RunRequest, build_resume_request
from spanpoint.telemetry.jsonl import span_to_dict

CONFIG_SECRET = "PLANTED-CONFIG-7f3a9"
CONTEXT_SECRET = "PLANTED-CONTEXT-c41d"
STATE_SECRET = "PLANTED-STATE-9e02b"
PLANTED = (CONFIG_SECRET, CONTEXT_SECRET, STATE_SECRET)


class Input(TypedDict):
    question: str
    password: str


class Output(TypedDict):
    answer: str


class State(Input, Output):
    pass


def answering_graph() -> Any:
    def answer(state: State, runtime: Runtime[dict[str, Any]]) -> dict[str, Any]:
        assert state["password"] == STATE_SECRET  # the graph really had the secrets
        assert runtime.context["auth_token"] == CONTEXT_SECRET
        approved = interrupt({"question": "send the answer?"})
        return {"answer": f"{state['question']} -> 42 (approved={approved})"}

    g = StateGraph(State, input_schema=Input, output_schema=Output, context_schema=dict)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    g.add_edge("answer", END)
    return g.compile(checkpointer=InMemorySaver())


@pytest.fixture
def signals(configured_sqlite) -> Iterator[Signals]:
    installed = install_signals()
    yield installed
    installed.logger_provider.shutdown()
    installed.meter_provider.shutdown()


def test_planted_secrets_never_reach_spans_logs_or_the_store(
    configured_sqlite, signals: Signals, tmp_path: Path
) -> None:
    telemetry = configured_sqlite
    runner = GraphRunner(
        answering_graph(), name="answerer", durability=DurabilityPolicy(warn_in_process=False)
    )
    secrets = {
        "configurable": {"api_key": CONFIG_SECRET, "max_tokens": 256},
        "context": {"auth_token": CONTEXT_SECRET, "tenant": "acme"},
    }
    for _ in range(2):  # executed, then replayed
        with spanpoint.run("SEC-1"):
            first = runner.invoke(
                RunRequest.start(
                    {"question": "meaning?", "password": STATE_SECRET}, thread_id="t", **secrets
                )
            )
            assert build_resume_request(first, True).input.resume is True
            done = runner.invoke(RunRequest.resume(True, thread_id="t", **secrets))
        again = {"question": "again?", "password": STATE_SECRET}
        list(runner.stream(RunRequest.start(again, thread_id="s", **secrets)))
    assert done.output == {"answer": "meaning? -> 42 (approved=True)"}

    spans = json.dumps([span_to_dict(s) for s in telemetry.spans()], default=str)
    records = signals.logs.get_finished_logs()
    logs = json.dumps([[r.log_record.body, dict(r.log_record.attributes)] for r in records])
    store_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("checkpoints.db*"))
    for secret in PLANTED:
        assert secret not in spans, secret
        assert secret not in logs, secret
        assert secret.encode() not in store_bytes, secret
    # Config and context are captured, redacted by key, with innocent keys kept.
    graph_span = telemetry.spans("invoke_workflow answerer")[0]
    config = json.loads(graph_span.attributes[semconv.GRAPH_CONFIG])
    assert config["api_key"] == REDACTED and config["max_tokens"] == 256
    context = json.loads(graph_span.attributes[semconv.GRAPH_CONTEXT])
    assert context == {"auth_token": REDACTED, "tenant": "acme"}
    assert semconv.GRAPH_INPUT not in graph_span.attributes  # state values are off by default
    assert len(telemetry.store.list_checkpoints("SEC-1")) == 2


def test_state_capture_is_opt_in_and_still_redacted(configured) -> None:
    policy = CapturePolicy(capture_state=True)
    runner = GraphRunner(answering_graph(), name="a", capture=policy)
    runner.invoke(
        RunRequest.start(
            {"question": "q", "password": STATE_SECRET},
            thread_id="t",
            context={"auth_token": CONTEXT_SECRET},
        )
    )
    (span,) = configured.spans("invoke_workflow a")
    captured = json.loads(span.attributes[semconv.GRAPH_INPUT])
    assert captured == {"question": "q", "password": REDACTED}
    paused = next(e for e in span.events if e.name == semconv.EVENT_AGENT_PAUSED)
    assert "send the answer?" in paused.attributes[semconv.GRAPH_INTERRUPT_VALUES]


def test_config_capture_can_be_turned_off(configured) -> None:
    runner = GraphRunner(answering_graph(), name="a", capture=CapturePolicy(capture_config=False))
    runner.invoke(
        RunRequest.start(
            {"question": "q", "password": STATE_SECRET},
            thread_id="t",
            context={"auth_token": CONTEXT_SECRET},
            configurable={"region": "eu"},
        )
    )
    (span,) = configured.spans("invoke_workflow a")
    assert semconv.GRAPH_CONFIG not in span.attributes
    assert semconv.GRAPH_CONTEXT not in span.attributes


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("X-Authorization", True),
        ("authToken", True),
        ("session_id", True),
        ("client_secret", True),
        ("Set-Cookie", True),
        ("password", True),
        ("max_tokens", False),
        ("author", False),
        ("tokens_used", False),
        ("keyboard", False),
        ("primary_key_column", False),
    ],
)
def test_secret_keys_are_matched_as_whole_words(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_message_text_is_off_unless_the_env_var_opts_in() -> None:
    message = AIMessage(
        "the launch code is 0000", tool_calls=[{"name": "t", "args": {"token": "x"}, "id": "1"}]
    )
    default = CapturePolicy.from_env({})
    view = default.message_view(message)
    assert "content" not in view and view["content_chars"] == len(message.content)
    assert view["tool_calls"][0]["args"] == {"token": REDACTED}
    for raw, mode in (
        ("SPAN_ONLY", "SPAN_ONLY"),
        ("event_only", "EVENT_ONLY"),
        ("true", "SPAN_AND_EVENT"),
        ("false", "NO_CONTENT"),
    ):
        policy = CapturePolicy.from_env({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": raw})
        assert policy.content == mode
    opted = CapturePolicy(content="SPAN_AND_EVENT").message_view(
        HumanMessage("hello Bearer abcdefghijkl")
    )
    assert opted["content"] == f"hello {REDACTED}"


def test_captured_values_are_bounded_and_cycle_safe() -> None:
    policy = CapturePolicy(max_bytes=100, max_depth=3, max_items=4)
    looped: dict[str, Any] = {"name": "loop"}
    looped["self"] = looped
    assert policy.redact(looped) == {"name": "loop", "self": "<cycle>"}
    deep = {"a": {"b": {"c": {"d": 1}}}}
    assert policy.redact(deep) == {"a": {"b": {"c": "<depth limit>"}}}
    assert policy.redact(list(range(10))) == [0, 1, 2, 3, "… 6 more items"]
    assert len(policy.to_json({"text": "x" * 1000}).encode()) <= 100
    with pytest.raises(spanpoint.ConfigurationError, match="content"):
        CapturePolicy(content="ALL")  # type: ignore[arg-type]
    with pytest.raises(spanpoint.ConfigurationError, match="max_bytes"):
        CapturePolicy(max_bytes=0)
