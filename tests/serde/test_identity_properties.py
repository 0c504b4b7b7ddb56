"""The identity rule and faithful replay, over generated values (hypothesis, fixed seed).

- a key covers every part of a step's input: two inputs get the same fingerprint exactly when
  they are the same value of the same types at every level (``identity_values.ref``);
- equal values get equal keys in another process (another hash seed, so another set order);
- a step replays an equal value of the same type, or (for a type the store cannot revive
  exactly) executes again with a warning: never a value of another type;
- a LangChain message (as a model call's reply is stored) reads back equal, or is refused.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
import pickle
import subprocess
import sys
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from fakes import count_effect, read_effects
from identity_values import ALLOWED, VALUES, Bag, Name, Pair, Tags, ref, revivable
from spanpoint import serde
from spanpoint.stores import MemoryStore, SqliteStore

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
FIXED = {"derandomize": True, "deadline": None, "database": None}


def key(value: Any) -> str:
    try:
        return serde.fingerprint(value)
    except serde.UnfingerprintableInputError:
        return "not cacheable"


def lookalikes(value: Any) -> list[Any]:
    """Values that equal ``value`` under ``==`` (or print alike) but are other inputs."""
    out: list[Any] = []
    if type(value) is list:
        out += [tuple(value), Tags(value), Pair(value)]
    if type(value) is tuple:
        out += [list(value), Pair(value)]
    if type(value) is dict:
        out += [Bag(value), OrderedDict(value)]
        if all(type(v) is int for v in value.values()):
            out.append(Counter(value))
    if type(value) is str:
        out.append(Name(value))
    if type(value) is int and not isinstance(value, bool):
        out += [float(value)] if abs(value) < 2**53 else []
    if type(value) is float and value == value:
        out.append(-value if value == 0 else value)
    return [v for v in out if ref(v) != ref(value)]


@settings(max_examples=200, **FIXED)
@given(a=VALUES, b=VALUES)
def test_two_values_share_a_key_exactly_when_they_are_the_same_input(a: Any, b: Any) -> None:
    assert key(a) != "not cacheable", "a generated shape is on the allow list"
    assert (key(a) == key(b)) == (ref(a) == ref(b))


@settings(max_examples=150, **FIXED)
@given(value=VALUES)
def test_a_copy_shares_the_key_and_a_lookalike_does_not(value: Any) -> None:
    assert key(copy.deepcopy(value)) == key(value)
    for other in lookalikes(value):
        assert key(other) != key(value), f"{other!r} shares the key of {value!r}"
    wrapped = {"arg": value}
    for other in lookalikes(value):
        assert key({"arg": other}) != key(wrapped)


_PRINT_KEYS = (
    "import json, pickle, sys\n"
    "from spanpoint import serde\n"
    "def key(v):\n"
    "    try:\n"
    "        return serde.fingerprint(v)\n"
    "    except serde.UnfingerprintableInputError:\n"
    "        return 'not cacheable'\n"
    "print(json.dumps([key(v) for v in pickle.load(sys.stdin.buffer)]))\n"
)


@settings(max_examples=3, **FIXED)
@given(values=st.lists(VALUES, min_size=30, max_size=30))
def test_equal_values_get_equal_keys_in_another_process(values: list[Any]) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
        "PYTHONHASHSEED": "4242",  # another str hash: sets iterate in another order
    }
    done = subprocess.run(
        [sys.executable, "-c", _PRINT_KEYS],
        input=pickle.dumps(values),
        capture_output=True,
        env=env,
        check=True,
        timeout=120,
    )
    assert json.loads(done.stdout) == [key(v) for v in values]


# --- replay ---------------------------------------------------------------------------------

_runs = itertools.count()
_returns: dict[str, Any] = {}


@pytest.fixture(params=["memory", "sqlite"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "cp.db")
    provider = TracerProvider()
    spanpoint.configure(tracer_provider=provider, store=store, allowed_types=ALLOWED)
    yield tmp_path / "effects"
    provider.shutdown()
    if isinstance(store, SqliteStore):
        store.close()


@spanpoint.step(name="produce")
def produce(tag: str, effects: str) -> Any:
    count_effect(effects, tag)
    return _returns[tag]


@spanpoint.step(name="produce_async")
async def produce_async(tag: str, effects: str) -> Any:
    count_effect(effects, tag)
    return _returns[tag]


def attempt(run_id: str, effects: Path, mode: str) -> tuple[Any, list[str]]:
    with spanpoint.run(run_id) as run:
        if mode == "sync":
            out = produce(run_id, str(effects))
        else:
            out = asyncio.run(produce_async(run_id, str(effects)))
    return out, run.warnings


@pytest.mark.parametrize("mode", ["sync", "async"])
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], **FIXED)
@given(value=VALUES)
def test_a_step_replays_an_equal_value_of_the_same_type_or_executes_again(
    durable: Path, mode: str, value: Any
) -> None:
    run_id = f"P-{next(_runs)}"
    _returns[run_id] = value
    first, _ = attempt(run_id, durable, mode)
    again, warnings = attempt(run_id, durable, mode)
    assert first is value
    executions = read_effects(durable)[run_id]
    if executions == 1:
        assert ref(again) == ref(value), "a replay returned another value or type"
    else:
        assert executions == 2 and again is value
        assert not revivable(value), f"a {type(value).__name__} the store revives executed again"
        assert any("was not committed" in w for w in warnings), warnings


# --- LangChain messages through the store -----------------------------------------------------

JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
#: Fields a provider fills, sometimes with values JSON does not have (a tuple, a set).
EXTRA = JSON_LIKE | VALUES


def _message(kind: str, text: str, extra: Any, name: str | None, parts: bool) -> Any:
    from langchain_core import messages as m

    content: Any = [{"type": "text", "text": text}, text] if parts else text
    if kind == "tool":
        return m.ToolMessage(content, tool_call_id="c1", artifact=extra, name=name)
    if kind == "ai":
        call = {"name": "lookup", "args": {"q": extra}, "id": "c1", "type": "tool_call"}
        return m.AIMessage(content, tool_calls=[call], name=name, vendor_field=extra)
    if kind == "chat":
        return m.ChatMessage(content, role="critic", additional_kwargs={"extra": extra})
    if kind == "function":
        return m.FunctionMessage(content, name=name or "f", additional_kwargs={"extra": extra})
    if kind == "chunk":
        return m.AIMessageChunk(content, response_metadata={"extra": extra}, name=name)
    cls = {"human": m.HumanMessage, "system": m.SystemMessage}[kind]
    return cls(content, additional_kwargs={"extra": extra}, name=name)


MESSAGES = st.builds(
    _message,
    st.sampled_from(["ai", "human", "system", "tool", "chat", "function", "chunk"]),
    st.text(max_size=8),
    EXTRA,
    st.none() | st.text(max_size=4),
    st.booleans(),
)


@settings(max_examples=120, **FIXED)
@given(message=MESSAGES)
def test_a_stored_message_reads_back_equal_or_is_refused(message: Any) -> None:
    try:
        tag, data = serde.dumps({"result": [message]})
    except serde.SerializationError:
        return  # not committed: the call executes again
    (back,) = serde.loads(tag, data)["result"]
    assert ref(back) == ref(message)
    assert back.__pydantic_extra__ == message.__pydantic_extra__
    assert back.__pydantic_fields_set__ == message.__pydantic_fields_set__


@settings(max_examples=80, **FIXED)
@given(message=MESSAGES, extra=JSON_LIKE | VALUES.filter(revivable))
def test_a_message_of_revivable_fields_is_always_committed(message: Any, extra: Any) -> None:
    """LangChain's own message classes are written field by field: one whose fields hold
    values the store revives exactly (JSON-like data, tuples, sets, dates, allowed types…)
    always reads back as itself, so it is never refused and its call never paid again."""
    serde.set_allowed_types(ALLOWED)
    try:
        _check_committed(message, extra)
    finally:
        serde.set_allowed_types([])


def _check_committed(message: Any, extra: Any) -> None:
    if getattr(message, "artifact", None) is not None:
        message.artifact = extra
    if "extra" in message.additional_kwargs:
        message.additional_kwargs["extra"] = extra
    for call in getattr(message, "tool_calls", []):
        call["args"]["q"] = extra
    if message.__pydantic_extra__:
        message.__pydantic_extra__["vendor_field"] = extra
    if "extra" in message.response_metadata:
        message.response_metadata["extra"] = extra
    back = serde.loads(*serde.dumps(message))
    assert type(back) is type(message) and ref(back) == ref(message)


def test_a_message_subclass_is_read_back_not_trusted() -> None:
    """A user's subclass of a message may keep state its fields do not show: it goes through
    the writer and the read-back check, never the field-by-field path."""
    from langchain_core.messages import AIMessage

    class Tagged(AIMessage):
        pass

    with pytest.raises(serde.SerializationError, match="Tagged"):
        serde.dumps(Tagged("hi"))  # not an allowed type: it cannot read back


def test_a_forged_message_extension_for_another_class_is_refused() -> None:
    import ormsgpack

    payload = ormsgpack.packb(["uuid", "UUID", {"fields": {"hex": "0" * 32}, "set": []}])
    data = ormsgpack.packb(ormsgpack.Ext(serde.MESSAGE_EXTENSION, payload))
    with pytest.raises(serde.UntrustedCheckpointError, match="written as a message"):
        serde.loads("msgpack", data)
