"""The model-call key rule, over generated conversations (hypothesis, fixed seed).

- Two calls whose messages differ in any field a provider is sent (type, ``ChatMessage``
  role, content and its parts, name, ``additional_kwargs``, tool calls, which call a tool
  result answers, a result's status), in the model settings or in the tool definitions
  offered get different keys, whether the change is built fresh or assigned to a message
  already hashed (the memo must notice).
- The same conversation with other run-time ids (message ids, tool-call ids, raw provider
  tool-call ids) gets the same key, in this process and in a fresh interpreter.

Both stored forms (the middleware's and the seam's) follow the one rule.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from call_key_cases import CAPTURE, build, case_key, key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.tools import ToolRuntime
from langchain_core.tools import tool

import spanpoint
from spanpoint.calls import spec as call_spec

HERE = Path(__file__).resolve().parent
PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)

FORMS = st.sampled_from([call_spec.MODEL_RESPONSE, call_spec.CHAT_RESULT])
TEXT = st.text(max_size=12)
NAMES = st.one_of(st.none(), st.sampled_from(["alice", "bob", "get_weather", "wire_money"]))
PART = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": f"https://x/{u}"}}, TEXT),
)
CONTENT = st.one_of(TEXT, st.lists(PART, min_size=1, max_size=3))
ARGS = st.dictionaries(st.sampled_from(["n", "to", "amount"]), st.integers(-3, 3), max_size=2)
CALL = st.tuples(st.sampled_from(["get_weather", "wire_money", "lookup"]), ARGS)
FUNCTION_CALL = st.builds(
    lambda name, args: {"function_call": {"name": name, "arguments": json.dumps(args)}},
    st.sampled_from(["get_weather", "wire_money"]),
    ARGS,
)
ROLES = st.sampled_from(["user", "system", "assistant", "developer", "critic"])
SETTINGS = st.dictionaries(
    st.sampled_from(["temperature", "max_tokens", "stop"]),
    st.one_of(st.integers(0, 3), st.lists(TEXT, max_size=2)),
    max_size=2,
)


def message_spec(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    base: dict[str, Any] = {"kind": st.just(kind), "content": CONTENT, "name": NAMES}
    if kind == "chat":
        base["role"] = ROLES
    elif kind == "ai":
        base["calls"] = st.lists(CALL, max_size=3)
        base["kwargs"] = st.one_of(st.just({}), FUNCTION_CALL)
        base["raw"] = st.booleans()
    elif kind == "tool":
        base["answers"] = st.integers(0, 5)
        base["status"] = st.sampled_from(["success", "error"])
    return st.fixed_dictionaries(base)


MESSAGE = st.sampled_from(["human", "system", "chat", "ai", "tool"]).flatmap(message_spec)
CONVERSATION = st.lists(MESSAGE, min_size=1, max_size=8)


def calls_before(specs: list[dict[str, Any]], index: int) -> int:
    return sum(len(s.get("calls") or ()) for s in specs[:index])


@st.composite
def edits(draw: Any, specs: list[dict[str, Any]]) -> tuple[int, str, Any]:
    """One provider-visible change to one message: (index, field, new value)."""
    i = draw(st.integers(0, len(specs) - 1))
    spec = specs[i]
    fields = ["content", "name"]
    if spec["kind"] in ("human", "system", "chat"):
        fields.append("kind")
    if spec["kind"] == "chat":
        fields.append("role")
    if spec["kind"] == "ai":
        fields.append("kwargs")
        if spec["calls"]:
            fields.append("calls")
    if spec["kind"] == "tool":
        fields.append("status")
        if calls_before(specs, i) >= 2:
            fields.append("answers")
    field = draw(st.sampled_from(fields))
    old = spec.get(field)
    if field == "content":
        new = draw(CONTENT.filter(lambda v: v != old))
    elif field == "name":
        new = draw(NAMES.filter(lambda v: v != old))
    elif field == "kind":
        new = draw(st.sampled_from([k for k in ("human", "system", "chat") if k != old]))
    elif field == "role":
        new = draw(ROLES.filter(lambda v: v != old))
    elif field == "kwargs":
        new = draw(st.one_of(st.just({}), FUNCTION_CALL).filter(lambda v: v != old))
    elif field == "calls":
        j = draw(st.integers(0, len(old) - 1))
        new = list(old)
        new[j] = draw(CALL.filter(lambda c: c != tuple(old[j]) and list(c) != list(old[j])))
    elif field == "status":
        new = "error" if old == "success" else "success"
    else:  # answers: another of the calls before it
        seen = calls_before(specs, i)
        new = draw(st.integers(0, seen - 1).filter(lambda v: v != old % seen))
    return i, field, new


def edited(specs: list[dict[str, Any]], i: int, field: str, new: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(specs)
    out[i][field] = new
    if field == "kind" and new == "chat":
        out[i]["role"] = "user"
    return out


def assign(message: Any, field: str, new: Any, specs: list[dict[str, Any]], i: int) -> bool:
    """Make the same change by assigning a field of the message already hashed (as
    HumanInTheLoop and other middleware do); False where no assignment expresses it."""
    if field == "kind":
        return False
    if field == "calls":
        rebuilt = build(edited(specs, i, field, new), "a")[i]
        message.tool_calls = rebuilt.tool_calls
        message.additional_kwargs = rebuilt.additional_kwargs
        return True
    if field == "answers":
        message.tool_call_id = build(edited(specs, i, field, new), "a")[i].tool_call_id
        return True
    if field == "kwargs":
        message.additional_kwargs = build(edited(specs, i, field, new), "a")[i].additional_kwargs
        return True
    setattr(message, field, new)
    return True


@PROPERTY
@given(specs=CONVERSATION, form=FORMS, data=st.data())
def test_a_change_a_provider_sees_changes_the_key(
    specs: list[dict[str, Any]], form: str, data: Any
) -> None:
    messages = build(specs, "a")
    before = key(messages, form)
    i, field, new = data.draw(edits(specs))
    changed = edited(specs, i, field, new)
    fresh = key(build(changed, "a"), form)
    assert fresh != before, f"{field} of message {i} changed, the key did not"
    if assign(messages[i], field, new, specs, i):
        assert key(messages, form) == fresh, f"{field} assigned in place was not hashed again"


@PROPERTY
@given(specs=CONVERSATION, form=FORMS, settings_=SETTINGS, other=SETTINGS)
def test_model_settings_are_in_the_key(
    specs: list[dict[str, Any]], form: str, settings_: dict[str, Any], other: dict[str, Any]
) -> None:
    messages = build(specs, "a")
    same = key(messages, form, settings_) == key(messages, form, other)
    assert same == (settings_ == other)


TOOL_DEFINITIONS = st.lists(
    st.builds(
        lambda name, description, required: {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "required": required},
            },
        },
        st.sampled_from(["get_weather", "wire_money"]),
        TEXT,
        st.lists(st.sampled_from(["to", "amount"]), max_size=2),
    ),
    max_size=2,
)


@PROPERTY
@given(specs=CONVERSATION, form=FORMS, tools=TOOL_DEFINITIONS, other=TOOL_DEFINITIONS)
def test_tool_definitions_are_in_the_key(
    specs: list[dict[str, Any]], form: str, tools: list[Any], other: list[Any]
) -> None:
    messages = build(specs, "a")
    same = key(messages, form, tools=tools) == key(messages, form, tools=other)
    assert same == (tools == other)


@PROPERTY
@given(specs=CONVERSATION)
def test_the_two_stored_forms_never_share_a_key(specs: list[dict[str, Any]]) -> None:
    messages = build(specs, "a")
    assert key(messages, call_spec.MODEL_RESPONSE) != key(messages, call_spec.CHAT_RESULT)


@PROPERTY
@given(specs=CONVERSATION, form=FORMS, salt=st.text("xyz0123456789", min_size=1, max_size=6))
def test_run_time_ids_never_change_the_key(
    specs: list[dict[str, Any]], form: str, salt: str
) -> None:
    assert key(build(specs, salt), form) == key(build(specs, "a"), form)


def test_keys_are_the_same_in_another_process() -> None:
    cases: list[dict[str, Any]] = []

    @settings(derandomize=True, database=None, deadline=None, max_examples=40)
    @given(specs=CONVERSATION, form=FORMS, settings_=SETTINGS)
    def collect(specs: list[dict[str, Any]], form: str, settings_: dict[str, Any]) -> None:
        cases.append({"specs": specs, "salt": "here", "stored_as": form, "settings": settings_})

    collect()
    mine = [case_key(case) for case in cases]
    there = [{**case, "salt": "there"} for case in cases]  # other run-time ids too
    src = Path(spanpoint.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE.parent), str(HERE)])}
    done = subprocess.run(
        [sys.executable, str(HERE / "call_key_cases.py")],
        input="\n".join(json.dumps(case) for case in there),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout.split() == mine
    assert len(set(mine)) > 1


# --- tool calls: the injected ToolRuntime -------------------------------------------------

CONTEXT = st.one_of(
    st.none(), st.dictionaries(st.sampled_from(["user", "tenant", "locale"]), TEXT, max_size=2)
)
CONFIGURABLE = st.dictionaries(st.sampled_from(["user_id", "thread_id"]), TEXT, max_size=2)
VOLATILE = st.fixed_dictionaries(
    {"checkpoint_ns": TEXT, "checkpoint_id": TEXT, "__pregel_task_id": TEXT}
)


@tool
def balance(runtime: ToolRuntime) -> str:
    """The current user's balance."""
    return str(runtime.context)


