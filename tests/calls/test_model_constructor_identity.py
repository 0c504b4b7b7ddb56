"""A model call's key covers how the model was constructed: where the request goes and what
shape the reply takes, not only its identifying params.

Generated over real provider clients (``ChatOpenAI``, ``ChatAnthropic``): every constructor
argument that can change an answer (another server, a header, a query such as Azure's
``api-version``, the Responses API, an output version) gives another key; a credential (the
API key, an ``Authorization`` header) never does, and neither does a new process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from spanpoint.calls.attributes import model_info
from spanpoint.calls.identity import model_call_fingerprint

openai = pytest.importorskip("langchain_openai")

BASE: dict[str, Any] = {"model": "gpt-4o-mini", "api_key": "sk-test-one"}

#: Constructor arguments that change where a call goes or what it returns.
CHANGES: dict[str, list[Any]] = {
    "base_url": ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", "https://gw.example/v1"],
    "default_headers": [{"X-Tenant": "alice"}, {"X-Tenant": "bob"}],
    "default_query": [{"api-version": "2024-10-21"}, {"api-version": "2025-01-01"}],
    "use_responses_api": [True, False],
    "output_version": ["v0", "responses/v1"],
}


def key(model: Any) -> str:
    return model_call_fingerprint(
        model,
        model_info(model)[2],
        settings={},
        tool_choice=None,
        response_format=None,
        tools=[],
        system_message=None,
        messages=[HumanMessage("what is my balance?")],
    )


def chat(**change: Any) -> Any:
    return openai.ChatOpenAI(**{**BASE, **change})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    a=st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in CHANGES.items()}),
    b=st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in CHANGES.items()}),
)
def test_two_constructions_share_a_key_exactly_when_they_send_the_same_request(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    def effective(change: dict[str, Any]) -> dict[str, Any]:
        # Arguments equal to ChatOpenAI's defaults construct the same model.
        return {k: v for k, v in change.items() if (k, v) != ("use_responses_api", False)}

    same = effective(a) == effective(b)
    assert (key(chat(**a)) == key(chat(**b))) == same


@pytest.mark.parametrize(
    "credential",
    [
        {"api_key": "sk-test-two"},
        {"default_headers": {"Authorization": "Bearer rotated"}},
        {"default_headers": {"api-key": "rotated"}},
    ],
    ids=["api_key", "Authorization", "api-key"],
)
def test_a_credential_never_changes_a_key(credential: dict[str, Any]) -> None:
    headers = {"default_headers": {k: "first" for k in credential.get("default_headers", {})}}
    assert key(chat(**credential)) == key(
        chat(**(headers if "default_headers" in credential else {}))
    )


def test_a_key_is_the_same_in_another_process() -> None:
    model = chat(base_url="http://127.0.0.1:9/v1", default_headers={"X-Tenant": "alice"})
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from test_model_constructor_identity import chat, key;"
        "print(key(chat(base_url='http://127.0.0.1:9/v1', default_headers={'X-Tenant': 'alice'})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == key(model)


def test_an_anthropic_endpoint_is_part_of_the_key() -> None:
    anthropic = pytest.importorskip("langchain_anthropic")
    one = anthropic.ChatAnthropic(model="claude-sonnet-4-5", api_key="sk-ant-1")
    other = anthropic.ChatAnthropic(
        model="claude-sonnet-4-5", api_key="sk-ant-2", base_url="http://127.0.0.1:3"
    )
    rotated = anthropic.ChatAnthropic(model="claude-sonnet-4-5", api_key="sk-ant-2")
    assert key(one) != key(other)
    assert key(one) == key(rotated)
