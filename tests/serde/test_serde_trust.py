"""Trust in what serde reads and in the keys it computes (issue 17, items 1, 2 and 9).

- Reading: a checkpoint names types through an allow list; anything else is refused before
  any import, with an error that says how to allow it, and the boundary executes again.
- Fingerprints: every value is encoded with its type, so different inputs never share a key
  (a shared key would replay one input's output for another); a value without readable state
  is not cacheable, never keyed by its type name.
- Surrogates: an argument with one is fingerprinted faithfully; an output with one is not
  committed (it would read back as "?").
"""

from __future__ import annotations

import datetime
import logging
import math
import subprocess
import sys
import textwrap
import threading
import uuid
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum, IntEnum
from pathlib import Path

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, Interrupt, Send
from pydantic import BaseModel

import spanpoint
import spanpoint.errors
from spanpoint import semconv, serde
from tests.conftest import Telemetry
from tests.fakes import count_effect, read_effects


@dataclass
class Invoice:
    number: str
    amount: int


class Approval(BaseModel):
    approved: bool
    reason: str


class Colour(Enum):
    RED = 1


class Level(IntEnum):
    ONE = 1


class Ticket:
    """A plain object: its state is ``vars()``."""

    def __init__(self, ident: str) -> None:
        self.ident = ident


class Slotted:
    __slots__ = ("ident",)

    def __init__(self, ident: str) -> None:
        self.ident = ident


# --- reading through the allow list --------------------------------------------------------


def _ext(code: int, module: str, name: str, args: object) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb([module, name, args]))


def test_langchain_and_langgraph_values_round_trip_without_configuration() -> None:
    value = {
        "messages": [
            HumanMessage("hi", id="h1"),
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": 1}, "id": "c1"}]),
            ToolMessage("found", tool_call_id="c1", artifact={"rows": 2}),
        ],
        "command": Command(
            update={"messages": [ToolMessage("done", tool_call_id="c1")]},
            goto=[Send("node", {"arg": 1})],
        ),
        "interrupt": Interrupt(value="approve?", id="i1"),
        "std": [
            datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
            datetime.date(2026, 1, 2),
            datetime.time(3, 4),
            datetime.timedelta(days=2),
            uuid.UUID(int=7),
            Decimal("1.25"),
            {1, 2},
            frozenset({"a"}),
            Path("/tmp/x"),
        ],
        "ints": {1: "one", 2: "two"},
        "bytes": b"\x00\xff",
    }
    tag, data = serde.dumps(value)
    assert serde.loads(tag, data) == value


@pytest.mark.parametrize(
    "crafted",
    [
        _ext(0, "os", "system", "true"),
        _ext(1, "subprocess", "Popen", [["true"]]),
        _ext(2, "subprocess", "run", {"args": "true", "shell": True}),
        _ext(3, "os", "system", "true"),
        _ext(5, "builtins", "eval", {"source": "1"}),
        _ext(0, "spanpoint_no_such_module", "x", 1),
        {"nested": [{"deeper": _ext(0, "os", "system", "true")}]},
        _ext(2, "langgraph.types", "Command", {"update": _ext(0, "os", "system", "true")}),
    ],
)
def test_a_type_that_is_not_allowed_is_refused_with_the_fix(crafted: object) -> None:
    data = ormsgpack.packb(crafted)
    with pytest.raises(
        spanpoint.errors.UntrustedCheckpointError, match=r"configure\(allowed_types="
    ):
        serde.loads("msgpack", data)
    assert "spanpoint_no_such_module" not in sys.modules


@pytest.mark.parametrize("tag", ["pickle", "json", "weird", "null-ish"])
def test_formats_spanpoint_never_writes_are_refused(tag: str) -> None:
    with pytest.raises(spanpoint.errors.UntrustedCheckpointError, match="not written by spanpoint"):
        serde.loads(tag, b'{"lc": 2, "type": "constructor", "id": ["os", "system"]}')


