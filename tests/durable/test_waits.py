"""Durable waits: suspend a run for a person's input, provide it, run again to continue."""

from __future__ import annotations

import itertools
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typer.testing import CliRunner

import spanpoint
from spanpoint import semconv
from spanpoint.cli import app
from spanpoint.errors import ConfigurationError, NotInRunError, WaitInsideBoundaryError
from spanpoint.graph import DurabilityPolicy, GraphRunner, wait_for_interrupt
from spanpoint.stores import SqliteStore
from spanpoint.waits import list_waits, provide_input, wait_for_input

done: list[str] = []


@spanpoint.step(name="prepare")
def prepare(order: str) -> str:
    done.append("prepare")
    return f"prepared {order}"


@spanpoint.step(name="ship")
def ship(order: str, approved: bool) -> str:
    done.append("ship")
    return f"shipped {order}" if approved else f"held {order}"


def order_flow(run_id: str) -> tuple[spanpoint.run, str | None]:
    shipped = None
    run = spanpoint.run(run_id)
    with run:
        prepare("o-1")
        approved = wait_for_input(
            "approval", schema={"type": "boolean"}, question="Ship order o-1?"
        )
        shipped = ship("o-1", approved)
    return run, shipped


@pytest.fixture(autouse=True)
def _fresh() -> None:
    done.clear()


def test_a_run_waits_then_continues_after_the_input_is_provided(configured) -> None:
    run, shipped = order_flow("W-1")
    assert run.status == "waiting" and shipped is None
    assert done == ["prepare"]
    (wait,) = list_waits()
    assert (wait.run_id, wait.name, wait.question) == ("W-1", "approval", "Ship order o-1?")
    assert wait.schema == {"type": "boolean"} and not wait.provided
    assert configured.store.get_run("W-1").status == "waiting"
    (run_span,) = configured.runs()
    assert run_span.attributes[semconv.RUN_STATUS] == "waiting"

    again, _ = order_flow("W-1")  # still no input: waits again, replays prepare
    assert again.status == "waiting" and done == ["prepare"]

    provide_input("W-1", "approval", True)
    assert list_waits() == []
    final, shipped = order_flow("W-1")
    assert final.status == "completed" and final.attempt == 3
    assert shipped == "shipped o-1"
    assert done == ["prepare", "ship"]  # prepare replayed, not executed again


def test_provided_values_are_checked_against_the_schema(configured) -> None:
    order_flow("W-2")
    with pytest.raises(ConfigurationError, match="must be of type boolean"):
        provide_input("W-2", "approval", "yes")
    with pytest.raises(ConfigurationError, match="not JSON"):
        provide_input("W-2", "approval", object())
    with pytest.raises(ConfigurationError, match="non-empty string name"):
        provide_input("W-2", "", True)
    provide_input("W-2", "approval", False)
    assert order_flow("W-2")[1] == "held o-1"


def test_waits_outside_a_run_or_inside_a_boundary_are_errors(configured) -> None:
    with pytest.raises(NotInRunError, match=r"spanpoint\.run"):
        wait_for_input("x")

    @spanpoint.step(name="inner")
    def inner() -> Any:
        return wait_for_input("x")

    with pytest.raises(WaitInsideBoundaryError, match="inner"), spanpoint.run("W-3"):
        inner()

    class S(TypedDict):
        v: Any

    def node(state: S) -> dict[str, Any]:
        return {"v": wait_for_input("x")}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    runner = GraphRunner(g.compile(), name="g", strategy="calls")
    with pytest.raises(WaitInsideBoundaryError, match="interrupt"), spanpoint.run("W-4"):
        runner.invoke({"v": None}, thread_id="t")


class Decision(TypedDict):
    decision: str


def approval_graph(executed: list[str]) -> Any:
    def decide(state: Decision) -> dict[str, str]:
        executed.append("decide")
        return {"decision": f"approved={interrupt({'question': 'Refund 30 EUR?'})}"}

    g = StateGraph(Decision)
    g.add_node("decide", decide)
    g.add_edge(START, "decide")
    g.add_edge("decide", END)
    return g.compile(checkpointer=InMemorySaver())


