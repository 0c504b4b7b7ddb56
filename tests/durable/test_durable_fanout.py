"""Paid once on every shape: a research fan-out killed mid-run, rerun, and rerun again.

Three branches (``a``, ``b``, ``c``) of a compiled research subgraph, each with two model calls
and one tool call, reached through ``Send`` (parallel branches) or from a supervisor node
(``asyncio.gather`` under async). Each case runs in real subprocesses (fanout_driver.py): the
first attempt is SIGKILLed at a call that waits until a known set of calls is committed
(after two branches, or in the middle of the third); a second process completes the run, then
reruns the completed run with a new graph and saver. Executions are counted in a file under
a lock.

Rule checked on every case: the rerun executes exactly the calls the killed attempt had not
completed, each once; the rerun of the completed run executes nothing; the reports are each
branch's own (a call keyed by another branch's position would replay the wrong report or
run again); the question is submitted once.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from durable_fakes import labels
from durable_support import Attempt, attempt

DRIVER = Path(__file__).resolve().parent / "fanout_driver.py"
TOPICS = ("a", "b", "c")
CALLS = [f"{call}:{t}" for t in TOPICS for call in ("plan", "search", "write")]
REPORTS = sorted(f"report on {t} from ['notes results for {t}']" for t in TOPICS)

#: Where the first attempt dies: the call that waits, and how many calls are committed then.
KILLS = {
    "after-two-branches": ("plan:c", 6),
    "mid-branch": ("write:c", 8),
}


def _completed(kill: str) -> Counter[str]:
    stop, _ = KILLS[kill]
    done = [c for c in CALLS if c.endswith((":a", ":b"))]
    if kill == "mid-branch":
        done += ["plan:c", "search:c"]
    assert stop not in done
    return Counter(done)


def _run(tmp_path: Path, shape: str, kill: str, options: list[str]) -> tuple[Attempt, Attempt]:
    """The killed attempt, then one process that reruns it and reruns the completed run
    (a new graph and saver for each attempt; its second log is ``executions-3.jsonl``)."""
    stop, commits = KILLS[kill]
    go = [shape, tmp_path, "fanout-run"]
    first = attempt(*go, 1, *options, env={"FANOUT_KILL": f"{stop}@{commits}"}, script=DRIVER)
    assert first.killed, first.stderr[-3000:]
    again = ["--rerun-log", str(tmp_path / "executions-3.jsonl")]
    second = attempt(*go, 2, *options, *again, script=DRIVER)
    return first, second


def _outs(done: Attempt) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rerun's result and the completed run's rerun's (the driver's two JSON lines)."""
    done.out  # noqa: B018 - asserts the process ended well, with its stderr otherwise
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-2]), json.loads(lines[-1])


def _check_paid_once(kill: str, first: Attempt, second: Attempt) -> dict[str, Any]:
    completed = _completed(kill)
    assert first.executed() == completed
    missing = Counter(c for c in CALLS if c not in completed)
    assert second.executed() == missing  # nothing completed runs again, the rest runs once
    out, completed_rerun = _outs(second)
    assert out["reports"] == REPORTS
    assert out["questions"] == ["research a b c"]  # the input was submitted once
    assert labels(second.log.with_name("executions-3.jsonl")) == Counter()  # nothing at all
    return completed_rerun


#: Both shapes (Send branches; the supervisor, asyncio.gather under async), every store, both
#: forms, both kill points.
CASES = list(
    itertools.product(["send", "gather"], ["none", "memory", "sqlite"], ["sync", "async"], KILLS)
)


@pytest.mark.parametrize(("shape", "saver", "form", "kill"), CASES)
def test_a_killed_fan_out_pays_each_call_once(
    tmp_path: Path, shape: str, saver: str, form: str, kill: str
) -> None:
    options = ["--saver", saver] + (["--async"] if form == "async" else [])
    first, second = _run(tmp_path, shape, kill, options)
    completed_rerun = _check_paid_once(kill, first, second)
    assert completed_rerun["reports"] == REPORTS


@pytest.mark.parametrize("kill", KILLS)
@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("mode", ["updates", "values", "messages", "custom", "values,custom"])
def test_a_killed_stream_submits_its_input_once_and_pays_each_call_once(
    tmp_path: Path, mode: str, form: str, kill: str
) -> None:
    # The calls run in the subgraph: their messages and custom chunks reach the stream with
    # subgraphs=True (LangGraph's rule), and so does every mode's subgraph progress.
    options = ["--saver", "sqlite", "--call", "stream", "--stream-mode", mode, "--subgraphs"]
    options += ["--async"] if form == "async" else []
    first, second = _run(tmp_path, "send", kill, options)
    completed_rerun = _check_paid_once(kill, first, second)
    assert _outs(second)[0]["chunks"] > 0  # the continued stream streams what it runs
    # The completed run streams again only what it can give without running: its values.
    if mode.split(",") == ["values"]:
        assert completed_rerun["reports"] == REPORTS
        assert completed_rerun["chunks"] == 1
    else:
        others = [m for m in mode.split(",") if m != "values"]
        assert completed_rerun["error"] == "StreamReplayError"
        assert f"not as {others}" in completed_rerun["message"]
