"""A durable wait is control flow, not an error: user code's broad ``except`` clauses around
``wait_for_input`` do not swallow it, and ``spanpoint.run`` still records the wait."""

from __future__ import annotations

import pytest

import spanpoint
from spanpoint import semconv
from spanpoint.errors import SpanpointError
from spanpoint.waits import list_waits, wait_for_input


@pytest.mark.parametrize("caught", [SpanpointError, Exception])
def test_a_broad_except_around_wait_for_input_does_not_swallow_the_wait(
    configured, caught: type[BaseException]
) -> None:
    after: list[str] = []
    swallowed: list[BaseException] = []
    run = spanpoint.run(f"RW-{caught.__name__}")
    with run:
        try:
            wait_for_input("approval", question="Ship it?")
        except caught as exc:  # what application code commonly writes
            swallowed.append(exc)
        after.append("went on without the input")
    assert swallowed == [] and after == []
    assert run.status == "waiting"
    assert configured.store.get_run(run.run_id).status == "waiting"
    (wait,) = list_waits()
    assert (wait.run_id, wait.name, wait.provided) == (run.run_id, "approval", False)
    (root,) = configured.runs()
    assert root.attributes[semconv.RUN_STATUS] == "waiting"
    waits = [e for e in root.events if e.name == semconv.EVENT_WAITING]
    assert [e.attributes[semconv.WAIT_NAME] for e in waits] == ["approval"]


def test_run_waiting_is_outside_the_error_tree() -> None:
    assert not issubclass(spanpoint.RunWaiting, Exception)
    assert issubclass(spanpoint.RunWaiting, BaseException)
