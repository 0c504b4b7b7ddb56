"""What model calls cost (issue 16): span attributes from the price table, run totals, saved."""

from __future__ import annotations

from typing import Any

import pytest
from genai_prices import Usage as PricedUsage
from genai_prices import calc_price
from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from fakes import ConversationModel
from harness import metric_points
from spanpoint import semconv
from spanpoint.calls.cost import run_cost
from spanpoint.run import current_run

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]
REQUEST = {"messages": [{"role": "user", "content": "What about ticket 7?"}]}


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: printer out of toner"


def make_runner(model_name: str) -> spanpoint.GraphRunner:
    agent = create_agent(
        ConversationModel(plan=PLAN, model_name=model_name),
        [lookup_ticket],
        system_prompt="You are a support agent.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    return spanpoint.GraphRunner(agent, name="support", strategy="calls")


def invoke_in_one_run(run_id: str, times: int) -> Any:
    """``times`` gpt-4o agent calls, each on its own thread, inside one run; its scope."""
    runner = make_runner("gpt-4o")
    with spanpoint.run(run_id):
        scope = current_run()
        assert scope is not None
        for i in range(times):
            runner.invoke(REQUEST, thread_id=f"t-{run_id}-{i}")
    return scope


def table_price(span: Any) -> float:
    """What genai-prices itself says the span's reported usage costs."""
    usage = PricedUsage(
        input_tokens=span.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS],
        output_tokens=span.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS],
    )
    return float(calc_price(usage, "gpt-4o").total_price)


def test_cost_attributes_equal_the_price_table_for_a_known_model(configured: Any) -> None:
    with spanpoint.run("cost-1"):
        make_runner("gpt-4o").invoke(REQUEST, thread_id="t-1")
    chats = configured.spans("chat")
    assert len(chats) == 2
    for span in chats:
        amount = span.attributes[semconv.GEN_AI_USAGE_COST_AMOUNT]
        assert amount == pytest.approx(table_price(span), rel=1e-9) and amount > 0
        assert span.attributes[semconv.GEN_AI_USAGE_COST_CURRENCY] == "USD"
        assert semconv.COST_UNPRICED not in span.attributes


def test_an_unknown_model_gets_no_cost_and_is_counted_unpriced(configured: Any) -> None:
    with spanpoint.run("cost-2"):
        make_runner("fake-chat").invoke(REQUEST, thread_id="t-2")
    for span in configured.spans("chat"):
        assert semconv.GEN_AI_USAGE_COST_AMOUNT not in span.attributes
        assert span.attributes[semconv.COST_UNPRICED] is True
    totals = run_cost(configured.store, "cost-2")
    assert totals.executed.calls == 2 and totals.executed.unpriced == 2
    assert totals.executed.cost == 0.0 and totals.executed.tokens > 0


def test_a_replayed_run_saved_what_the_original_cost(configured_sqlite: Any) -> None:
    telemetry = configured_sqlite
    runner = make_runner("gpt-4o")
    with spanpoint.run("cost-3"):
        first = runner.invoke(REQUEST, thread_id="t-3")
    original = sum(s.attributes[semconv.GEN_AI_USAGE_COST_AMOUNT] for s in telemetry.spans("chat"))
    assert original > 0
    telemetry.clear()
    with spanpoint.run("cost-3"):
        again = runner.invoke(REQUEST, thread_id="t-3")
    assert again.output["messages"][-1].content == first.output["messages"][-1].content
    chats = telemetry.spans("chat")
    assert chats and all(s.attributes[semconv.REPLAYED] for s in chats)
    # Nothing was paid: no span prices it under the GenAI names, no replayed chat span reports
    # usage a backend would price; each says what it saved.
    assert [(s.name, paid_names(s)) for s in telemetry.spans() if paid_names(s)] == []
    assert not [k for s in chats for k in s.attributes if k.startswith("gen_ai.usage.")]
    saved = sum(s.attributes[semconv.REPLAY_SAVED_COST] for s in chats)
    assert saved == pytest.approx(original, rel=1e-9)
    (root,) = telemetry.runs()
    assert root.attributes[semconv.RUN_SAVED_COST] == pytest.approx(original, rel=1e-9)
    assert root.attributes[semconv.RUN_EXECUTED_COST] == 0.0

    totals = run_cost(telemetry.store, "cost-3")
    assert totals.executed.cost == pytest.approx(original, rel=1e-9)
    assert totals.saved == pytest.approx(original, rel=1e-9)
    assert totals.replayed.tokens == totals.executed.tokens > 0