def test_an_unregistered_user_type_is_refused_cleanly_and_executes_again(
    configured: Telemetry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def bill() -> Invoice:
        count_effect(effects, "bill")
        return Invoice("I-1", 125000)

    with caplog.at_level(logging.WARNING, logger="spanpoint"):
        for _ in range(2):
            with spanpoint.run("bill") as run:
                assert bill() == Invoice("I-1", 125000)
    assert read_effects(effects)["bill"] == 2
    assert any(
        f"refusing to load {__name__}.Invoice" in w
        and f"spanpoint.configure(allowed_types=[{__name__}.Invoice])" in w
        for w in run.warnings
    )


@pytest.mark.parametrize("entry", [Invoice, f"{__name__}:Invoice"])
def test_a_registered_user_type_replays(
    configured: Telemetry, tmp_path: Path, entry: object
) -> None:
    spanpoint.configure(allowed_types=[entry, Approval, Colour])  # type: ignore[list-item]
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def decide() -> dict[str, object]:
        count_effect(effects, "decide")
        return {
            "invoice": Invoice("I-1", 125000),
            "ok": Approval(approved=True, reason="r"),
            "colour": Colour.RED,
        }

    for _ in range(2):
        with spanpoint.run("decide"):
            out = decide()
    assert read_effects(effects)["decide"] == 1
    assert out == {
        "invoice": Invoice("I-1", 125000),
        "ok": Approval(approved=True, reason="r"),
        "colour": Colour.RED,
    }
    assert isinstance(out["invoice"], Invoice)


def test_allowed_types_are_checked_and_kept_across_configure(configured: Telemetry) -> None:
    with pytest.raises(spanpoint.ConfigurationError, match=r"package\.module:Name"):
        spanpoint.configure(allowed_types=["no_colon"])
    spanpoint.configure(allowed_types=[Invoice])
    spanpoint.configure(strict=False)
    assert spanpoint.settings().allowed_types == (Invoice,)


def test_a_stored_value_that_cannot_be_rebuilt_is_never_replayed_as_its_raw_fields() -> None:
    serde.set_allowed_types([Invoice])
    try:
        data = ormsgpack.packb(_ext(2, __name__, "Invoice", {"number": "I-1", "total": 5}))
        with pytest.raises(spanpoint.errors.CorruptCheckpointError, match="cannot rebuild"):
            serde.loads("msgpack", data)
    finally:
        serde.set_allowed_types(())


# --- fingerprints that cannot collide ------------------------------------------------------


def _cycle() -> list[object]:
    value: list[object] = [1]
    value.append(value)
    return value


def _outer_cycle() -> list[object]:
    inner: list[object] = [1]
    outer: list[object] = [inner]
    inner.append(outer)
    return outer


def _inner_cycle() -> list[object]:
    inner: list[object] = [1]
    inner.append(inner)
    return [inner]


DISTINCT = [
    ("1, '1', 1.0, True", [1, "1", 1.0, True, Level.ONE]),
    ("0, False, 0.0, '', None", [0, False, 0.0, "", None]),
    ("nan vs 'nan'", [math.nan, "nan", "NaN"]),
    ("inf vs 'inf'", [math.inf, "inf", "Infinity", -math.inf, "-inf"]),
    ("int and str keys", [{1: "a"}, {"1": "a"}, {1.0: "a"}, {True: "a"}]),
    ("plain objects", [Ticket("T-1"), Ticket("T-2"), Slotted("T-1"), Slotted("T-2")]),
    ("cycles", [_cycle(), [1, "<cycle>"], _outer_cycle(), _inner_cycle()]),
    ("tuples and lists", [(1, 2), [1, 2], {1, 2}, frozenset({1, 2})]),
    ("tags cannot be spelt", [{"__map__": {}}, {}, {"__tuple__": [1]}, (1,)]),
    ("enums and their values", [Colour.RED, 1, "Colour.RED"]),
    ("dataclass vs its fields", [Invoice("I-1", 1), {"number": "I-1", "amount": 1}]),
    ("bytes", [b"a", bytearray(b"a"), "a"]),
    ("surrogates", ["\ud800", "?", "\ufffd", ""]),
]


@pytest.mark.parametrize(("label", "values"), DISTINCT, ids=[d[0] for d in DISTINCT])
def test_different_inputs_have_different_fingerprints(label: str, values: list[object]) -> None:
    fingerprints = [serde.fingerprint({"value": v}) for v in values]
    assert len(set(fingerprints)) == len(values), label


def test_equal_inputs_have_equal_fingerprints() -> None:
    def make() -> dict[str, object]:
        return {"b": [Ticket("T-1"), (1, 2.5)], "a": {2: None, 1: {"x"}}, "n": math.nan}

    assert serde.fingerprint(make()) == serde.fingerprint(make())
    assert serde.fingerprint({"a": 1, "b": 2}) == serde.fingerprint({"b": 2, "a": 1})


def test_a_changed_input_never_replays_the_old_output(
    configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def handle(ticket: object) -> str:
        count_effect(effects, "handle")
        return repr(ticket) if not isinstance(ticket, Ticket) else ticket.ident

    pairs = [
        (1, "1"),
        (math.nan, "nan"),
        ({1: 0}, {"1": 0}),
        (Ticket("T-1"), Ticket("T-2")),
        ((1,), [1]),
        (_cycle(), [1, "<cycle>"]),
    ]
    for index, (first, second) in enumerate(pairs):
        with spanpoint.run(f"pair-{index}"):
            handle(first)
        with spanpoint.run(f"pair-{index}"):
            handle(second)
    assert read_effects(effects)["handle"] == 2 * len(pairs)


def test_an_input_without_readable_state_is_not_cacheable(
    configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def guarded(ticket: str, lock: object) -> str:
        count_effect(effects, "guarded")
        return ticket

    for _ in range(2):
        with spanpoint.run("locks") as run:
            assert guarded("T-1", {"held": [threading.Lock()]}) == "T-1"
    assert read_effects(effects)["guarded"] == 2
    assert configured.store.list_checkpoints("locks") == []
    assert any("['lock']['held'][0]" in w and "not cacheable" in w for w in run.warnings)
    span = configured.spans("step")[-1]
    assert "not cacheable" in span.attributes[semconv.WARNINGS][0]


def test_the_children_of_an_uncacheable_step_never_share_keys_with_top_level_calls(
    configured: Telemetry, tmp_path: Path
) -> None:
    # An uncacheable step still runs its children as boundaries. Their keys must hang under a
    # position of its own: under the run root's empty identity, `inner(1)` inside `outer` and
    # `inner(1)` called next at the top level had one key, and the second replayed the first.
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def inner(x: int, where: str) -> str:
        count_effect(effects, f"inner-{where}")
        return f"{where}-{x}"

    @spanpoint.step
    def outer(lock: object) -> str:
        return inner(1, "nested")

    @spanpoint.step
    def top() -> str:
        return inner(1, "nested")  # the same name and input as outer's child

    for _attempt in range(2):
        with spanpoint.run("uncacheable-parent"):
            assert outer(threading.Lock()) == "nested-1"
            assert top() == "nested-1"
            assert inner(1, "nested") == "nested-1"
    # Attempt 1 executes each of the three inner(1) calls (three positions); attempt 2
    # replays `top`'s and the top-level one and the nested one under the uncacheable step,
    # which always executes, replays its child by the child's own position.
    counts = read_effects(effects)
    assert counts["inner-nested"] == 3, counts
    paths = sorted(
        "/".join(part.rsplit(".", 1)[-1] for part in cp.path.split("/"))
        for cp in configured.store.list_checkpoints("uncacheable-parent")
    )
    assert paths == ["inner", "outer/inner", "top", "top/inner"], paths


@pytest.mark.parametrize("value", [object(), lambda: 1, threading.Lock()])
def test_opaque_values_raise_instead_of_hashing_a_type_name(value: object) -> None:
    with pytest.raises(spanpoint.errors.UnfingerprintableInputError):
        serde.fingerprint({"x": value})


CROSS_PROCESS = textwrap.dedent(
    """
    import math, sys
    from dataclasses import dataclass
    import spanpoint
    from tests.fakes import count_effect

    class Ticket:
        def __init__(self, ident):
            self.ident = ident

    @dataclass
    class Line:
        sku: str

    @spanpoint.step
    def handle(ticket, lines, options):
        count_effect(sys.argv[2], "handle")
        return "ok"

    spanpoint.configure(store=sys.argv[1])
    with spanpoint.run("cross"):
        handle(Ticket("T-1"), (Line("a"), Line("b")),
               {1: math.nan, "k": {frozenset({"x", "y"}), "\\ud800"}, "t": (1, 2.0, True)})
    """
)


def test_equal_inputs_hit_the_cache_across_processes(tmp_path: Path) -> None:
    script = tmp_path / "cross.py"
    script.write_text(CROSS_PROCESS)
    effects = tmp_path / "effects.txt"
    root = Path(__file__).resolve().parents[2]
    for _ in range(2):  # a new process each time, with its own hash seed
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / "store.db"), str(effects)],
            check=True,
            cwd=root,
            env={
                "PYTHONPATH": str(root),
                "PATH": "/usr/bin:/bin",
                "SPANPOINT_TRACE_FILE": str(tmp_path / "t.jsonl"),
            },
        )
    assert read_effects(effects)["handle"] == 1


