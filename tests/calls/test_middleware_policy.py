"""CallCheckpointPolicy: modes, per-tool overrides, and clear errors for bad values."""

from __future__ import annotations

import copy
import pickle

import pytest

import spanpoint
from spanpoint.errors import ConfigurationError


def test_defaults_make_every_call_a_boundary() -> None:
    policy = spanpoint.CallCheckpointPolicy()
    assert policy.model_mode() == "checkpoint"
    assert policy.tool_mode("anything") == "checkpoint"
    assert policy.nested == "checkpoint" and policy.summary is True


def test_booleans_and_per_tool_overrides() -> None:
    policy = spanpoint.CallCheckpointPolicy(
        model_calls=False,
        tool_calls="always_execute",
        tools={"send_email": "always_execute", "get_time": False, "lookup": True},
    )
    assert policy.model_mode() == "off"
    assert policy.tool_mode("send_email") == "always_execute"
    assert policy.tool_mode("get_time") == "off"
    assert policy.tool_mode("lookup") == "checkpoint"
    assert policy.tool_mode("other") == "always_execute"


def test_policy_is_immutable_and_copies() -> None:
    policy = spanpoint.CallCheckpointPolicy(tools={"send_email": "always_execute"})
    with pytest.raises(TypeError):
        policy.tools["x"] = False  # type: ignore[index]
    assert pickle.loads(pickle.dumps(policy)) == policy
    assert copy.deepcopy(policy) == policy
    assert "send_email" in repr(policy)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_calls": "sometimes"}, "model_calls must be True, False, 'checkpoint'"),
        ({"tool_calls": None}, "tool_calls must be True, False"),
        ({"tools": {"send_email": "always"}}, "tools['send_email'] must be"),
        ({"tools": {"": True}}, "tools keys must be tool names"),
        ({"tools": ["send_email"]}, "tools must map tool names to modes"),
        ({"nested": "replay"}, "nested must be 'checkpoint' or 'trace'"),
        ({"summary": "yes"}, "summary must be True or False"),
    ],
)
def test_invalid_values_are_rejected_at_construction(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("(", r"\(")):
        spanpoint.CallCheckpointPolicy(**kwargs)


def test_middleware_rejects_what_is_not_a_policy() -> None:
    with pytest.raises(ConfigurationError, match="policy must be a CallCheckpointPolicy"):
        spanpoint.CheckpointMiddleware({"tools": {}})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="capture must be"):
        spanpoint.CheckpointMiddleware(capture="NO_CONTENT")  # type: ignore[arg-type]