def runtime_key(
    context: Any, specs: list[dict[str, Any]], salt: str, configurable: dict[str, Any]
) -> str:
    runtime = ToolRuntime(
        state={"messages": build(specs, salt)},
        context=context,
        # What LangGraph writes into the metadata per step and attempt (never the caller's).
        config={
            "configurable": configurable,
            "metadata": {"langgraph_step": salt, "checkpoint_ns": salt, "ls_run_depth": salt},
            "tags": [f"seq:step:{salt}"],
        },
        stream_writer=lambda _chunk: None,
        tool_call_id="call-1",
        store=None,
    )
    call = call_spec.ToolCall(
        tool=balance, name="balance", args={}, call_id="call-1", injected={"runtime": runtime}
    )
    fingerprint = call_spec.tool_call_spec(call, CAPTURE, replay=True).fingerprint
    assert fingerprint is not None
    return fingerprint


@PROPERTY
@given(
    one=st.tuples(CONTEXT, CONVERSATION, CONFIGURABLE),
    other=st.tuples(CONTEXT, CONVERSATION, CONFIGURABLE),
    volatile=VOLATILE,
)
def test_a_tool_runtimes_readable_parts_are_its_key_and_nothing_else(
    one: tuple[Any, ...], other: tuple[Any, ...], volatile: dict[str, Any]
) -> None:
    """Same context, conversation and configurable values (other ids, other LangGraph
    bookkeeping): same key; any of them different: another key."""
    (context, specs, configurable), (context2, specs2, configurable2) = one, other
    base = runtime_key(context, specs, "a", configurable)
    assert runtime_key(context, specs, "b", {**configurable, **volatile}) == base
    form = call_spec.MODEL_RESPONSE
    same_state = key(build(specs, "a"), form) == key(build(specs2, "a"), form)
    equal = context == context2 and configurable == configurable2 and same_state
    assert (runtime_key(context2, specs2, "a", configurable2) == base) == equal
