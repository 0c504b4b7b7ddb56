"""A step's key covers its whole input, and a replay returns what was returned, through real
runs and stores: each named case of the identity rule (docs/concepts.md, "Step identity and
faithful replay"), beside the generated ones of tests/serde/test_identity_properties.py.

Every test reruns one run id and counts the step body's executions in a file."""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
from collections import Counter, OrderedDict, defaultdict, deque
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import pytest
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage

import spanpoint
from fakes import count_effect, read_effects
from spanpoint import serde

_runs = itertools.count()


class Tags(list):  # type: ignore[type-arg]
    pass


class Pair(tuple):  # type: ignore[type-arg]
    pass


class Bag(dict):  # type: ignore[type-arg]
    pass


class Point(NamedTuple):
    x: int
    y: int


class Name(str):
    pass


@dataclasses.dataclass
class Order:
    amount: int


class RushOrder(Order):
    pass


class Tagged(Order):
    def __init__(self, amount: int, tag: str) -> None:
        super().__init__(amount)
        self.tag = tag


def refund(x: int) -> int:
    return x


def charge(x: int) -> int:
    return x


class Evil:
    def __init__(self) -> None:
        self.x = 1

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no equality here")

    def __hash__(self) -> int:
        raise RuntimeError("no hash here")


def nested(depth: int) -> list[Any]:
    root: list[Any] = []
    inner = root
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return root


PARIS = ZoneInfo("Europe/Paris")

#: Inputs that `==`, `repr` or a vars()-only view would confuse: each pair must not share a key.
DISTINCT: dict[str, tuple[Any, Any]] = {
    "exception args": (ValueError("refund 10"), ValueError("refund 99999")),
    "exception type": (ValueError("x"), TypeError("x")),
    "list subclass": ([1, 2], Tags([1, 2])),
    "tuple subclass": ((1, 2), Pair((1, 2))),
    "namedtuple": ((1, 2), Point(1, 2)),
    "tuple or list": ((1, 2), [1, 2]),
    "dict subclass": ({"a": 1}, Bag(a=1)),
    "list subclass content": (Tags([1]), Tags([2])),
    "tuple subclass content": (Pair((1,)), Pair((2,))),
    "namedtuple content": (Point(1, 2), Point(1, 3)),
    "dict subclass content": (Bag(a=1), Bag(a=2)),
    "OrderedDict": ({"a": 1}, OrderedDict(a=1)),
    "Counter": ({"a": 1}, Counter(a=1)),
    "dataclass subclass": (Order(5), RushOrder(5)),
    "dataclass subclass attributes": (Tagged(5, "a"), Tagged(5, "b")),
    "partial func": (functools.partial(refund, 1), functools.partial(charge, 1)),
    "partial args": (functools.partial(refund, 1), functools.partial(refund, 2)),
    "partial keywords": (functools.partial(refund, x=1), functools.partial(refund, x=2)),
    "defaultdict factory": (defaultdict(int), defaultdict(list)),
    "bound builtin method": ("alice".upper, "bob".upper),
    "zone or offset": (
        datetime(2026, 1, 5, 9, tzinfo=PARIS),
        datetime(2026, 1, 5, 9, tzinfo=timezone(timedelta(hours=1))),
    ),
    "str subclass": ("x", Name("x")),
    "deque maxlen": (deque([1], maxlen=2), deque([1], maxlen=3)),
    "message role": (SystemMessage("pay"), HumanMessage("pay")),
    "chat role": (ChatMessage("pay", role="system"), ChatMessage("pay", role="user")),
    "function call": (
        AIMessage("", additional_kwargs={"function_call": {"name": "get_weather"}}),
        AIMessage("", additional_kwargs={"function_call": {"name": "wire_money"}}),
    ),
}


@pytest.mark.parametrize("case", sorted(DISTINCT))
def test_different_inputs_never_share_a_key_or_a_replay(
    configured: Any, tmp_path: Path, case: str
) -> None:
    first, second = DISTINCT[case]
    effects = tmp_path / "effects"

    @spanpoint.step(name="act")
    def act(arg: Any) -> str:
        count_effect(effects, "act")
        return f"acted on {type(arg).__qualname__} #{read_effects(effects)['act']}"

    run_id = f"D-{next(_runs)}"
    with spanpoint.run(run_id):
        done_first = act(first)
    with spanpoint.run(run_id):
        done_second = act(second)
    assert serde.fingerprint({"arg": first}) != serde.fingerprint({"arg": second})
    assert read_effects(effects)["act"] == 2, f"{case}: the second input replayed the first"
    assert done_second != done_first


#: Inputs whose state cannot be read faithfully: the step executes, uncached, every time.
NOT_CACHEABLE: dict[str, Any] = {
    "StringIO": lambda: io.StringIO("refund 10"),
    "generator": lambda: (n for n in range(3)),
    "10,000 deep": lambda: nested(10_000),
    "raising __eq__/__hash__": Evil,
    "lock": lambda: __import__("threading").Lock(),
    "OSError with a filename": lambda: OSError(2, "missing", "/tmp/a"),
}