def test_wait_for_interrupt_bridges_a_langgraph_interrupt(configured) -> None:
    executed: list[str] = []
    runner = GraphRunner(
        approval_graph(executed), name="refund", durability=DurabilityPolicy(warn_in_process=False)
    )

    def flow() -> tuple[spanpoint.run, Any]:
        outcome = None
        run = spanpoint.run("W-5")
        with run:
            first = runner.invoke({"decision": ""}, thread_id="t")
            outcome = runner.invoke(wait_for_interrupt(first, schema={"type": "boolean"}))
        return run, outcome

    run, outcome = flow()
    assert run.status == "waiting" and outcome is None
    (wait,) = list_waits()
    assert wait.name.startswith("interrupt-") and wait.question == "Refund 30 EUR?"
    provide_input("W-5", wait.name, True)
    run, outcome = flow()
    assert run.status == "completed"
    assert outcome.output == {"decision": "approved=True"}
    assert executed == ["decide", "decide"]  # the first call replayed; the resume ran
    with pytest.raises(spanpoint.SpanpointError, match="not interrupted"):
        wait_for_interrupt(outcome)


def test_cli_lists_waiting_runs_and_provides_input(tmp_path) -> None:
    address = str(tmp_path / "cli.db")
    store = SqliteStore(address)
    store.start_run("W-6", None)
    store.record_wait("W-6", "approval", "Ship it?", {"type": "boolean"})
    store.close()
    cli = CliRunner()
    listed = cli.invoke(app, ["runs", "--waiting", "--store", address])
    assert listed.exit_code == 0, listed.output
    assert "W-6" in listed.output and "Ship it?" in listed.output
    bad = cli.invoke(app, ["input", "W-6", "approval", "--json", "yes", "--store", address])
    assert bad.exit_code == 2 and "not JSON" in bad.output
    wrong = cli.invoke(app, ["input", "W-6", "approval", "--json", '"yes"', "--store", address])
    assert wrong.exit_code == 2 and "boolean" in wrong.output
    ok = cli.invoke(app, ["input", "W-6", "approval", "--json", "true", "--store", address])
    assert ok.exit_code == 0, ok.output
    store = SqliteStore(address)
    try:
        (wait,) = store.list_waits(pending_only=False)
        assert wait.value_json == "true"
    finally:
        store.close()
    empty = cli.invoke(app, ["runs", "--waiting", "--store", address])
    assert "no run is waiting" in empty.output


# --- a value provided before the run reaches its wait ---------------------------------------

#: Any JSON value that is not a boolean: what `spanpoint input … --json` may store.
NOT_BOOLEAN = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
_runs = itertools.count()


@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(bad=NOT_BOOLEAN)
def test_a_value_provided_early_is_checked_when_the_run_reaches_the_wait(
    configured, bad: Any
) -> None:
    run_id = f"W-early-{next(_runs)}"
    done.clear()
    provide_input(run_id, "approval", bad)  # no wait yet: nothing to check it against
    with pytest.raises(ConfigurationError, match=r"wait 'approval' .* must be of type boolean"):
        order_flow(run_id)
    assert done == ["prepare"], "the run took a branch on a value its wait refuses"
    provide_input(run_id, "approval", True)  # a valid value replaces it
    assert order_flow(run_id)[1] == "shipped o-1"
    assert done == ["prepare", "ship"]


def test_cli_input_given_before_the_wait_is_refused_at_the_wait(tmp_path) -> None:
    address = str(tmp_path / "early.db")
    cli = CliRunner()
    given = cli.invoke(app, ["input", "W-7", "approval", "--json", '"no"', "--store", address])
    assert given.exit_code == 0, given.output  # kept: the run has not reached its wait
    spanpoint.configure(store=address)
    with pytest.raises(ConfigurationError, match="must be of type boolean, not str"):
        order_flow("W-7")
    assert "ship" not in done
