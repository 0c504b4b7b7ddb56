"""``spanpoint diff RUN_A RUN_B`` (issue 16 item 3): two runs compared boundary by boundary,
down to the first call where they diverge, with its input and output differences and each
run's tokens, cost and duration.

The runs are real ``create_agent`` agents on a SQLite store. The fake model answers from the
conversation it is given and mints random tool-call ids, like a provider: two runs of the same
agent never store the same bytes, so "equal" has to mean equal content.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typer.testing import CliRunner

import spanpoint
from fakes import ConversationModel
from harness import make_telemetry
from spanpoint import serde
from spanpoint.calls.cost import run_cost
from spanpoint.capture import CapturePolicy
from spanpoint.diffs import MessageChange, ValueChange, diff_runs, input_diff, message_changes
from spanpoint.errors import UnknownRunError
from spanpoint.graph import DurabilityPolicy
from spanpoint.stores import SqliteStore
from spanpoint.stores.base import Checkpoint

PLAN = [[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]]
REQUEST = {"messages": [{"role": "user", "content": "What about ticket 7?"}]}
SYSTEM = "You are a support agent."
#: What the ticket system answers in this run: the tool reads it, like a live backend.
TICKETS = {"7": "printer out of toner", "8": "printer out of toner"}


@tool
def lookup_ticket(ticket_id: int) -> str:
    """Look up a support ticket."""
    return f"ticket {ticket_id}: {TICKETS[str(ticket_id)]}"


@tool
def close_ticket(ticket_id: int) -> str:
    """Close a support ticket."""
    return f"ticket {ticket_id} closed"


def run_agent(
    run_id: str, *, status: str, system: str = SYSTEM, tools: Any = None, plan: Any = None
) -> None:
    """One run of the support agent, the ticket system answering ``status``."""
    TICKETS["7"] = TICKETS["8"] = status
    agent = create_agent(
        ConversationModel(plan=plan or PLAN, model_name="gpt-4o"),
        tools or [lookup_ticket],
        system_prompt=system,
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    runner = spanpoint.GraphRunner(agent, name="support", strategy="calls")
    with spanpoint.run(run_id, name="support"):
        runner.invoke(REQUEST, thread_id=f"t-{run_id}")


@pytest.fixture
def store(configured_sqlite: Any) -> SqliteStore:
    # Message text in the input views (it is off by default, invariant 7): the diff shows it.
    spanpoint.configure(capture=CapturePolicy(content="SPAN_ONLY"))
    return configured_sqlite.store


def cli(store: SqliteStore, *args: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from spanpoint.cli import app, console

    monkeypatch.setattr(console, "width", 400)  # one line per line, unwrapped
    return CliRunner().invoke(app, ["diff", *args, "--store", str(store.path)])


def test_a_tool_that_answered_otherwise_is_the_first_divergence(store: SqliteStore) -> None:
    run_agent("orig", status="printer out of toner")
    run_agent("other", status="resolved")

    result = diff_runs(store, "orig", "other")

    first = result.divergence
    assert first is not None and not result.equal
    assert (first.position, first.boundary, first.kind, first.reason) == (
        2,
        "lookup_ticket#1",
        "tool_call",
        "output",
    )
    assert result.same == 1  # the first model call: same input, same answer
    assert first.input is not None and first.input.changed is False
    assert first.output.changed
    assert first.output.text_a == ("tool: ticket 7: printer out of toner",)
    assert first.output.text_b == ("tool: ticket 7: resolved",)
    # What it changed next: the next model call's input, message by message.
    then = result.then
    assert then is not None
    assert (then.boundary, then.kind, then.reason) == ("gpt-4o#2", "model_call", "input")
    assert then.input is not None and then.input.changed
    assert then.input.messages == (
        MessageChange(
            3,
            "changed",
            "tool",
            "tool",
            "ticket 7: printer out of toner",
            "ticket 7: resolved",
            30,
            18,
        ),
    )
    assert then.input.tools == () and then.input.settings == ()
    # Each run's totals are the ones `spanpoint show` prints.
    for side, run_id in ((result.a, "orig"), (result.b, "other")):
        assert side.cost == run_cost(store, run_id)
        assert side.cost.executed.calls == 2 and side.cost.executed.tokens > 0
        assert side.boundaries == 3 and side.attempts == 1 and side.status == "completed"
        assert side.duration_ms > 0


def test_the_cli_shows_the_divergence_and_both_runs_totals(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_agent("orig", status="printer out of toner")
    run_agent("other", status="resolved")

    shown = cli(store, "orig", "other", monkeypatch=monkeypatch)

    assert shown.exit_code == 1, shown.output  # like diff(1): 1 when the runs differ
    out = shown.output
    assert "first divergence at boundary 2 lookup_ticket#1 (tool_call): its output differs" in out
    assert "tool: ticket 7: printer out of toner" in out and "tool: ticket 7: resolved" in out
    assert "then at boundary 3 gpt-4o#2 (model_call): its input changed" in out
    assert (
        "message 3 (tool) changed: 'ticket 7: printer out of toner' -> 'ticket 7: resolved'" in out
    )
    for run_id in ("orig", "other"):
        totals = run_cost(store, run_id)
        assert f"model calls executed: {totals.executed.summary()}" in out
        assert totals.executed.summary() != totals.replayed.summary()


def test_without_content_capture_a_message_shows_its_length_and_the_hint(
    configured_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_agent("orig", status="printer out of toner")  # capture off: the default
    run_agent("other", status="resolved")

    shown = cli(configured_sqlite.store, "orig", "other", monkeypatch=monkeypatch)

    assert shown.exit_code == 1, shown.output
    assert (
        "message 3 (tool) changed: <30 characters, text not captured> -> "
        "<18 characters, text not captured>" in shown.output
    )
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in shown.output


def test_equal_runs_have_no_divergence(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_agent("one", status="printer out of toner")
    run_agent("two", status="printer out of toner")
    bytes_one = [cp.output for cp in store.list_checkpoints("one")]
    bytes_two = [cp.output for cp in store.list_checkpoints("two")]
    assert bytes_one != bytes_two  # run-time ids: a byte comparison would call them different

    result = diff_runs(store, "one", "two")

    assert result.equal and result.divergence is None and result.then is None
    assert result.same == 3 and result.notes == ()
    shown = cli(store, "one", "two", monkeypatch=monkeypatch)
    assert shown.exit_code == 0, shown.output
    assert "no divergence: the runs are equal (3 boundaries" in shown.output


def test_a_changed_system_prompt_and_a_new_tool_diverge_at_the_first_model_call(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_agent("orig", status="printer out of toner")
    run_agent(
        "edited",
        status="printer out of toner",
        system="You are a terse support agent.",
        tools=[lookup_ticket, close_ticket],
    )

    result = diff_runs(store, "orig", "edited")

    first = result.divergence
    assert first is not None and result.same == 0
    assert (first.position, first.boundary, first.reason) == (1, "gpt-4o#1", "input")
    assert first.input is not None
    assert [(m.index, m.change, m.role_a, m.text_a, m.text_b) for m in first.input.messages] == [
        (0, "changed", "system", SYSTEM, "You are a terse support agent.")
    ]
    assert first.input.tools == (ValueChange("close_ticket", "added"),)
    shown = cli(store, "orig", "edited", monkeypatch=monkeypatch)
    assert f"message 0 (system) changed: {SYSTEM!r} -> 'You are a terse support agent.'" in (
        shown.output
    )
    assert "tool definition 'close_ticket' added" in shown.output


def test_the_json_shape_is_pinned(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_agent("orig", status="printer out of toner")
    run_agent("other", status="resolved")

    shown = cli(store, "orig", "other", "--json", monkeypatch=monkeypatch)

    assert shown.exit_code == 1, shown.output
    doc = json.loads(shown.output)
    assert shown.output.strip() == json.dumps(doc, sort_keys=True, indent=2)  # keys sorted
    assert (doc["schema"], doc["version"], doc["equal"], doc["same"]) == (
        "spanpoint.diff",
        1,
        False,
        1,
    )
    assert sorted(doc) == [
        "divergence",
        "equal",
        "notes",
        "runs",
        "same",
        "schema",
        "then",
        "version",
    ]
    side = doc["runs"]["a"]
    assert sorted(side) == [
        "attempts",
        "boundaries",
        "cost",
        "duration_ms",
        "name",
        "run_id",
        "status",
    ]
    assert side["cost"] == run_cost(store, "orig").to_dict()
    first = doc["divergence"]
    assert sorted(first) == ["boundary", "input", "kind", "output", "position", "reason"]
    assert (first["boundary"], first["reason"]) == ("lookup_ticket#1", "output")
    assert sorted(first["input"]) == [
        "changed",
        "fields",
        "fingerprint_a",
        "fingerprint_b",
        "messages",
        "settings",
        "tools",
        "viewed",
    ]
    assert sorted(first["output"]) == [
        "changed",
        "error",
        "text_a",
        "text_b",
        "type_a",
        "type_b",
        "view_a",
        "view_b",
    ]
    assert first["output"]["text_b"] == ["tool: ticket 7: resolved"]
    message = doc["then"]["input"]["messages"][0]
    assert message == {
        "index": 3,
        "change": "changed",
        "role_a": "tool",
        "role_b": "tool",
        "text_a": "ticket 7: printer out of toner",
        "text_b": "ticket 7: resolved",
        "chars_a": 30,
        "chars_b": 18,
        "tool_calls_a": None,
        "tool_calls_b": None,
    }


# --- forks (issue 16 acceptance: the diff of the original and the fork names the cut) -------

#: Ticket 7, then ticket 8 (the 2nd tool call: the cut), then the answer.
TWO_LOOKUPS = [
    [{"name": "lookup_ticket", "args": {"ticket_id": 7}}],
    [{"name": "lookup_ticket", "args": {"ticket_id": 8}}],
]


def test_the_diff_of_a_run_and_its_fork_names_the_cut(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run ids of their own: spanpoint.calls.tasks counts a run's task executions per process
    # by (run id, attempt), so another test's run "orig" would shift these runs' identities.
    run_agent("ticket-42", status="printer out of toner", plan=TWO_LOOKUPS)
    fork_id = spanpoint.fork(
        "ticket-42", at="lookup_ticket#2", output="ticket 8: closed", new_run_id="ticket-42-fork"
    )

    # Before the fork runs: its copies, the cut overridden.
    result = diff_runs(store, "ticket-42", fork_id)
    first = result.divergence
    assert first is not None and result.same == 3  # model, ticket 7, model: copied as they were
    assert (first.position, first.boundary, first.reason) == (4, "lookup_ticket#2", "output")
    assert first.output.text_b == ("tool: ticket 8: closed",)
    assert (result.b.status, result.b.attempts, result.b.boundaries) == ("not run yet", 0, 5)

    # The fork run: every call before the cut replays, the cut returns the override, and the
    # model call that reads it executes. The copy it replaced is none of the fork's boundaries.
    run_agent(fork_id, status="printer out of toner", plan=TWO_LOOKUPS)
    result = diff_runs(store, "ticket-42", fork_id)
    first, then = result.divergence, result.then
    assert first is not None and then is not None and result.same == 3
    assert (first.position, first.boundary, first.reason) == (4, "lookup_ticket#2", "output")
    assert first.input is not None and first.input.changed is False
    assert first.output.text_a == ("tool: ticket 8: printer out of toner",)
    assert first.output.text_b == ("tool: ticket 8: closed",)
    assert (then.boundary, then.reason) == ("gpt-4o#3", "input")
    assert then.input is not None
    assert [(m.index, m.change, m.role_a, m.text_a, m.text_b) for m in then.input.messages] == [
        (5, "changed", "tool", "ticket 8: printer out of toner", "ticket 8: closed")
    ]
    assert result.b.boundaries == 5 and result.b.attempts == 1  # 4 replayed, 1 executed
    assert result.b.cost == run_cost(store, fork_id)
    # The fork paid for the one model call it executed; two were replayed from its copies.
    assert (result.b.cost.executed.calls, result.b.cost.replayed.calls) == (1, 2)
    assert (result.a.cost.executed.calls, result.a.cost.replayed.calls) == (3, 0)
    shown = cli(store, "ticket-42", fork_id, monkeypatch=monkeypatch)
    assert shown.exit_code == 1, shown.output
    assert "first divergence at boundary 4 lookup_ticket#2 (tool_call)" in shown.output


@pytest.mark.postgres
def test_the_cli_diffs_runs_in_a_postgresql_store(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanpoint.cli import app, console
    from spanpoint.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn)
    telemetry = make_telemetry(store)
    spanpoint.configure(capture=CapturePolicy(content="SPAN_ONLY"))
    try:
        run_agent("orig", status="printer out of toner")
        run_agent("other", status="resolved")
    finally:
        telemetry.provider.shutdown()
    monkeypatch.setattr(console, "width", 400)
    shown = CliRunner().invoke(app, ["diff", "orig", "other", "--store", pg_dsn, "--json"])
    assert shown.exit_code == 1, shown.output
    doc = json.loads(shown.output)
    assert (doc["divergence"]["boundary"], doc["then"]["boundary"]) == (
        "lookup_ticket#1",
        "gpt-4o#2",
    )
    assert doc["then"]["input"]["messages"][0]["text_b"] == "ticket 7: resolved"
    store.close()


class Draft(TypedDict):
    log: Annotated[list[str], operator.add]


def approval_graph() -> Any:
    """Draft, then wait for an approval (an interrupt), on a checkpointer of its own."""

    def draft(state: Draft) -> dict[str, Any]:
        return {"log": ["drafted"]}

    def approve(state: Draft) -> dict[str, Any]:
        return {"log": [f"approved={interrupt({'question': 'ship it?'})}"]}

    g = StateGraph(Draft)
    g.add_node("draft", draft)
    g.add_node("approve", approve)
    g.add_edge(START, "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=InMemorySaver())


def test_graph_calls_compare_by_what_happened_not_where_they_ran(store: SqliteStore) -> None:
    # Two runs of one graph call (the default strategy), each on its own checkpointer: their
    # results differ only in LangGraph's checkpoint, task and interrupt ids and their spans.
    for run_id in ("g-1", "g-2"):
        runner = spanpoint.GraphRunner(
            approval_graph(), name="review", durability=DurabilityPolicy(warn_in_process=False)
        )
        with spanpoint.run(run_id):
            assert runner.invoke({"log": []}, thread_id="thread-1").status == "interrupted"
    (one,), (two,) = store.list_checkpoints("g-1"), store.list_checkpoints("g-2")
    assert one.kind == "graph_call" and one.output != two.output

    result = diff_runs(store, "g-1", "g-2")

    assert result.equal, result.divergence
    with spanpoint.run("g-3"):  # another thread: another input, the same outcome
        spanpoint.GraphRunner(
            approval_graph(), name="review", durability=DurabilityPolicy(warn_in_process=False)
        ).invoke({"log": []}, thread_id="thread-3")
    first = diff_runs(store, "g-1", "g-3").divergence
    assert first is not None and (first.boundary, first.reason) == ("review#1", "input")
    assert first.input is not None and not first.input.viewed and not first.output.changed


# --- bad input ------------------------------------------------------------------------------


def test_an_unknown_run_is_a_clear_error_exit_2(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_agent("orig", status="printer out of toner")
    with pytest.raises(UnknownRunError, match=r"no run 'nope'.*spanpoint runs"):
        diff_runs(store, "orig", "nope")
    for args in (("nope", "orig"), ("orig", "nope")):
        shown = cli(store, *args, monkeypatch=monkeypatch)
        assert shown.exit_code == 2, shown.output
        assert "error: no run 'nope'" in shown.output and "spanpoint runs" in shown.output


def test_a_run_id_from_the_terminal_is_printed_literally(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = cli(store, "x[/]\x1b[2J", "y", monkeypatch=monkeypatch)
    assert shown.exit_code == 2
    assert "x[/]\\x1b[2J" in shown.output and "\x1b" not in shown.output


def test_hostile_names_and_values_print_literally(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "[bold red]evil[/] \x1b[31mstep\x1b]0;pwned\x07"

    @spanpoint.step(name=name)
    def evil(text: str) -> str:
        return text.upper()

    for run_id, text in (("h[/]1", "a\x1b[2J[/]"), ("h[/]2", "b\x9b31m[link=x]")):
        with spanpoint.run(run_id):
            evil(text)

    shown = cli(store, "h[/]1", "h[/]2", monkeypatch=monkeypatch)

    assert shown.exit_code == 1, shown.output
    for raw in ("\x1b", "\x07", "\x9b"):
        assert raw not in shown.output
    out = shown.output
    assert "diff of run 'h[/]1' (A) and run 'h[/]2' (B)" in out
    assert "[bold red]evil[/] \\x1b[31mstep\\x1b]0;pwned\\x07#1 (step): its input changed" in out
    # The arguments and the returned values as JSON: an ESC is \u001b, never the byte.
    assert """input 'args' changed: '{"text":"a\\\\u001b[2J[/]"}' -> """ in out
    assert 'value: "A\\u001b[2J[/]"' in out and 'value: "B\\x9b31M[LINK=X]"' in out


def old_row(run_id: str, path: str, output: Any, n: int, output_type: str | None = None) -> Any:
    """A checkpoint as a store written before input data existed: no fingerprint, no view."""
    tag, data = serde.dumps(output)
    return Checkpoint(
        f"{run_id}-{n}",
        run_id,
        path,
        path,
        "step",
        0,
        output_type or tag,
        data,
        "ab" * 16,
        f"{n:016x}",
        started_at_ns=n * 10,
        ended_at_ns=n * 10 + 5,
    )


def put_run(store: SqliteStore, run_id: str, rows: list[Checkpoint]) -> None:
    store.start_run(run_id, "old")
    for cp in rows:
        store.put(cp)
    store.finish_run(run_id, "completed")


def test_rows_without_input_data_are_diffed_by_output_and_say_so(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_run(
        store,
        "old-a",
        [old_row("old-a", "fetch", {"n": 1}, 1), old_row("old-a", "total", {"n": 2}, 2)],
    )
    put_run(
        store,
        "old-b",
        [old_row("old-b", "fetch", {"n": 1}, 1), old_row("old-b", "total", {"n": 3}, 2)],
    )

    result = diff_runs(store, "old-a", "old-b")

    first = result.divergence
    assert first is not None and result.same == 1
    assert (first.boundary, first.reason) == ("total#1", "output")
    assert first.input is not None and first.input.changed is None
    assert any("input data is missing" in note for note in result.notes)
    shown = cli(store, "old-a", "old-b", monkeypatch=monkeypatch)
    assert shown.exit_code == 1
    assert "input data is missing" in shown.output


def test_an_output_outside_the_allow_list_is_compared_by_bytes_never_loaded(
    store: SqliteStore, tmp_path: Path
) -> None:
    # A "pickle" row runs code when loaded: the diff must refuse it, not read it.
    marker = tmp_path / "loaded"
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    put_run(store, "p-a", [old_row("p-a", "fetch", None, 1, "pickle")])
    row = old_row("p-b", "fetch", None, 1, "pickle")
    put_run(store, "p-b", [Checkpoint(**{**_fields(row), "output": payload})])

    result = diff_runs(store, "p-a", "p-b")

    assert not marker.exists()
    first = result.divergence
    assert first is not None and first.reason == "output"
    assert first.output.text_a is None
    assert "refusing to load a 'pickle'" in (first.output.error or "")
    assert any("compared by bytes" in note for note in result.notes)


def _fields(cp: Checkpoint) -> dict[str, Any]:
    return {name: getattr(cp, name) for name in Checkpoint.__slots__}


def test_parallel_calls_match_by_identity_whatever_order_they_started_in(
    store: SqliteStore,
) -> None:
    # Two parallel lookups of one task: run B started them in the other order, so by position
    # (lookup#1, lookup#2) they would pair ticket 7 with ticket 8. Identity, ordinal and input
    # fingerprint (what entered the key, but the run id) say which call is which.
    def call(run_id: str, ticket: int, n: int, answer: str) -> Checkpoint:
        row = old_row(run_id, "lookup", answer, n)
        return dataclasses.replace(
            row,
            kind="tool_call",
            identity=f"task-{ticket}/lookup",
            fingerprint=f"fp-{ticket}",
            input_view={"args": {"ticket_id": ticket}},
        )

    put_run(store, "par-a", [call("par-a", 7, 1, "seven"), call("par-a", 8, 2, "eight")])
    put_run(store, "par-b", [call("par-b", 8, 1, "eight"), call("par-b", 7, 2, "seven")])
    assert diff_runs(store, "par-a", "par-b").equal

    put_run(store, "par-c", [call("par-c", 8, 1, "eight"), call("par-c", 7, 2, "SEVEN")])
    result = diff_runs(store, "par-a", "par-c")
    first = result.divergence
    assert first is not None and result.then is None
    assert (first.boundary, first.reason) == ("lookup#1", "output")  # ticket 7, in run A
    assert (first.output.text_a, first.output.text_b) == (('value: "seven"',), ('value: "SEVEN"',))


# --- the input difference, part by part -----------------------------------------------------


def _view(*texts: str) -> list[dict[str, Any]]:
    return [{"role": "human", "digest": serde.text_digest(t), "text": t} for t in texts]


def test_one_inserted_message_is_one_addition() -> None:
    changes = message_changes(_view("a", "b", "c"), _view("a", "new", "b", "c"))
    assert changes == (MessageChange(1, "added", None, "human", None, "new"),)
    changes = message_changes(_view("a", "b", "c"), _view("a", "c"))
    assert changes == (MessageChange(1, "removed", "human", None, "b", None),)


def test_a_long_conversation_keeps_its_newest_messages_and_names_changes_by_their_index() -> None:
    # A model call's input view keeps the system prompt and the newest VIEW_MESSAGES
    # messages (a view of all of them made every checkpoint as long as the run so far).
    from langchain_core.messages import HumanMessage, SystemMessage

    from spanpoint.calls.inputs import VIEW_MESSAGES, model_input_view
    from spanpoint.capture import default_policy

    n = VIEW_MESSAGES + 10
    history = [HumanMessage(f"turn {i}") for i in range(n)]
    view_a = model_input_view(history, default_policy(), system_message=SystemMessage("sys"))
    assert len(view_a["messages"]) == VIEW_MESSAGES + 1
    assert view_a["messages"][0]["role"] == "system"
    assert (view_a["omitted"], view_a["omitted_at"]) == (10, 1)
    assert view_a["messages"][1]["chars"] == len("turn 10")
    # One more turn, and the last one of the first run changed: each view left out a
    # different count, yet the changes name conversation indexes (the system prompt is 0).
    changed = [*history[:-1], HumanMessage("turn X"), HumanMessage("turn new")]
    view_b = model_input_view(changed, default_policy(), system_message=SystemMessage("sys"))
    assert view_b["omitted"] == 11
    pos = ((view_a["omitted_at"], view_a["omitted"]), (view_b["omitted_at"], view_b["omitted"]))
    changes = message_changes(view_a["messages"], view_b["messages"], positions=pos)
    assert [(c.index, c.change) for c in changes] == [(n, "changed"), (n + 1, "added")]


def test_model_settings_and_tool_definitions_are_compared_by_name() -> None:
    def cp(view: dict[str, Any], fp: str) -> Checkpoint:
        return Checkpoint(
            "k",
            "r",
            "m",
            "m",
            "model_call",
            0,
            "null",
            b"",
            "ab" * 16,
            "cd" * 8,
            fingerprint=fp,
            input_view=view,
        )

    a = {
        "messages": _view("hi"),
        "settings": {"temperature": 0},
        "tools": [{"name": "lookup", "digest": "1"}, {"name": "gone", "digest": "2"}],
    }
    b = {
        "messages": _view("hi"),
        "settings": {"temperature": 1, "seed": 3},
        "tools": [{"name": "lookup", "digest": "9"}],
    }
    found = input_diff(cp(a, "f1"), cp(b, "f2"))
    assert found.changed and found.messages == ()
    assert found.settings == (
        ValueChange("seed", "added", None, 3),
        ValueChange("temperature", "changed", 0, 1),
    )
    assert found.tools == (ValueChange("gone", "removed"), ValueChange("lookup", "changed"))
    # The same fingerprint is the same input, whatever the views say.
    assert input_diff(cp(a, "f1"), cp(b, "f1")).changed is False