@pytest.mark.parametrize("case", sorted(NOT_CACHEABLE))
def test_an_input_that_cannot_be_read_executes_with_one_warning_naming_it(
    configured: Any, tmp_path: Path, case: str
) -> None:
    effects = tmp_path / "effects"

    @spanpoint.step(name="read")
    def read(ticket: int, source: Any) -> int:
        count_effect(effects, "read")
        return ticket

    run_id = f"N-{next(_runs)}"
    for _ in range(2):
        with spanpoint.run(run_id) as run:
            assert read(7, NOT_CACHEABLE[case]()) == 7
        (warning,) = [w for w in run.warnings if "not cacheable" in w]
        assert "['source']" in warning, warning
    assert read_effects(effects)["read"] == 2
    assert configured.store.list_checkpoints(run_id) == []


#: Outputs the store revives exactly: a replay returns an equal value of the same type.
FAITHFUL: dict[str, Any] = {
    "tuple": (1, "a", (2.5, None)),
    "nested tuple in a dict": {"pair": (1, 2), "list": [(3,)]},
    "OrderedDict": OrderedDict([("b", 1), ("a", 2)]),
    "defaultdict(list)": defaultdict(list, {"a": [1]}),
    "defaultdict(int)": defaultdict(int, {"a": 1}),
    "Counter": Counter("abracadabra"),
    "ZoneInfo": PARIS,
    "zoned datetime": datetime(2026, 3, 29, 1, 30, tzinfo=PARIS),
    "tuple keys": {(1, "a"): "x", 2: "y"},
    "frozenset of tuples": frozenset({(1, 2), (3, 4)}),
    "deque with maxlen": deque([1, 2], maxlen=5),
    "-0.0": -0.0,
}


def same(a: Any, b: Any) -> bool:
    """Equal, with the same type at every level (as far as these cases nest)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return (
            list(a) == list(b)
            and all(same(a[k], b[k]) for k in a)
            and (getattr(a, "default_factory", None) == getattr(b, "default_factory", None))
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, datetime):
        return a == b and same(a.tzinfo, b.tzinfo)
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


@pytest.mark.parametrize("case", sorted(FAITHFUL))
def test_a_replay_returns_the_type_that_was_returned(
    configured_sqlite: Any, tmp_path: Path, case: str
) -> None:
    effects = tmp_path / "effects"

    @spanpoint.step(name="make")
    def make() -> Any:
        count_effect(effects, "make")
        return FAITHFUL[case]

    run_id = f"F-{next(_runs)}"
    outputs = []
    for _ in range(2):
        with spanpoint.run(run_id):
            outputs.append(make())
    assert read_effects(effects)["make"] == 1
    assert same(outputs[1], FAITHFUL[case]), f"{case} replayed as {outputs[1]!r}"


#: Outputs the store cannot revive exactly: not committed, so the step executes again.
UNREVIVABLE: dict[str, Any] = {
    "str subclass": Name("refund"),
    "list subclass": Tags([1]),
    "exception": ValueError("refund 10"),
    "defaultdict of a lambda": defaultdict(lambda: 0, {"a": 1}),
    "dataclass not allowed": Order(5),
    "too deep": nested(10_000),
}


@pytest.mark.parametrize("case", sorted(UNREVIVABLE))
def test_an_output_that_would_change_type_is_not_committed(
    configured_sqlite: Any, tmp_path: Path, case: str
) -> None:
    effects = tmp_path / "effects"

    @spanpoint.step(name="make")
    def make() -> Any:
        count_effect(effects, "make")
        return UNREVIVABLE[case]

    run_id = f"U-{next(_runs)}"
    for _ in range(2):
        with spanpoint.run(run_id) as run:
            assert make() is UNREVIVABLE[case]
        assert any("was not committed" in w for w in run.warnings), run.warnings
    assert read_effects(effects)["make"] == 2
    assert configured_sqlite.store.list_checkpoints(run_id) == []


def test_an_allowed_namedtuple_and_dataclass_subclass_replay_as_themselves(
    configured: Any, tmp_path: Path
) -> None:
    spanpoint.configure(allowed_types=[Point, Order, RushOrder])
    effects = tmp_path / "effects"

    @spanpoint.step(name="make")
    def make() -> Any:
        count_effect(effects, "make")
        return [Point(1, 2), RushOrder(3)]

    outputs = []
    for _ in range(2):
        with spanpoint.run("A-1"):
            outputs.append(make())
    assert read_effects(effects)["make"] == 1
    assert [type(v) for v in outputs[1]] == [Point, RushOrder] and outputs[1] == outputs[0]


def test_a_row_keyed_by_the_older_rules_is_never_replayed(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"

    @spanpoint.step(name="pair")
    def pair(ticket: int) -> tuple[int, int]:
        count_effect(effects, "pair")
        return (ticket, ticket + 1)

    with spanpoint.run("K-probe"):
        pair(7)
    (probe,) = configured_sqlite.store.list_checkpoints("K-probe")
    assert probe.identity is not None and probe.fingerprint is not None
    # What the older rules wrote: the key without its format, the tuple as a list.
    material = "\x1f".join(("K-old", probe.identity, "0", probe.fingerprint))
    output_type, output = serde._writer().dumps_typed([7, 8])
    old = dataclasses.replace(
        probe, key=serde.text_digest(material), run_id="K-old", output_type=output_type,
        output=output,
    )  # fmt: skip
    configured_sqlite.store.start_run("K-old", None)
    configured_sqlite.store.put(old)
    with spanpoint.run("K-old"):
        again = pair(7)
    assert type(again) is tuple and again == (7, 8)
    assert read_effects(effects)["pair"] == 2, "the older row was replayed"
    assert configured_sqlite.store.get(old.key) is not None  # left alone, just never found
