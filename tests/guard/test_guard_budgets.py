"""Hard budgets (steps, tokens, cost, time) and the termination they cause."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from guard_support import Tools, assert_history_valid, kinds, make_agent, thread
from langchain_core.messages import AIMessage, BaseMessage

from harness import Telemetry
from spanpoint import semconv
from spanpoint.guard import GuardConfig, GuardReport, TokenPrice
from spanpoint.guard.budgets import Usage, cost_of


def diverse(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Never repeats, never finishes: only a budget can stop it."""
    return [{"name": "search", "args": {"query": f"question {turn}"}}]


def two_parallel(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [
        {"name": "search", "args": {"query": f"a{turn}"}},
        {"name": "fetch", "args": {"url": f"b{turn}"}},
    ]


def test_token_budget_from_reported_usage_stops_after_the_right_call(
    otel: Telemetry, tools: Tools
) -> None:
    # 120 tokens per call as reported: 360 > 300 after the third call.
    config = GuardConfig(max_tokens_per_run=300)
    agent = make_agent(diverse, [tools.make("search")], config, otel=otel, usage=(100, 20))
    with otel.provider.get_tracer("t").start_as_current_span("test"):
        out = agent.invoke({"messages": [("user", "go")]}, thread("tok"))

    assert kinds(out["messages"]) == [
        "h", "ai(search)", "t", "ai(search)", "t", "ai(search)", "skipped", "stop"
    ]  # fmt: skip
    assert tools.count() == 2
    assert out["guard_reason"] == "max_tokens"
    text = out["messages"][-1].text
    assert "360 tokens, over its budget of 300" in text
    assert "estimated" not in text and "repeat" not in text and "kept calling" not in text
    report = GuardReport.from_state(out)
    assert report is not None
    assert (report.tokens, report.input_tokens, report.output_tokens) == (360, 300, 60)
    assert not report.tokens_estimated and not report.resumable
    assert report.termination["kind"] == "budget"
    assert otel.span("test").attributes[semconv.GUARD_TOKENS] == 360
    assert otel.counts(semconv.METRIC_GUARD_TERMINATIONS, semconv.GUARD_REASON) == {"max_tokens": 1}


def test_tokens_are_estimated_only_when_not_reported(tools: Tools) -> None:
    config = GuardConfig(max_tokens_per_run=40)
    out = make_agent(diverse, [tools.make("search")], config, usage=None).invoke(
        {"messages": [("user", "x" * 100)]}, thread("est")
    )
    assert out["guard_reason"] == "max_tokens"
    assert out["spanpoint_guard"]["tokens_estimated"] is True
    assert "(estimated) tokens" in out["messages"][-1].text


def test_pending_parallel_calls_are_all_answered_at_termination(tools: Tools) -> None:
    config = GuardConfig(max_tokens_per_run=200)
    agent = make_agent(two_parallel, [tools.make("search"), tools.make("fetch")], config)
    out = agent.invoke({"messages": [("user", "go")]}, thread("par"))
    assert kinds(out["messages"])[-4:] == ["ai(search,fetch)", "skipped", "skipped", "stop"]
    skipped = out["messages"][-3:-1]
    assert {m.status for m in skipped} == {"error"}
    assert all("stopped by its guard (max_tokens)" in m.text for m in skipped)
    assert "2 requested tool call(s) were not run" in out["messages"][-1].text
    assert_history_valid(out["messages"])
    assert tools.count() == 2  # the first turn's pair only


def test_max_steps_stops_before_the_next_model_call(tools: Tools) -> None:
    out = make_agent(diverse, [tools.make("search")], GuardConfig(max_steps=3)).invoke(
        {"messages": [("user", "go")]}, thread("steps")
    )
    # Three model calls, their three tool calls ran, then no fourth model call.
    assert kinds(out["messages"]) == ["h"] + ["ai(search)", "t"] * 3 + ["stop"]
    assert tools.count() == 3
    assert out["messages"][-1].text.startswith(
        "I stopped before finishing because this run reached its limit of 3 model calls."
    )


def test_wall_time_budget(tools: Tools) -> None:
    import time

    def slow(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        time.sleep(0.15)
        return diverse(turn, messages)

    out = make_agent(slow, [tools.make("search")], GuardConfig(max_wall_seconds=0.4)).invoke(
        {"messages": [("user", "go")]}, thread("wall")
    )
    assert out["guard_reason"] == "max_wall_seconds"
    assert out["spanpoint_guard"]["wall_seconds"] >= 0.4
    assert "time limit of 0.4 seconds" in out["messages"][-1].text


def test_cost_budget_with_custom_prices(tools: Tools) -> None:
    config = GuardConfig(
        max_cost_usd=0.01, model_prices={"house-model": TokenPrice(input=2e-5, output=1e-4)}
    )
    # Each call: 100 * 2e-5 + 20 * 1e-4 = 0.004 $: over 0.01 after the third call.
    agent = make_agent(diverse, [tools.make("search")], config, model_name="house-model")
    out = agent.invoke({"messages": [("user", "go")]}, thread("cost"))
    assert out["guard_reason"] == "max_cost"
    assert out["spanpoint_guard"]["cost_usd"] == pytest.approx(0.012)
    assert "cost $0.0120, over its budget of $0.0100" in out["messages"][-1].text
    assert tools.count() == 2


def test_cost_from_the_pricing_library() -> None:
    genai_prices = pytest.importorskip("genai_prices")
    config = GuardConfig(track_cost=True)
    usage = Usage(1_000_000, 1_000_000, 0, False, "gpt-4o", "openai")
    # The library's published price, not a table of ours: $2.50 in + $10 out per million.
    assert cost_of(usage, config) == pytest.approx(12.5)
    # Flat prices are cached as per-token rates, tiered ones priced per call: both must
    # give exactly what the library gives for the call.
    for model, provider in (("gpt-4o", "openai"), ("claude-sonnet-4-5", "anthropic")):
        for inp, out, cached in ((1200, 300, 0), (250_000, 4000, 20_000)):
            expected = genai_prices.calc_price(
                genai_prices.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached),
                model,
                provider_id=provider,
            ).total_price
            got = cost_of(Usage(inp, out, cached, False, model, provider), config)
            assert got == pytest.approx(float(expected), rel=1e-12), (model, inp)
    unknown = Usage(10, 10, 0, False, "no-such-model-anywhere", None)
    assert cost_of(unknown, config) is None
    fallback = GuardConfig(track_cost=True, model_prices={"*": TokenPrice(input=1.0, output=1.0)})
    assert cost_of(unknown, fallback) == 20.0
    override = GuardConfig(track_cost=True, model_prices={"gpt-4o": TokenPrice(0.0, 0.0)})
    assert cost_of(usage, override) == 0.0


def test_unpriced_calls_are_counted_not_guessed(tools: Tools) -> None:
    pytest.importorskip("genai_prices")
    out = make_agent(
        lambda turn, messages: "hi",
        [tools.make("search")],
        GuardConfig(track_cost=True),
        model_name="no-such-model-anywhere",
    ).invoke({"messages": [("user", "go")]}, thread("unpriced"))
    assert out["spanpoint_guard"]["unpriced_calls"] == 1
    assert out["spanpoint_guard"]["cost_usd"] == 0.0


def test_budget_explanation_never_claims_a_loop(tools: Tools) -> None:
    for config in (GuardConfig(max_steps=2), GuardConfig(max_tokens_per_run=150)):
        out = make_agent(diverse, [tools.make("search")], config).invoke(
            {"messages": [("user", "go")]}, thread(str(config.max_steps))
        )
        text = out["messages"][-1].text
        assert isinstance(out["messages"][-1], AIMessage)
        assert "budget" in text or "limit" in text
        for claim in ("repeat", "same", "cycle", "failed", "no new information", "note"):
            assert claim not in text, (claim, text)
