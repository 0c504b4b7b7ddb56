"""@spanpoint.step boundaries: replay, ordinals, identity, failures, spans and links."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

import spanpoint
import spanpoint.errors
from spanpoint import semconv
from tests.conftest import Telemetry


@dataclass
class Report:
    ticket: str
    lines: list[str]


class Verdict(BaseModel):
    severity: int
    reason: str


class Calls:
    """Counts executions of each step body."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def hit(self, name: str) -> None:
        self.count[name] = self.count.get(name, 0) + 1


def test_committed_steps_replay_without_executing(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def double(x: int) -> int:
        calls.hit("double")
        return 2 * x

    for _ in range(3):
        with spanpoint.run("r-1"):
            assert double(21) == 42
    assert calls.count == {"double": 1}
    spans = configured.spans("step double")
    assert [s.attributes[semconv.REPLAYED] for s in spans] == [False, True, True]


def test_same_call_twice_gets_two_ordinals_and_replays_in_order(configured: Telemetry) -> None:
    outputs = iter(["first", "second", "third"])
    calls = Calls()

    @spanpoint.step
    def draw(deck: str) -> str:
        calls.hit("draw")
        return next(outputs)

    with spanpoint.run("cards"):
        assert (draw("d"), draw("d")) == ("first", "second")
    with spanpoint.run("cards"):
        assert (draw("d"), draw("d"), draw("d")) == ("first", "second", "third")
    assert calls.count == {"draw": 3}
    ordinals = [s.attributes[semconv.BOUNDARY_ORDINAL] for s in configured.spans("step draw")]
    assert ordinals == [0, 1, 0, 1, 2]


def test_changed_arguments_miss_the_cache(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def greet(name: str, punctuation: str = "!") -> str:
        calls.hit("greet")
        return f"hi {name}{punctuation}"

    with spanpoint.run("g"):
        greet("ada")
    with spanpoint.run("g"):
        assert greet("ada") == "hi ada!"  # replayed
        assert greet(name="ada", punctuation="!") == "hi ada!"  # same binding: ordinal 1, new
        assert greet("bob") == "hi bob!"
    assert calls.count == {"greet": 3}


def test_different_run_ids_never_share_checkpoints(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def work(x: int) -> int:
        calls.hit("work")
        return x

    for run_id in ("a", "b", "a", "b"):
        with spanpoint.run(run_id):
            work(1)
    assert calls.count == {"work": 2}
    keys = {
        cp.run_id: cp.key for run_id in "ab" for cp in configured.store.list_checkpoints(run_id)
    }
    assert keys["a"] != keys["b"]


def test_a_step_that_raises_commits_nothing_and_runs_again(configured: Telemetry) -> None:
    calls = Calls()
    fail = {"now": True}

    @spanpoint.step
    def flaky(x: int) -> int:
        calls.hit("flaky")
        if fail["now"]:
            raise ConnectionError("upstream down")
        return x + 1

    with pytest.raises(ConnectionError, match="upstream down") as info:
        with spanpoint.run("f") as run:
            flaky(1)
    assert type(info.value) is ConnectionError  # the original exception, unchanged
    assert run.status == "failed"
    assert configured.store.list_checkpoints("f") == []
    failed = configured.spans("step flaky")[0]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[semconv.ERROR_TYPE] == "ConnectionError"
    assert [e.name for e in failed.events] == ["exception"]

    fail["now"] = False
    with spanpoint.run("f") as run:
        assert flaky(1) == 2
    assert run.status == "completed" and calls.count == {"flaky": 2}
    assert len(configured.store.list_checkpoints("f")) == 1


def test_a_span_marked_error_by_the_body_commits_nothing(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def soft_fail() -> str:
        calls.hit("soft")
        trace.get_current_span().set_status(StatusCode.ERROR, "partial result")
        return "partial"

    for _ in range(2):
        with spanpoint.run("soft"):
            assert soft_fail() == "partial"
    assert calls.count == {"soft": 2}
    assert configured.store.list_checkpoints("soft") == []


def test_replayed_span_links_to_the_original_execution(configured: Telemetry) -> None:
    @spanpoint.step(name="notify")
    def notify(customer: str) -> str:
        return f"sent to {customer}"

    with spanpoint.run("link"):
        notify("c-1")
    with spanpoint.run("link"):
        notify("c-1")
    original, replayed = configured.spans("step notify")
    assert replayed.attributes[semconv.REPLAYED] is True
    assert len(replayed.links) == 1
    link = replayed.links[0].context
    assert (link.trace_id, link.span_id) == (original.context.trace_id, original.context.span_id)
    assert original.context.trace_id != replayed.context.trace_id  # a new attempt, a new trace
    assert (
        replayed.attributes[semconv.CHECKPOINT_KEY] == original.attributes[semconv.CHECKPOINT_KEY]
    )


def test_nested_steps_have_paths_and_replay_as_a_whole(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def inner(x: int) -> int:
        calls.hit("inner")
        return x * 10

    @spanpoint.step
    def outer(x: int) -> int:
        calls.hit("outer")
        return inner(x) + inner(x + 1)

    for _ in range(2):
        with spanpoint.run("nest"):
            assert outer(1) == 30
    assert calls.count == {"outer": 1, "inner": 2}
    paths = {s.attributes[semconv.BOUNDARY_PATH] for s in configured.spans("step")}
    assert paths == {
        "test_nested_steps_have_paths_and_replay_as_a_whole.outer",
        "test_nested_steps_have_paths_and_replay_as_a_whole.outer/"
        "test_nested_steps_have_paths_and_replay_as_a_whole.inner",
    }
    run_span = configured.runs()[0]
    outer_span = next(s for s in configured.spans("step") if s.name.endswith("outer"))
    assert outer_span.parent.span_id == run_span.context.span_id


def test_children_of_two_calls_of_the_same_parent_do_not_collide(configured: Telemetry) -> None:
    @spanpoint.step(name="child")
    def child() -> str:
        return "c"

    @spanpoint.step(name="parent")
    def parent(tag: str) -> str:
        return child() + tag

    with spanpoint.run("pc"):
        parent("x")
        parent("y")
    keys = [cp.key for cp in configured.store.list_checkpoints("pc") if cp.name == "child"]
    assert len(set(keys)) == 2


def test_outside_a_run_a_step_is_a_plain_span(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def plain(x: int) -> int:
        calls.hit("plain")
        return x

    plain(1)
    plain(1)
    assert calls.count == {"plain": 2}
    assert configured.store.list_runs() == []
    span = configured.spans("step plain")[0]
    assert semconv.REPLAYED not in span.attributes
    assert span.attributes[semconv.BOUNDARY_KIND] == "step"


def test_replay_false_always_executes(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step(replay=False)
    def clock() -> int:
        calls.hit("clock")
        return 1

    for _ in range(2):
        with spanpoint.run("clock"):
            clock()
    assert calls.count == {"clock": 2}
    assert configured.store.list_checkpoints("clock") == []


async def test_async_steps_replay_like_sync_ones(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    async def fetch(url: str) -> dict[str, str]:
        calls.hit("fetch")
        await asyncio.sleep(0)
        return {"url": url, "status": "200"}

    for _ in range(2):
        async with spanpoint.run("async"):
            results = await asyncio.gather(fetch("a"), fetch("b"))
    assert results == [{"url": "a", "status": "200"}, {"url": "b", "status": "200"}]
    assert calls.count == {"fetch": 2}


def test_rich_outputs_round_trip(configured: Telemetry) -> None:
    # The application's own types are read back only once allowed (tests/serde/test_serde_trust.py
    # shows the refusal when they are not); messages need no configuration.
    spanpoint.configure(allowed_types=[Report, Verdict])

    @spanpoint.step
    def produce() -> dict[str, object]:
        return {
            "report": Report("T-1", ["a", "b"]),
            "verdict": Verdict(severity=2, reason="printer"),
            "messages": [
                HumanMessage("hi", id="h1"),
                AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": 1}, "id": "c1"}]),
                ToolMessage("found", tool_call_id="c1"),
            ],
        }

    with spanpoint.run("rich"):
        original = produce()
    with spanpoint.run("rich"):
        replayed = produce()
    assert replayed == original
    assert isinstance(replayed["report"], Report) and isinstance(replayed["verdict"], Verdict)
    assert configured.spans("step")[-1].attributes[semconv.REPLAYED] is True


def test_message_ids_do_not_change_identity(configured: Telemetry) -> None:
    calls = Calls()

    @spanpoint.step
    def answer(messages: list[HumanMessage]) -> str:
        calls.hit("answer")
        return "ok"

    with spanpoint.run("ids"):
        answer([HumanMessage("hello", id="run-1-msg")])
    with spanpoint.run("ids"):
        answer([HumanMessage("hello", id="run-2-msg")])
    assert calls.count == {"answer": 1}


def test_unserializable_output_is_returned_but_not_committed(
    configured: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls()

    @spanpoint.step
    def handle() -> object:
        calls.hit("handle")
        return {"lock": asyncio.Lock()}

    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        for _ in range(2):
            with spanpoint.run("ser") as run:
                assert isinstance(handle()["lock"], asyncio.Lock)
    assert calls.count == {"handle": 2}
    assert configured.store.list_checkpoints("ser") == []
    assert "was not committed" in caplog.text
    assert run.warnings and "cannot serialize" in run.warnings[0]
    assert semconv.SERIALIZATION_ERROR in configured.spans("step")[-1].attributes


def test_strict_mode_raises_on_unserializable_output(configured: Telemetry) -> None:
    @spanpoint.step
    def handle() -> object:
        return asyncio.Lock()

    with pytest.raises(spanpoint.errors.SerializationError, match="cannot serialize a Lock"):
        with spanpoint.run("strict", strict=True):
            handle()
    assert configured.spans("step")[-1].status.status_code is StatusCode.ERROR


def test_methods_exclude_self_from_identity(configured: Telemetry) -> None:
    calls = Calls()

    class Notifier:
        def __init__(self, channel: str) -> None:
            self.channel = channel

        @spanpoint.step(name="notify")
        def notify(self, text: str) -> str:
            calls.hit("notify")
            return f"{self.channel}:{text}"

    with spanpoint.run("m"):
        Notifier("slack").notify("hi")
    with spanpoint.run("m"):
        assert Notifier("slack").notify("hi") == "slack:hi"
    assert calls.count == {"notify": 1}


@pytest.mark.parametrize("bad", ["", "   ", None, 42, b"bytes"])
def test_bad_run_ids_are_rejected_clearly(configured: Telemetry, bad: object) -> None:
    with pytest.raises(spanpoint.errors.InvalidRunIdError, match="run_id must be a"):
        spanpoint.run(bad)  # type: ignore[arg-type]


def test_runs_do_not_nest(configured: Telemetry) -> None:
    with spanpoint.run("outer"), pytest.raises(spanpoint.ConfigurationError, match="do not nest"):
        with spanpoint.run("inner"):
            pass


def test_generators_cannot_be_steps() -> None:
    with pytest.raises(spanpoint.ConfigurationError, match="streams are never replay boundaries"):

        @spanpoint.step
        def stream():  # type: ignore[no-untyped-def]
            yield 1


def test_run_span_carries_run_attributes(configured: Telemetry) -> None:
    for _ in range(2):
        with spanpoint.run("attrs", name="triage"):
            pass
    first, second = configured.runs()
    assert first.name == "invoke_workflow triage"
    assert second.name == "invoke_workflow triage (attempt 2)"
    assert first.attributes[semconv.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert first.attributes[semconv.GEN_AI_WORKFLOW_NAME] == "triage"
    assert first.attributes[semconv.RUN_ID] == "attrs"
    assert first.attributes[semconv.RUN_NAME] == "triage"
    assert (first.attributes[semconv.RUN_ATTEMPT], second.attributes[semconv.RUN_ATTEMPT]) == (1, 2)
    assert second.attributes[semconv.RUN_STATUS] == "completed"
