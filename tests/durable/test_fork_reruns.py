"""Forks and diffs after a fork has run more than once.

A run has attempts; each labels its boundaries ``path#N`` in the order they started
(``spanpoint show``). ``spanpoint diff`` and ``spanpoint fork --at`` read one attempt, the
latest that did not fail, with the same labels: never a mix of attempts, where a boundary
replayed again by a later attempt would take two places. The agent and its counters are
tests/durable/test_fork.py's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_fork import REQUEST, _unique_run_ids, fork, make_runner, record, rid  # noqa: F401
from typer.testing import CliRunner

import spanpoint
from fakes import read_effects
from spanpoint.cli import app
from spanpoint.diffs import diff_runs

runner = CliRunner()


def run_again(agent: spanpoint.GraphRunner, run_id: str, n: int) -> Any:
    with spanpoint.run(rid(run_id)):
        return agent.invoke(REQUEST, thread_id=f"thread-{run_id}-{n}")


def shown(store: Any, run_id: str) -> list[list[str]]:
    """The labels ``spanpoint show`` prints, attempt by attempt."""
    out = runner.invoke(app, ["show", rid(run_id), "--store", str(store.path)]).output
    attempts: list[list[str]] = []
    for line in out.splitlines():
        if re.search(r"attempt \d+ ", line):
            attempts.append([])
        found = re.search(r"(model_call|tool_call) (\S+#\d+) ", line)
        if found and attempts:
            attempts[-1].append(found[2])
    return attempts


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_a_fork_run_again_is_diffed_and_forked_by_the_labels_show_prints(
    configured_sqlite: Any, tmp_path: Path, runs: int
) -> None:
    store = configured_sqlite.store
    effects = tmp_path / "effects"
    agent = make_runner(effects)
    record(agent, "orig")
    fork("orig", at="lookup_ticket#2", output="ticket 8: closed", new_run_id="f1")
    for n in range(runs):
        run_again(agent, "f1", n)
    attempts = shown(store, "f1")
    assert len(attempts) == runs
    labels = attempts[-1]
    assert labels == ["fake-chat#1", "lookup_ticket#1", "fake-chat#2", "lookup_ticket#2",
                      "fake-chat#3", "notify#1", "fake-chat#4"]  # fmt: skip
    result = diff_runs(store, rid("orig"), rid("f1"))
    assert result.divergence is not None and result.then is not None
    assert (result.divergence.boundary, result.divergence.reason) == ("lookup_ticket#2", "output")
    assert (result.then.boundary, result.then.reason) == ("fake-chat#3", "input")
    assert {result.divergence.boundary, result.then.boundary} <= set(labels)

    # The fork of the fork, cut where show prints fake-chat#3 (the call that read the
    # overridden ticket): it answers instead, so notify never runs and nothing executes.
    fork("f1", at="fake-chat#3", output={"content": "All closed."}, new_run_id="f2")
    effects.unlink()
    done = run_again(agent, "f2", 0)
    assert done.output["messages"][-1].content == "All closed."
    assert read_effects(effects) == {}
    assert shown(store, "f2")[-1] == labels[:5]
    again = diff_runs(store, rid("f1"), rid("f2"))
    assert again.divergence is not None and (
        again.divergence.boundary,
        again.divergence.reason,
    ) == (
        "fake-chat#3",
        "output",
    )


def test_a_fork_without_an_override_executes_the_cut_and_what_follows(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    store = configured_sqlite.store
    effects = tmp_path / "effects"
    agent = make_runner(effects)
    record(agent, "orig")
    effects.unlink()
    command = ["fork", rid("orig"), "--at", "lookup_ticket#2", "--as", rid("again")]
    cli = runner.invoke(app, [*command, "--store", str(store.path)])
    assert cli.exit_code == 0, cli.output
    assert "executes again from 'lookup_ticket#2'" in " ".join(cli.output.split())
    run_again(agent, "again", 0)
    # Before the cut: replayed. The cut and every call after it: executed again.
    assert read_effects(effects) == {"lookup_ticket:8": 1, "notify:7": 1, "model": 2}
    assert shown(store, "again")[-1] == shown(store, "orig")[-1]
