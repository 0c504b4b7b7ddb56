"""Generated values for the identity and replay properties
(tests/serde/test_identity_properties.py), and ``ref``: an independent statement of when two
values are the same input.

The classes live at module level so that a subprocess can unpickle the same values and
compute their keys there (equal values give equal keys across processes).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections import Counter, OrderedDict, defaultdict, deque
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from types import FunctionType, NoneType
from typing import Any, NamedTuple
from uuid import UUID
from zoneinfo import ZoneInfo

import pydantic
from hypothesis import strategies as st


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Tags(list):  # type: ignore[type-arg]
    """A list subclass."""


class Pair(tuple):  # type: ignore[type-arg]
    """A tuple subclass."""


class Bag(dict):  # type: ignore[type-arg]
    """A dict subclass."""


class Name(str):
    """A str subclass."""


class Point(NamedTuple):
    x: int
    y: Any


@dataclasses.dataclass
class Ticket:
    id: int
    note: Any = None


class UrgentTicket(Ticket):
    """A plain subclass of a dataclass: same fields, another type."""


class Refund(ValueError):
    """An exception subclass."""


class Note(pydantic.BaseModel):
    title: str
    body: Any = None


class Plain:
    """A plain object: its state is its attributes."""

    def __init__(self, a: Any) -> None:
        self.a = a


def double(x: Any) -> Any:
    return x


def halve(x: Any) -> Any:
    return x


#: Types a checkpoint may name in the replay property (configure(allowed_types=...)).
ALLOWED = [Color, Ticket, UrgentTicket, Point, Note]

ZONES = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]).map(ZoneInfo)
TZINFOS = st.none() | ZONES | st.sampled_from([UTC, timezone(timedelta(hours=1))])
HASHABLE = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.binary(max_size=4)
)
LEAVES = (
    HASHABLE
    | st.floats()  # NaN, infinities and -0.0 included
    | st.decimals(allow_nan=False, places=3)
    | st.uuids()
    | st.sampled_from(Color)
    | st.dates()
    | st.timedeltas()
    | st.times()
    | st.datetimes(timezones=TZINFOS)
    | ZONES
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    small = {"max_size": 3}
    keyed = st.dictionaries(st.text(max_size=4), inner, **small)
    return (
        st.lists(inner, **small)
        | st.lists(inner, **small).map(tuple)
        | keyed
        | st.dictionaries(HASHABLE | st.tuples(HASHABLE, HASHABLE), inner, **small)
        | st.frozensets(HASHABLE, **small)
        | st.sets(HASHABLE, **small)
        | st.lists(inner, **small).map(Tags)
        | st.lists(inner, **small).map(Pair)
        | keyed.map(Bag)
        | st.text(max_size=4).map(Name)
        | st.builds(Point, st.integers(), inner)
        | st.builds(Ticket, st.integers(), inner)
        | st.builds(UrgentTicket, st.integers(), inner)
        | st.builds(ValueError, st.text(max_size=6))
        | st.builds(Refund, st.integers())
        | st.builds(Note, title=st.text(max_size=4), body=inner)
        | st.builds(Plain, inner)
        | keyed.map(OrderedDict)
        | st.tuples(st.sampled_from([int, list, None]), keyed).map(lambda f: defaultdict(*f))
        | st.dictionaries(st.text(max_size=3), st.integers(), **small).map(Counter)
        | st.tuples(st.lists(inner, **small), st.none() | st.integers(3, 5)).map(
            lambda f: deque(*f)
        )
        | st.tuples(st.sampled_from([double, halve]), st.lists(HASHABLE, max_size=2)).map(
            lambda f: functools.partial(f[0], *f[1])
        )
    )


VALUES = st.recursive(LEAVES, _containers, max_leaves=8)


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def ref(value: Any) -> Any:
    """What makes ``value`` the input it is, as a hashable tree: its type at every level and
    its content (a dict's order left out, an OrderedDict's kept; floats by ``repr``, so NaN is
    itself and -0.0 is not 0.0)."""
    cls = type(value)
    name = _name(cls)
    if cls is float:
        return name, repr(value)
    if cls in (int, bool, str, bytes, NoneType):
        return name, value
    if isinstance(value, enum.Enum):
        return name, value.name
    if isinstance(value, BaseException):
        return name, ref(value.args), ref(vars(value))
    if isinstance(value, pydantic.BaseModel):
        return name, ref(dict(value))
    if dataclasses.is_dataclass(value):
        return name, ref(vars(value))
    if isinstance(value, OrderedDict):
        return name, tuple((ref(k), ref(v)) for k, v in value.items())
    if isinstance(value, defaultdict):
        return name, ref(value.default_factory), ref(dict(value))
    if isinstance(value, dict):
        items = frozenset((ref(k), ref(v)) for k, v in value.items())
        return name, items, ref(getattr(value, "__dict__", {})) if cls is not dict else ()
    if isinstance(value, deque):
        return name, tuple(map(ref, value)), value.maxlen
    if isinstance(value, list | tuple):
        return name, tuple(map(ref, value)), ref(getattr(value, "__dict__", {}))
    if isinstance(value, set | frozenset):
        return name, frozenset(map(ref, value))
    if isinstance(value, str):
        return name, str.__str__(value)
    if isinstance(value, datetime | time):
        naive = value.replace(tzinfo=None).isoformat()
        return name, naive, value.fold, ref(value.tzinfo)
    if isinstance(value, ZoneInfo):
        return name, value.key
    if isinstance(value, timezone):
        return name, repr(value)
    if isinstance(value, Decimal | UUID | date | timedelta):
        return name, str(value)
    if isinstance(value, functools.partial):
        return name, ref(value.func), ref(value.args), ref(value.keywords)
    if isinstance(value, type | FunctionType):
        return name, value.__module__, value.__qualname__
    return name, ref(vars(value))


#: Shapes the store revives exactly (with ALLOWED allowed): a value made only of these must
#: replay; others may instead execute again, never replay as something else.
_REVIVABLE = (
    NoneType, bool, int, float, str, bytes, list, tuple, dict, set, frozenset, OrderedDict,
    Counter, defaultdict, deque, datetime, date, time, timedelta, timezone, ZoneInfo, Decimal,
    UUID, Color, Point, Ticket, UrgentTicket,
)  # fmt: skip


def revivable(value: Any) -> bool:
    """Whether ``value`` is made only of shapes the store must revive exactly."""
    if type(value) not in _REVIVABLE:
        return False
    if isinstance(value, dict):
        return all(revivable(k) and revivable(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset | deque):
        return all(revivable(v) for v in value)
    if dataclasses.is_dataclass(value):
        return all(revivable(v) for v in vars(value).values())
    return True