def test_a_runs_totals_after_each_graph_call_read_nothing_back_from_the_store(
    configured_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The totals on the run span are the attempt's own model calls, kept as they complete:
    # reading the whole run back after each graph call made a run's k-th graph call cost O(k).
    telemetry = configured_sqlite
    reads: list[str] = []
    listed = telemetry.store.list_checkpoints

    def counting(run_id: str) -> Any:
        reads.append(run_id)
        return listed(run_id)

    monkeypatch.setattr(telemetry.store, "list_checkpoints", counting)
    runner = make_runner("gpt-4o")
    for attempt in range(2):  # executed, then replayed
        telemetry.clear()
        with spanpoint.run("cost-many"):
            for i in range(4):
                runner.invoke(REQUEST, thread_id=f"t-many-{i}")
        assert reads == [], f"attempt {attempt + 1} read the run back {len(reads)} times"
        (root,) = telemetry.runs()
        chats = telemetry.spans("chat")
        paid = sum(s.attributes.get(semconv.GEN_AI_USAGE_COST_AMOUNT, 0.0) for s in chats)
        stored = run_cost(telemetry.store, "cost-many", attempt=attempt + 1)
        reads.clear()
        if attempt == 0:
            assert root.attributes[semconv.RUN_EXECUTED_COST] == pytest.approx(paid, rel=1e-9)
            assert stored.executed.cost == pytest.approx(paid, rel=1e-9) and paid > 0
        else:
            assert all(s.attributes[semconv.REPLAYED] for s in chats) and len(chats) == 8
            assert root.attributes[semconv.RUN_SAVED_COST] == pytest.approx(stored.saved, rel=1e-9)
            assert stored.saved > 0 and root.attributes[semconv.RUN_EXECUTED_COST] == 0.0


def paid_names(span: Any) -> list[str]:
    """The GenAI cost names on ``span``: what a backend sums as paid."""
    return [k for k in span.attributes or {} if k.startswith("gen_ai.usage.cost.")]


@pytest.mark.parametrize("name", [semconv.METRIC_RUN_COST, semconv.METRIC_REPLAY_SAVED_COST])
def test_the_run_cost_metrics_count_each_attempts_total_once(name: str) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from spanpoint.graph.summary import _count_cost

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    base = {"run_id": f"saved-{name}", "attempt": 2, "name": "support", "strategy": "calls"}
    # Two graph calls of one attempt: each summary holds the attempt's totals so far.
    for paid, saved in ((0.25, 0.5), (1.0, 0.75)):
        _count_cost(provider, {**base, "cost": {"executed": {"cost": paid}, "saved": saved}})
    points = metric_points(reader, name)
    want = 1.0 if name == semconv.METRIC_RUN_COST else 0.75
    assert [p.value for p in points] == [pytest.approx(want)]
    assert points[0].attributes[semconv.GEN_AI_AGENT_NAME] == "support"


def test_a_call_is_priced_as_the_guard_prices_it() -> None:
    from spanpoint.calls.cost import price
    from spanpoint.guard.budgets import Usage, cost_of
    from spanpoint.guard.config import GuardConfig

    models = (("gpt-4o", "openai"), ("gpt-4o-mini", None), ("claude-3-5-haiku-latest", None))
    for model, provider in models:
        guard = cost_of(Usage(1200, 300, 200, False, model, provider), GuardConfig())
        assert guard is not None
        assert price(model, provider, 1200, 300, 200) == pytest.approx(guard, rel=1e-12)
    assert price("no-such-model-anywhere", None, 10, 10, 0) is None


def test_an_agent_invoked_by_hand_inside_a_run_has_its_totals_on_the_run_span(
    configured_sqlite: Any,
) -> None:
    # No GraphRunner, no instrumentor: the agent's own middleware makes the calls boundaries,
    # and the run span still carries what they cost, then what replay saved.
    telemetry = configured_sqlite
    agent = make_runner("gpt-4o").graph
    for attempt in (1, 2):
        telemetry.clear()
        with spanpoint.run("cost-by-hand"):
            agent.invoke(REQUEST)
        (root,) = telemetry.runs()
        stored = run_cost(telemetry.store, "cost-by-hand", attempt=attempt)
        if attempt == 1:
            assert stored.executed.cost > 0
            assert root.attributes[semconv.RUN_EXECUTED_COST] == pytest.approx(
                stored.executed.cost, rel=1e-9
            )
        else:
            assert root.attributes[semconv.RUN_EXECUTED_COST] == 0.0
            assert root.attributes[semconv.RUN_SAVED_COST] == pytest.approx(stored.saved, rel=1e-9)
            assert stored.saved > 0


def test_a_runs_totals_price_each_model_call_once_however_many_graph_calls_it_makes(
    configured_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The totals after each graph call (and at the run's end) add the calls kept since the
    # last total: looking at every call of the run again made the k-th graph call cost O(k).
    from spanpoint.calls import cost

    telemetry = configured_sqlite
    priced: list[str] = []
    original = cost._checkpoint_cost

    def counting(cp: Any) -> Any:
        priced.append(cp.key)
        return original(cp)

    monkeypatch.setattr(cost, "_checkpoint_cost", counting)
    scope = invoke_in_one_run("cost-once", 4)
    kept = [cp.key for _, cp in scope.model_calls]
    assert len(kept) == 8
    assert priced == kept  # each once, in completion order
    (root,) = telemetry.runs()
    again = cost.attempt_cost(scope.model_calls)  # from scratch: the very same totals
    assert root.attributes[semconv.RUN_EXECUTED_COST] == again.executed.cost > 0
    assert root.attributes[semconv.RUN_EXECUTED_TOKENS] == again.executed.tokens


def test_an_executed_model_call_is_priced_once_from_its_reply_not_again_from_its_bytes(
    configured_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chat span's description prices the reply; the run's totals take that cost for the
    # call's checkpoint instead of decoding the stored output to price it a second time.
    from spanpoint.calls import cost

    decoded: list[bytes] = []
    unpackb = cost.ormsgpack.unpackb

    def counting(data: bytes, **kwargs: Any) -> Any:
        decoded.append(data)
        return unpackb(data, **kwargs)

    monkeypatch.setattr(cost.ormsgpack, "unpackb", counting)
    scope = invoke_in_one_run("cost-live", 2)
    checkpoints = [cp for _, cp in scope.model_calls]
    assert len(checkpoints) == 4 and decoded == []
    kept = [cost._checkpoint_cost(cp) for cp in checkpoints]
    # What the stored bytes say, decoded and priced from scratch: the very same costs.
    for cp in checkpoints:
        del cost._PRICED[(cp.key, cp.output)]
    assert [cost._checkpoint_cost(cp) for cp in checkpoints] == kept
    assert decoded and all(c is not None and c.amount for c in kept)  # decoded this time
    (root,) = configured_sqlite.runs()
    assert root.attributes[semconv.RUN_EXECUTED_COST] == pytest.approx(
        sum(c.amount for c in kept if c is not None and c.amount), rel=1e-12
    )
