"""The detectors: tool repeat, cycle, error loop, no progress — unit and in an agent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from guard_support import Tools, assert_history_valid, kinds, make_agent, thread
from langchain_core.messages import BaseMessage
from langchain_core.tools import ToolException, tool

from harness import Telemetry
from spanpoint import semconv
from spanpoint.guard import GuardConfig, ToolPolicy
from spanpoint.guard.detectors import ToolResult, call_key, detect_cycle, detect_repeat


def test_call_key_ignores_argument_order_but_not_values() -> None:
    assert call_key("s", {"a": 1, "b": [1, 2]}) == call_key("s", {"b": [1, 2], "a": 1})
    assert call_key("s", {"a": 1}) != call_key("s", {"a": 2})
    assert call_key("s", {"a": 1}) != call_key("t", {"a": 1})


def test_repeat_threshold_window_and_tool_override() -> None:
    cfg = GuardConfig(tool_repeat_window=4)
    a, b = call_key("a", {}), call_key("b", {})
    assert detect_repeat([a, b, a, b, a], [a], cfg) is None  # 3 a's, but 2 in the window
    hit = detect_repeat([a, a, b, a], [a], cfg)
    assert hit is not None and hit.fields["count"] == 3
    assert detect_repeat([a, b, b, a, b, a], [a], cfg) is None  # only 2 a's in the window
    relaxed = GuardConfig(tool_policies={"a": ToolPolicy(repeat_threshold=5)})
    assert detect_repeat([a, a, a, a], [a], relaxed) is None
    assert detect_repeat([a] * 5, [a], relaxed) is not None


def test_cycle_needs_a_period_above_one_repeated_back_to_back() -> None:
    cfg = GuardConfig()
    a, b, c, d = (call_key(n, {}) for n in "abcd")
    hit = detect_cycle([a, b, a, b], cfg)
    assert hit is not None and hit.fields["period"] == 2
    assert hit.evidence == "the sequence a → b repeated 2 times in a row"
    assert detect_cycle([a, a, a, a], cfg) is None  # that is a repeat, not a cycle
    assert detect_cycle([a, b, c, a, b, d], cfg) is None
    assert detect_cycle([d, a, b, c, a, b, c], cfg).fields["sequence"] == "a → b → c"
    assert detect_cycle([a, b, c, a, b, c], GuardConfig(cycle_max_period=2)) is None
    assert detect_cycle([a, b, a, b], GuardConfig(cycle_repeats=3)) is None


def rotating(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """A → B → C → A → … with the same arguments each time."""
    name = ("search", "fetch", "calc")[turn % 3]
    return [{"name": name, "args": {"query": "same"}}]


def test_cycle_in_an_agent(otel: Telemetry, tools: Tools) -> None:
    tool_list = [tools.make(n) for n in ("search", "fetch", "calc")]
    agent = make_agent(rotating, tool_list, GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("cyc"))

    assert out["guard_reason"] == "cycle"
    first = next(a for n, a in otel.guard_events("test") if n == semconv.EVENT_GUARD_DETECTION)
    assert first[semconv.GUARD_PATTERN] == "cycle" and first[semconv.GUARD_STEP] == 6
    assert first[semconv.GUARD_EVIDENCE] == (
        "the sequence search → fetch → calc repeated 2 times in a row"
    )
    reflection = next(m for m in out["messages"] if kinds([m]) == ["reflection"])
    assert "(search → fetch → calc)" in reflection.text
    assert "my tool calls kept repeating the same sequence" in out["messages"][-1].text
    assert tools.count() == 6


def failing_tools(tools: Tools) -> list[Any]:
    @tool
    def flaky(query: str) -> str:
        """Always fails."""
        tools.log.append(("flaky", {"query": query}))
        raise ToolException(f"service down for {query}")

    flaky.handle_tool_error = True
    return [flaky, tools.make("backup")]


def test_error_loop_reflects_then_stops_before_the_model(tools: Tools) -> None:
    def keeps_failing(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        return [{"name": "flaky", "args": {"query": f"v{turn}"}}]  # new arguments each time

    out = make_agent(keeps_failing, failing_tools(tools), GuardConfig()).invoke(
        {"messages": [("user", "go")]}, thread("err")
    )
    assert kinds(out["messages"]) == [
        "h",
        "ai(flaky)", "t", "ai(flaky)", "t", "ai(flaky)", "t",
        "reflection",  # the third failure is seen before the 4th model call
        "ai(flaky)", "t",
        "stop",  # the 4th failure: stopped before a 5th model call, nothing pending
    ]  # fmt: skip
    assert out["guard_reason"] == "error_loop"
    assert "4 tool calls in a row failed (flaky)" in out["messages"][-1].text
    assert "the last 3 tool calls failed (flaky)" in out["messages"][7].text
    assert "service down" not in out["messages"][7].text  # never tool output in a reflection
    assert_history_valid(out["messages"])


def test_error_loop_recovers_when_a_call_succeeds(otel: Telemetry, tools: Tools) -> None:
    def switches_after_note(turn: int, messages: Sequence[BaseMessage]) -> Any:
        if turn == 4:
            return "done"
        if any(m.name == "spanpoint_guard" for m in messages):
            return [{"name": "backup", "args": {"query": "v"}}]
        return [{"name": "flaky", "args": {"query": f"v{turn}"}}]

    agent = make_agent(switches_after_note, failing_tools(tools), GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("rec"))
    assert out["messages"][-1].text == "done"
    assert [n for n, _ in otel.guard_events("test")] == [
        semconv.EVENT_GUARD_DETECTION,
        semconv.EVENT_GUARD_REFLECTION,
        semconv.EVENT_GUARD_RECOVERED,
    ]
    assert out["spanpoint_guard"]["breaker"] == "closed"


def test_no_progress_when_new_queries_bring_nothing_new(tools: Tools) -> None:
    def rephrasing(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        return [{"name": "search", "args": {"query": f"phrasing {turn}"}}]

    search = tools.make("search", answer=lambda **kw: "No results.")
    out = make_agent(rephrasing, [search], GuardConfig(no_progress_steps=3)).invoke(
        {"messages": [("user", "go")]}, thread("np")
    )
    assert out["guard_reason"] == "no_progress"
    # Step 1 was new; steps 2-4 repeated it: detected before call 5, stopped before call 6
    # (by then 4 steps in a row had brought nothing new).
    assert kinds(out["messages"])[-4:] == ["reflection", "ai(search)", "t", "stop"]
    assert "4 steps in a row brought no new information" in out["messages"][-1].text
    assert tools.count() == 5


def test_tool_result_order_is_irrelevant_to_progress() -> None:
    from spanpoint.guard.detectors import ingest_results

    counters: dict[str, Any] = {
        "seen_results": [],
        "consecutive_errors": 0,
        "error_tools": [],
        "no_progress_steps": 0,
    }
    cfg = GuardConfig(no_progress_steps=2)
    assert ingest_results(counters, [ToolResult("a", "x", False)], cfg) == []
    assert ingest_results(counters, [ToolResult("a", "x", False)], cfg) == []
    found = ingest_results(counters, [ToolResult("a", "x", False)], cfg)
    assert [d.pattern for d in found] == ["no_progress"]
    assert ingest_results(counters, [ToolResult("a", "y", False)], cfg) == []
    assert counters["no_progress_steps"] == 0