# --- surrogates ----------------------------------------------------------------------------


def test_an_argument_with_a_lone_surrogate_runs_and_replays(
    configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def echo(text: str) -> int:
        count_effect(effects, "echo")
        return len(text)

    for _ in range(2):
        with spanpoint.run("sur"):
            assert echo("a\ud800b") == 3
    with spanpoint.run("sur"):
        assert echo("a?b") == 3  # a different input: executes
    assert read_effects(effects)["echo"] == 2


def test_an_output_with_a_lone_surrogate_is_not_committed(
    configured: Telemetry, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def produce() -> dict[str, str]:
        count_effect(effects, "produce")
        return {"text": "bad \udc80 byte"}

    for _ in range(2):
        with spanpoint.run("sur-out") as run:
            assert produce() == {"text": "bad \udc80 byte"}  # exact, never "?"
    assert read_effects(effects)["produce"] == 2
    assert configured.store.list_checkpoints("sur-out") == []
    assert any("lone surrogate" in w for w in run.warnings)


# --- the calls strategy's identities -------------------------------------------------------


def test_a_tool_call_with_unreadable_arguments_executes_uncached(configured: Telemetry) -> None:
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from spanpoint.calls.middleware import CheckpointMiddleware

    request = ToolCallRequest(
        tool_call={"name": "lookup", "args": {"lock": threading.Lock()}, "id": "c1"},
        tool=None,
        state={},
        runtime=None,  # type: ignore[arg-type]
    )
    with spanpoint.run("tool-lock") as run:
        spec = CheckpointMiddleware()._tool_spec(request, [])
    assert spec is not None and spec.replay is False and spec.fingerprint is None
    assert any(
        "'execute_tool lookup' is not cacheable" in w and "[1]['lock'] is a _thread.lock" in w
        for w in run.warnings
    )
    assert "not cacheable" in spec.attributes[semconv.WARNINGS][0]


def test_a_message_with_a_lone_surrogate_has_a_faithful_model_call_fingerprint() -> None:
    from spanpoint.calls.identity import message_digest

    assert message_digest(HumanMessage("a\ud800")) != message_digest(HumanMessage("a?"))
