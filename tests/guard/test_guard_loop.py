"""Guard for custom agent loops: check(step) -> decision, outside LangGraph."""

from __future__ import annotations

import json

import pytest

from spanpoint.errors import GuardNotResumableError, GuardRunNotStoppedError
from spanpoint.guard import Guard, GuardConfig, GuardStep, ToolResult


def search(query: str) -> GuardStep:
    return GuardStep(tool_calls=[{"name": "search", "args": {"query": query}}])


def test_a_custom_loop_gets_reflect_then_stop() -> None:
    guard = Guard(GuardConfig())
    same = ToolResult("search", "nothing", False)
    decisions = [guard.check(search("q"))]
    for _ in range(3):
        step = GuardStep(
            tool_calls=[{"name": "search", "args": {"query": "q"}}],
            tool_results=[same],
            usage={"input_tokens": 10, "output_tokens": 5},
            model="m",
        )
        decisions.append(guard.check(step))

    assert [d.action for d in decisions] == ["continue", "continue", "reflect", "stop"]
    assert "`search` 3 times" in decisions[2].reflection
    assert decisions[2].detections[0]["pattern"] == "tool_repeat"
    assert decisions[3].reason == "tool_repeat" and decisions[3].stop
    assert "1 requested tool call(s) were not run" in decisions[3].explanation
    report = guard.report()
    assert report.status == "terminated" and report.tokens_estimated
    # 3 x 15 reported, plus 4 estimated for the first step, which reported no usage
    # (its 14 characters of arguments at 4 characters per token).
    assert (report.input_tokens, report.output_tokens) == (30, 19)
    assert json.loads(json.dumps(guard.state))["steps"] == 4  # the state is JSON-safe


def test_custom_loop_resume_and_budget_finality() -> None:
    guard = Guard(GuardConfig(max_reflections=0))
    for _ in range(3):
        decision = guard.check(search("q"))
    assert decision.stop
    guard.resume(additional_reflections=1, author="ops")
    assert guard.check(GuardStep(text="final answer")).action == "continue"
    assert guard.report().status == "completed"
    with pytest.raises(GuardRunNotStoppedError):
        guard.resume()

    budget = Guard(GuardConfig(max_steps=1))
    budget.check(search("a"))
    assert budget.check(search("b")).reason == "max_steps"
    with pytest.raises(GuardNotResumableError):
        budget.resume()


def test_error_results_drive_the_error_loop() -> None:
    guard = Guard(GuardConfig(error_loop_threshold=2))
    failed = ToolResult("api", "HTTP 500", True)
    guard.check(GuardStep(tool_calls=[{"name": "api", "args": {"n": 1}}]))
    guard.check(GuardStep(tool_calls=[{"name": "api", "args": {"n": 2}}], tool_results=[failed]))
    decision = guard.check(
        GuardStep(tool_calls=[{"name": "api", "args": {"n": 3}}], tool_results=[failed])
    )
    assert decision.action == "reflect"
    assert "the last 2 tool calls failed (api)" in decision.reflection
    assert "HTTP 500" not in decision.reflection
