"""server.address / server.port and gen_ai.request.* of a chat model, from its own fields."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_anthropic import ChatAnthropic
from langchain_openai import AzureChatOpenAI, ChatOpenAI

from spanpoint import semconv
from spanpoint.calls.attributes import model_info, model_settings_attributes, server_attributes

hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){0,3}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
)
ports = st.one_of(st.none(), st.integers(1, 65535))
paths = st.sampled_from(["", "/", "/v1", "/v1/", "/openai/deployments/x"])


@given(scheme=st.sampled_from(["http", "https", "HTTPS"]), host=hosts, port=ports, path=paths)
def test_an_endpoint_gives_its_host_and_port_or_the_schemes_default(
    scheme: str, host: str, port: int | None, path: str
) -> None:
    url = f"{scheme}://{host}{f':{port}' if port else ''}{path}"
    default = 443 if scheme.lower() == "https" else 80
    assert server_attributes(url) == {
        semconv.SERVER_ADDRESS: host.lower(),
        semconv.SERVER_PORT: port or default,
    }


@given(text=st.text(max_size=30).filter(lambda t: "://" not in t))
def test_what_is_not_an_absolute_url_gives_no_address(text: str) -> None:
    assert server_attributes(text) == {}


def attrs_of(model: Any) -> dict[str, Any]:
    _, _, ls_params = model_info(model)
    return model_settings_attributes(model, ls_params)


@settings(max_examples=40, deadline=None)
@given(
    temperature=st.one_of(st.none(), st.floats(0, 2)),
    max_tokens=st.one_of(st.none(), st.integers(1, 4096)),
    top_p=st.one_of(st.none(), st.floats(0, 1)),
    seed=st.one_of(st.none(), st.integers(0, 2**31)),
    stop=st.one_of(st.none(), st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3)),
)
def test_openai_settings_are_the_models_own(
    temperature: float | None,
    max_tokens: int | None,
    top_p: float | None,
    seed: int | None,
    stop: list[str] | None,
) -> None:
    model = ChatOpenAI(
        model="gpt-4o",
        api_key="sk-test",  # type: ignore[arg-type]
        temperature=temperature,
        max_tokens=max_tokens,  # type: ignore[call-arg]
        top_p=top_p,
        seed=seed,
        stop=stop,  # type: ignore[call-arg]
    )
    attrs = attrs_of(model)
    expected = {
        semconv.GEN_AI_REQUEST_TEMPERATURE: temperature,
        semconv.GEN_AI_REQUEST_MAX_TOKENS: max_tokens,
        semconv.GEN_AI_REQUEST_TOP_P: top_p,
        semconv.GEN_AI_REQUEST_SEED: seed,
        semconv.GEN_AI_REQUEST_STOP_SEQUENCES: stop,
    }
    for key, value in expected.items():
        assert attrs.get(key) == value, key
    # No base_url: the OpenAI client's default endpoint.
    assert attrs[semconv.SERVER_ADDRESS] == "api.openai.com"
    assert attrs[semconv.SERVER_PORT] == 443


def test_each_clients_endpoint_field() -> None:
    anthropic = ChatAnthropic(model="claude-sonnet-4-5", api_key="x")  # type: ignore[arg-type,call-arg]
    assert attrs_of(anthropic)[semconv.SERVER_ADDRESS] == "api.anthropic.com"
    local = ChatAnthropic(
        model="claude-sonnet-4-5",
        api_key="x",  # type: ignore[arg-type]
        base_url="http://127.0.0.1:8123",  # type: ignore[call-arg]
    )
    assert {k: v for k, v in attrs_of(local).items() if k.startswith("server.")} == {
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: 8123,
    }
    azure = AzureChatOpenAI(
        azure_endpoint="https://example-resource.openai.azure.com/",
        api_key="x",  # type: ignore[arg-type]
        api_version="2024-10-21",
        azure_deployment="gpt-4o",
    )
    assert attrs_of(azure)[semconv.SERVER_ADDRESS] == "example-resource.openai.azure.com"
    assert attrs_of(azure)[semconv.SERVER_PORT] == 443
