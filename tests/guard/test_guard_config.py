"""GuardConfig validation: bad values fail at construction, naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from guard_fakes import stuck_on_search
from guard_support import Tools, make_agent, thread

from spanpoint.errors import ConfigurationError
from spanpoint.guard import GuardConfig, TokenPrice, ToolPolicy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_repeat_threshold": 1}, "tool_repeat_threshold must be an integer >= 2"),
        ({"tool_repeat_threshold": True}, "tool_repeat_threshold"),
        ({"tool_repeat_window": 2}, "tool_repeat_window \\(2\\) must be at least"),
        ({"cycle_max_period": 1}, "cycle_max_period must be an integer >= 2"),
        ({"cycle_repeats": 1}, "cycle_repeats"),
        ({"no_progress_steps": 0}, "no_progress_steps"),
        ({"error_loop_threshold": 0}, "error_loop_threshold"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_tokens_per_run": -5}, "max_tokens_per_run"),
        ({"max_cost_usd": float("nan")}, "max_cost_usd must be a finite number"),
        ({"max_wall_seconds": 0}, "max_wall_seconds"),
        ({"max_reflections": -1}, "max_reflections"),
        ({"mode": "block"}, "mode must be 'enforce' or 'observe'"),
        ({"tool_policies": {"x": "allow"}}, "tool_policies maps names"),
        ({"model_prices": {"m": 0.1}}, "model_prices maps names"),
        ({"reflection_templates": {"loop": "x"}}, "unknown key 'loop'"),
        ({"reflection_templates": {"tool_repeat": "{output}"}}, "unknown placeholder"),
        ({"reflection_templates": {"tool_repeat": "{}"}}, "unknown placeholder"),
        ({"termination_templates": {"max_steps": "{oops"}}, "not a valid template"),
    ],
)
def test_bad_values_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        GuardConfig(**kwargs)


def test_parts_validate_too() -> None:
    with pytest.raises(ConfigurationError, match="repeat_threshold"):
        ToolPolicy(repeat_threshold=1)
    with pytest.raises(ConfigurationError, match=r"TokenPrice\.output"):
        TokenPrice(input=1e-6, output=-1)


def test_defaults_and_frozen_copies() -> None:
    policies = {"poll": ToolPolicy(allow_repeat=True)}
    config = GuardConfig(tool_policies=policies)
    policies["other"] = ToolPolicy()
    assert set(config.tool_policies) == {"poll"}  # later changes to the dict do not leak in
    assert config.enforcing and not config.costs_tracked
    assert GuardConfig(max_cost_usd=1.0).costs_tracked
    with pytest.raises(AttributeError):
        config.max_steps = 3  # type: ignore[misc]


def test_custom_templates_replace_the_wording(tools: Tools) -> None:
    config = GuardConfig(
        reflection_templates={"tool_repeat": "STOP calling {tool} ({count}x); {remaining} left"},
        termination_templates={"tool_repeat": "Halted: {tool} looped."},
    )
    out = make_agent(stuck_on_search, [tools.make("search")], config).invoke(
        {"messages": [("user", "q")]}, thread("tpl")
    )
    texts = [m.text for m in out["messages"]]
    assert "STOP calling search (3x); 0 left" in texts
    assert texts[-1] == "Halted: search looped."
