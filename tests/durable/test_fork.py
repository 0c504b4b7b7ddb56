"""Forks (issue 16 item 2): a recorded run again, with one call's output overridden.

The agent is a real ``create_agent`` graph; the model answers from the conversation it is
given (``fakes.ConversationModel``) and the tools count their side effects in a file, so the
tests see exactly which calls executed again in the fork and which were reused.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
import spanpoint.errors
from fakes import CountingModel, count_effect, read_effects
from spanpoint import semconv, serde
from spanpoint.calls.cost import run_cost
from spanpoint.capture import CapturePolicy

# Turn 0 looks ticket 7 up, turn 1 ticket 8 (the 2nd tool call, where the fork cuts), turn 2
# notifies ticket 7's owner; then the model answers.
PLAN = [
    [{"name": "lookup_ticket", "args": {"ticket_id": 7}}],
    [{"name": "lookup_ticket", "args": {"ticket_id": 8}}],
    [{"name": "notify", "args": {"ticket_id": 7, "token": "sk-abcdefghijklmnopqrstuvwx"}}],
]
REQUEST = {"messages": [{"role": "user", "content": "What about tickets 7 and 8?"}]}


def make_runner(effects: Path) -> spanpoint.GraphRunner:
    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, f"lookup_ticket:{ticket_id}")
        return f"ticket {ticket_id}: printer out of toner"

    @tool
    def notify(ticket_id: int, token: str) -> str:
        """Tell the ticket's owner."""
        count_effect(effects, f"notify:{ticket_id}")
        return f"notified the owner of ticket {ticket_id}"

    agent = create_agent(
        CountingModel(plan=PLAN, final="Both tickets are handled.", effects=str(effects)),
        [lookup_ticket, notify],
        system_prompt="You are a support agent.",
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    return spanpoint.GraphRunner(agent, name="support", strategy="calls")


@pytest.fixture(autouse=True)
def _unique_run_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ids unique to the test: spanpoint.calls.tasks counts a process's executions of a
    LangGraph task per (run id, attempt), and every test's new store starts at attempt 1."""
    UNIQUE[0] = uuid.uuid4().hex[:8]


UNIQUE = [""]


def rid(name: str) -> str:
    return f"{name}-{UNIQUE[0]}"


def record(runner: spanpoint.GraphRunner, run_id: str) -> Any:
    with spanpoint.run(rid(run_id)):
        return runner.invoke(REQUEST, thread_id=f"thread-{run_id}")


def fork(run_id: str, *, at: str, output: Any, new_run_id: str) -> str:
    return spanpoint.fork(rid(run_id), at=at, output=output, new_run_id=rid(new_run_id))


# --- what a checkpoint keeps of its input ----------------------------------------------------


def test_a_checkpoint_keeps_what_entered_its_key_and_a_redacted_input_view(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    record(make_runner(tmp_path / "effects"), "orig")
    checkpoints = configured_sqlite.store.list_checkpoints(rid("orig"))
    assert [c.kind for c in checkpoints] == ["model_call", "tool_call"] * 3 + ["model_call"]
    for cp in checkpoints:
        # The key is what serde computes from the stored identity, ordinal and fingerprint:
        # so a fork can compute it again for another run id.
        assert cp.fingerprint and cp.identity and cp.identity.endswith("/" + cp.name)
        assert serde.checkpoint_key(rid("orig"), cp.identity, cp.ordinal, cp.fingerprint) == cp.key
        assert cp.input_view is not None
    first_model, first_tool = checkpoints[0], checkpoints[1]
    view = first_model.input_view
    assert [m["role"] for m in view["messages"]] == ["system", "human"]
    assert all(len(m["digest"]) == 64 for m in view["messages"])
    # No content capture by default (invariant 7): lengths and digests, no text.
    assert [m["text"] for m in view["messages"]] == [None, None]
    assert [t["name"] for t in view["tools"]] == ["lookup_ticket", "notify"]
    assert first_tool.input_view == {"args": {"ticket_id": 7}}
    notify_view = checkpoints[5].input_view
    assert notify_view["args"]["ticket_id"] == 7
    assert "sk-abcdefghijklmnopqrstuvwx" not in str(notify_view)
    # The last model call saw every message; the tool results differ by digest.
    last = checkpoints[-1].input_view["messages"]
    assert [m["role"] for m in last] == ["system", "human"] + ["ai", "tool"] * 3
    assert last[3]["digest"] != last[5]["digest"]


def test_message_text_is_kept_when_content_capture_is_on(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    spanpoint.configure(
        tracer_provider=configured_sqlite.provider,
        store=configured_sqlite.store,
        capture=CapturePolicy(content="SPAN_ONLY"),
    )
    record(make_runner(tmp_path / "effects"), "orig")
    last = configured_sqlite.store.list_checkpoints(rid("orig"))[-1].input_view["messages"]
    assert last[0]["text"] == "You are a support agent."
    assert last[3]["text"] == "ticket 7: printer out of toner"
    assert read_effects(tmp_path / "effects")["lookup_ticket:7"] == 1


# --- a fork ----------------------------------------------------------------------------------


def tool_texts(result: Any) -> list[str]:
    return [m.content for m in result.output["messages"] if m.type == "tool"]


def everything(store: spanpoint.CheckpointStore) -> tuple[Any, ...]:
    """What the store holds, to prove that a refused fork wrote nothing."""
    runs = store.list_runs(limit=1000)
    return (
        tuple(runs),
        tuple(cp for r in runs for cp in store.list_checkpoints(r.run_id)),
        tuple(store.list_checkpoints(rid("fork-1"))),
    )


def test_a_fork_at_the_second_tool_call_executes_only_the_calls_whose_input_changed(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    telemetry, effects = configured_sqlite, tmp_path / "effects"
    original = record(make_runner(effects), "orig")
    assert read_effects(effects) == {
        "model": 4, "lookup_ticket:7": 1, "lookup_ticket:8": 1, "notify:7": 1
    }  # fmt: skip
    (original_run,) = telemetry.runs()
    telemetry.clear()

    new_id = fork(
        "orig", at="lookup_ticket#2", output="ticket 8: closed as a duplicate", new_run_id="fork-1"
    )
    assert new_id == rid("fork-1")
    effects.unlink()
    forked = record(make_runner(effects), "fork-1")

    # Before the cut: reused. The cut: the override, not the tool. After it: the two model
    # calls that read the overridden result execute; notify(7), whose arguments did not
    # change, is reused.
    assert read_effects(effects) == {"model": 2}
    assert tool_texts(original) == [
        "ticket 7: printer out of toner",
        "ticket 8: printer out of toner",
        "notified the owner of ticket 7",
    ]
    assert tool_texts(forked) == [
        "ticket 7: printer out of toner",
        "ticket 8: closed as a duplicate",
        "notified the owner of ticket 7",
    ]
    replayed = [s for s in telemetry.spans() if (s.attributes or {}).get("spanpoint.replayed")]
    executed = [
        s for s in telemetry.spans()
        if (s.attributes or {}).get("spanpoint.replayed") is False
    ]  # fmt: skip
    assert sorted(s.attributes["spanpoint.boundary.kind"] for s in executed) == ["model_call"] * 2
    assert len(replayed) == 5  # 2 model calls and 3 tool calls

    # The fork's run span links to the original run's span and names the cut.
    (fork_run,) = telemetry.runs()
    origin = original_run.get_span_context()
    (link,) = fork_run.links
    assert (link.context.trace_id, link.context.span_id) == (origin.trace_id, origin.span_id)
    assert link.attributes == {"spanpoint.link": semconv.LINK_FORK_ORIGIN}
    attrs = fork_run.attributes
    assert attrs[semconv.FORK_ORIGIN_RUN_ID] == rid("orig")
    assert attrs[semconv.FORK_CUT] == "lookup_ticket#2"
    assert attrs[semconv.FORK_CUT_KIND] == "tool_call"
    assert attrs[semconv.FORK_ORIGIN_SPAN_ID] == format(origin.span_id, "016x")
    assert semconv.WARNINGS not in attrs  # the cut was reached
    # What the fork paid is what it executed itself; the copies were paid by the original.
    totals = run_cost(telemetry.store, new_id)
    assert (totals.executed.calls, totals.replayed.calls) == (2, 2)

    # The original run is untouched; running the fork again executes nothing.
    effects.unlink()
    again = record(make_runner(effects), "fork-1")
    assert read_effects(effects) == {}
    assert tool_texts(again) == tool_texts(forked)
    assert tool_texts(record(make_runner(effects), "orig")) == tool_texts(original)
    assert read_effects(effects) == {}


def test_a_fork_at_a_model_call_returns_the_override_and_executes_what_follows(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    record(make_runner(effects), "orig")
    # The first reply calls notify instead of looking ticket 7 up.
    call = {"name": "notify", "args": {"ticket_id": 9, "token": "t"}}
    reply = {"content": "", "tool_calls": [call]}
    fork("orig", at="fake-chat#1", output=reply, new_run_id="fork-1")
    effects.unlink()
    forked = record(make_runner(effects), "fork-1")
    assert tool_texts(forked) == [
        "notified the owner of ticket 9",
        "ticket 8: printer out of toner",
        "notified the owner of ticket 7",
    ]
    # The override came from the store; notify(9) is a new call; the three model calls after
    # it read another conversation, so they execute. The later tool calls have the original's
    # arguments at the original's positions: reused (a tool call is keyed by its own input).
    assert read_effects(effects) == {"notify:9": 1, "model": 3}


def test_the_command_line_forks_and_prints_the_new_run_id(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from spanpoint.cli import app

    record(make_runner(tmp_path / "effects"), "orig")
    address = str(configured_sqlite.store.path)
    result = CliRunner().invoke(
        app,
        ["fork", rid("orig"), "--at", "lookup_ticket#2", "--output", '{"content": "gone"}',
         "--as", rid("fork-1"), "--store", address],
        terminal_width=200,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert rid("fork-1") in result.output
    (effects := tmp_path / "effects").unlink()
    assert tool_texts(record(make_runner(effects), "fork-1"))[1] == "gone"
    assert read_effects(effects) == {"model": 2}

    bad = CliRunner().invoke(
        app, ["fork", rid("orig"), "--at", "lookup_ticket", "--output", "x", "--store", address]
    )
    assert bad.exit_code == 2 and "must be JSON" in bad.output
    ambiguous = CliRunner().invoke(
        app,
        ["fork", rid("orig"), "--at", "lookup_ticket", "--output", '"x"', "--store", address],
        terminal_width=200,
    )
    assert ambiguous.exit_code == 2 and "lookup_ticket#1" in ambiguous.output


def test_under_the_graph_call_strategy_the_graph_call_around_the_cut_executes(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"

    def program(run_id: str) -> Any:
        runner = spanpoint.GraphRunner(make_runner(effects).graph, name="support")
        with spanpoint.run(rid(run_id)):  # the same thread: the same graph-call input
            return runner.invoke(REQUEST, thread_id="thread-1")

    program("orig")
    kinds = [cp.kind for cp in configured_sqlite.store.list_checkpoints(rid("orig"))]
    assert kinds[-1] == "graph_call"  # committed around every call: it is not copied
    fork("orig", at="support/lookup_ticket#2", output="gone", new_run_id="f")
    effects.unlink()
    assert tool_texts(program("f"))[1] == "gone"
    assert read_effects(effects) == {"model": 2}


def test_a_fork_at_a_nested_step_executes_the_step_around_it(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"

    @spanpoint.step(name="fetch")
    def fetch(ticket: int) -> dict[str, Any]:
        count_effect(effects, f"fetch:{ticket}")
        return {"ticket": ticket, "status": "open"}

    @spanpoint.step(name="handle")
    def handle(ticket: int) -> str:
        found = fetch(ticket)
        count_effect(effects, f"handle:{ticket}")
        return f"{found['ticket']}: {found['status']}"

    def program(run_id: str) -> list[str]:
        with spanpoint.run(rid(run_id)):
            return [handle(1), handle(2)]

    assert program("orig") == ["1: open", "2: open"]
    fork("orig", at="handle/fetch#2", output={"ticket": 2, "status": "closed"}, new_run_id="f")
    effects.unlink()
    # handle(1) replays whole; handle(2) encloses the cut, so it executes, and its fetch(2)
    # returns the override instead of executing.
    assert program("f") == ["1: open", "2: closed"]
    assert read_effects(effects) == {"handle:2": 1}


def test_a_fork_run_that_never_reaches_its_cut_says_so(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    record(make_runner(effects), "orig")
    fork("orig", at="lookup_ticket#2", output="gone", new_run_id="fork-1")
    configured_sqlite.clear()

    @spanpoint.step(name="summarize")
    def summarize() -> str:
        return "nothing to do"

    with spanpoint.run(rid("fork-1")) as run:  # another program: its calls are not the cut
        summarize()
    (warning,) = [w for w in run.warnings if "fork" in w]
    assert "completed without reaching that call" in warning and "lookup_ticket#2" in warning
    (span,) = configured_sqlite.runs()
    assert any("without reaching" in w for w in span.attributes[semconv.WARNINGS])


# --- bad input: a clear error, and nothing written -------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "at", "output", "message"),
    [
        ("nobody", "lookup_ticket#1", "x", r"no run 'nobody-.*spanpoint runs"),
        ("orig", "lookup_tickets#1", "x", r"no committed boundary 'lookup_tickets'.*'notify'"),
        ("orig", "lookup_ticket", "x", r"called 2 times.*lookup_ticket#1 … lookup_ticket#2"),
        ("orig", "lookup_ticket#3", "x", r"2 call\(s\) of 'lookup_ticket'"),
        ("orig", "lookup_ticket#2", 42, r"tool call lookup_ticket#2 must be the tool's result"),
        ("orig", "lookup_ticket#2", {"text": "x"}, r"must be the tool's result text"),
        ("orig", "fake-chat#1", [1, 2], r"model call fake-chat#1 must be the reply's text"),
        ("orig", "fake-chat#1", {"content": 3}, r"model call fake-chat#1 must be"),
        ("orig", "fake-chat#1", {"content": "", "tool_calls": [{"args": 1}]}, r"must be"),
    ],
)
def test_bad_input_is_refused_with_the_fix_and_nothing_is_written(
    configured_sqlite: Any, tmp_path: Path, run_id: str, at: str, output: Any, message: str
) -> None:
    record(make_runner(tmp_path / "effects"), "orig")
    store = configured_sqlite.store
    before = everything(store)
    with pytest.raises(spanpoint.errors.ForkError, match=message):
        fork(run_id, at=at, output=output, new_run_id="fork-1")
    assert everything(store) == before


def test_a_taken_run_id_or_the_same_one_is_refused(configured_sqlite: Any, tmp_path: Path) -> None:
    record(make_runner(tmp_path / "effects"), "orig")
    store = configured_sqlite.store
    fork("orig", at="lookup_ticket#2", output="gone", new_run_id="fork-1")
    before = everything(store)
    with pytest.raises(
        spanpoint.errors.ForkError, match=r"run 'fork-1-\w+' already exists.*another id"
    ):
        fork("orig", at="lookup_ticket#2", output="other", new_run_id="fork-1")
    with pytest.raises(spanpoint.errors.ForkError, match=r"needs a new run id"):
        fork("orig", at="lookup_ticket#2", output="other", new_run_id="orig")
    assert everything(store) == before


def test_a_run_recorded_without_input_identities_is_refused(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    record(make_runner(tmp_path / "effects"), "orig")
    store = configured_sqlite.store
    # A run as a spanpoint before schema 7 committed it: no fingerprint, identity, input view.
    store.start_run(rid("old"), None)
    for cp in store.list_checkpoints(rid("orig")):
        old = dataclasses.replace(cp, key="old-" + cp.key, run_id=rid("old"))
        old = dataclasses.replace(old, fingerprint=None, identity=None, input_view=None)
        store.put(old)
    store.finish_run(rid("old"), "completed")
    before = everything(store)
    with pytest.raises(
        spanpoint.errors.ForkError, match=r"did not keep their input identity.*again"
    ):
        fork("old", at="lookup_ticket#2", output="gone", new_run_id="fork-1")
    assert everything(store) == before
