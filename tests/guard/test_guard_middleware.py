"""GuardMiddleware on create_agent: detections, reflections, stops, per-thread state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from guard_fakes import stuck_on_search
from guard_support import Tools, assert_history_valid, kinds, make_agent, thread
from langchain_core.messages import AIMessage, BaseMessage

from harness import Telemetry
from spanpoint import semconv
from spanpoint.guard import GuardConfig, GuardReport


def model_calls(messages: Sequence[BaseMessage]) -> int:
    """AI messages the model wrote (the guard's explanation is not one)."""
    return sum(
        1
        for m in messages
        if isinstance(m, AIMessage) and "spanpoint_guard" not in m.additional_kwargs
    )


def test_identical_call_loop_reflects_then_stops(otel: Telemetry, tools: Tools) -> None:
    agent = make_agent(stuck_on_search, [tools.make("search")], GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "meaning of life?")]}, thread("a"))

    messages = out["messages"]
    assert kinds(messages) == [
        "h",
        "ai(search)", "t",
        "ai(search)", "t",
        "ai(search)", "t",
        "reflection",  # delivered after the 3rd result, before the 4th model call
        "ai(search)", "skipped",
        "stop",
    ]  # fmt: skip
    # The arguments alternate key order; they are still one call.
    assert [tuple(m.tool_calls[0]["args"]) for m in messages if kinds([m]) == ["ai(search)"]][
        :2
    ] == [("query", "limit"), ("limit", "query")]
    assert model_calls(messages) == 4
    assert tools.count("search") == 3
    assert out["guard_terminated"] is True
    assert out["guard_reason"] == "tool_repeat"
    last = messages[-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert "search" in last.text and "same arguments" in last.text
    assert "`search` 3 times" in messages[7].text
    assert_history_valid(messages)

    report = GuardReport.from_state(out)
    assert report is not None and report.status == "terminated" and report.resumable
    assert report.steps == 4 and report.tool_calls == 4 and report.reflections == 1
    assert [d["step"] for d in report.detections] == [3, 4]


def test_two_reflections_allow_one_more_attempt(tools: Tools) -> None:
    agent = make_agent(stuck_on_search, [tools.make("search")], GuardConfig(max_reflections=2))
    out = agent.invoke({"messages": [("user", "q")]}, thread("b"))
    assert kinds(out["messages"])[-8:] == [
        "t", "reflection", "ai(search)", "t", "reflection", "ai(search)", "skipped", "stop"
    ]  # fmt: skip
    assert model_calls(out["messages"]) == 5
    assert tools.count("search") == 4


def diverse(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
    """25 different calls over three tools, then an answer."""
    if turn >= 25:
        return "done"
    name = ("search", "fetch", "calc")[turn % 3]
    key = {"search": "query", "fetch": "url", "calc": "n"}[name]
    return [{"name": name, "args": {key: turn + 1 if key == "n" else f"item-{turn}"}}]


def test_twenty_five_diverse_steps_have_no_detections(otel: Telemetry, tools: Tools) -> None:
    tool_list = [tools.make(n) for n in ("search", "fetch", "calc")]
    agent = make_agent(diverse, tool_list, GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("d"))

    assert out["messages"][-1].text == "done"
    assert out["guard_terminated"] is False and out["guard_reason"] is None
    report = GuardReport.from_state(out)
    assert report is not None
    assert (report.status, report.detection_count, report.reflections) == ("completed", 0, 0)
    assert report.steps == 26 and tools.count() == 25
    assert otel.guard_events("test") == []
    assert otel.counts(semconv.METRIC_GUARD_DETECTIONS, semconv.GUARD_PATTERN) == {}


def one_of_two_repeats(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Each turn: the same search, plus a fetch of a new page (in parallel)."""
    return [
        {"name": "fetch", "args": {"url": f"https://example.com/{turn}"}},
        {"name": "search", "args": {"query": "same thing"}},
    ]


def test_parallel_calls_evidence_names_the_repeating_tool(otel: Telemetry, tools: Tools) -> None:
    agent = make_agent(
        one_of_two_repeats, [tools.make("search"), tools.make("fetch")], GuardConfig(), otel=otel
    )
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("p"))

    detections = [a for n, a in otel.guard_events("test") if n == semconv.EVENT_GUARD_DETECTION]
    assert [d[semconv.GUARD_STEP] for d in detections] == [3, 4]
    first = detections[0]
    assert first[semconv.GUARD_PATTERN] == "tool_repeat"
    assert first[semconv.GUARD_TOOLS] == ("search",)
    assert first[semconv.GUARD_EVIDENCE].startswith("search called 3 times")
    assert "fetch" not in first[semconv.GUARD_EVIDENCE]
    # Both calls of the stopping turn were answered by the guard, none ran.
    assert kinds(out["messages"])[-4:] == ["ai(fetch,search)", "skipped", "skipped", "stop"]
    assert (tools.count("search"), tools.count("fetch")) == (3, 3)
    assert_history_valid(out["messages"])


def three_in_one_turn(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
    """Three identical lookups in one turn; after the reflection, an answer."""
    if turn == 0:
        return [{"name": "lookup", "args": {"query": "x"}}] * 3
    return "answer"


def test_three_identical_calls_in_one_turn(otel: Telemetry, tools: Tools) -> None:
    agent = make_agent(three_in_one_turn, [tools.make("lookup")], GuardConfig(), otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("3"))

    names = [n for n, _ in otel.guard_events("test")]
    assert names == [
        semconv.EVENT_GUARD_DETECTION,
        semconv.EVENT_GUARD_REFLECTION,
        semconv.EVENT_GUARD_RECOVERED,
    ]
    evidence = otel.guard_events("test")[0][1][semconv.GUARD_EVIDENCE]
    assert evidence == (
        "lookup called 3 times with identical arguments in the last 3 tool calls (3 in this step)"
    )
    assert kinds(out["messages"]) == [
        "h",
        "ai(lookup,lookup,lookup)",
        "t",
        "t",
        "t",
        "reflection",
        "ai()",
    ]
    assert out["spanpoint_guard"]["breaker"] == "closed"
    assert out["guard_terminated"] is False


def test_tool_policy_lets_a_polling_tool_repeat(tools: Tools) -> None:
    def polling(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
        return [{"name": "job_status", "args": {"query": "job-1"}}] if turn < 6 else "finished"

    from spanpoint.guard import ToolPolicy

    config = GuardConfig(
        tool_policies={"job_status": ToolPolicy(allow_repeat=True)}, no_progress_steps=None
    )
    out = make_agent(polling, [tools.make("job_status")], config).invoke(
        {"messages": [("user", "wait")]}, thread("poll")
    )
    assert out["messages"][-1].text == "finished"
    assert out["spanpoint_guard"]["detection_count"] == 0
    assert tools.count() == 6


def test_observe_mode_records_but_never_interferes(otel: Telemetry, tools: Tools) -> None:
    def stuck_then_done(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
        return [{"name": "search", "args": {"query": "q"}}] if turn < 6 else "gave up"

    config = GuardConfig(mode="observe", max_steps=4)
    agent = make_agent(stuck_then_done, [tools.make("search")], config, otel=otel)
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("o"))

    assert out["messages"][-1].text == "gave up"
    assert GuardReport.from_state(out).mode == "observe"
    assert "reflection" not in kinds(out["messages"])
    assert tools.count() == 6 and out["guard_terminated"] is False
    patterns = otel.counts(semconv.METRIC_GUARD_DETECTIONS, semconv.GUARD_PATTERN)
    assert patterns["tool_repeat"] == 4  # calls 3, 4, 5 and 6
    assert patterns["max_steps"] == 1  # recorded once, not enforced
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, semconv.GUARD_REASON) == {}


def test_twelve_concurrent_threads_do_not_share_counters(tools: Tools) -> None:
    def by_thread(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
        who = messages[0].text
        if who.startswith("stuck"):
            return [{"name": "search", "args": {"query": who}}]
        return [{"name": "search", "args": {"query": f"{who}-{turn}"}}] if turn < 4 else "ok"

    agent = make_agent(by_thread, [tools.make("search")], GuardConfig())
    names = [f"{'stuck' if i % 2 else 'fine'}-{i}" for i in range(12)]

    def run(name: str) -> dict[str, Any]:
        return agent.invoke({"messages": [("user", name)]}, thread(name))

    with ThreadPoolExecutor(max_workers=12) as pool:
        results = dict(zip(names, pool.map(run, names), strict=True))

    for name, out in results.items():
        state = out["spanpoint_guard"]
        ran = sum(
            1
            for _, args in tools.log
            if args["query"].startswith(name + "-") or args["query"] == name
        )
        if name.startswith("stuck"):
            assert (out["guard_reason"], state["steps"], ran) == ("tool_repeat", 4, 3), name
        else:
            assert (out["guard_terminated"], state["steps"], ran) == (False, 5, 4), name
            assert state["detection_count"] == 0, name
    assert tools.count() == 6 * 3 + 6 * 4


def test_report_is_json_safe(tools: Tools) -> None:
    out = make_agent(stuck_on_search, [tools.make("search")], GuardConfig()).invoke(
        {"messages": [("user", "q")]}, thread("j")
    )
    report = GuardReport.from_state(out, thread_id="j")
    assert report is not None
    data = json.loads(json.dumps(report.to_dict()))
    assert data["termination"]["reason"] == "tool_repeat"
    assert data["thread_id"] == "j" and data["detections"][0]["pattern"] == "tool_repeat"
