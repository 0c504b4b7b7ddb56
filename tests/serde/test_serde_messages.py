"""The message rule of a ``@step`` key (and of a graph call's input), over generated
conversations (hypothesis, fixed seed).

- Two conversations whose messages differ in any field a provider is sent (type and class,
  ``ChatMessage.role``, content and its parts, name, ``additional_kwargs`` such as a legacy
  ``function_call``, tool calls valid and invalid, which call a tool result answers, a
  result's status) get different fingerprints.
- The same conversation built with other run-time ids (message ids such as ``lc_run--…``,
  tool-call ids, a provider's raw tool-call ids) gets the same fingerprint, and a ``@step``
  given it replays.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

import spanpoint
from fakes import count_effect, read_effects
from spanpoint import serde

_RUNS = itertools.count()
PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

TEXT = st.sampled_from(["", "pay", "pay 10", "héllo"])
NAMES = st.sampled_from([None, "alice", "bob"])
PART = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": f"https://x/{u}"}}, TEXT),
)
CONTENT = st.one_of(TEXT, st.lists(PART, min_size=1, max_size=2))
ARGS = st.dictionaries(st.sampled_from(["to", "amount"]), st.integers(0, 2), max_size=2)
CALL = st.tuples(st.sampled_from(["get_weather", "wire_money"]), ARGS)
INVALID = st.tuples(
    st.sampled_from(["get_weather", "wire_money"]),
    st.sampled_from(["{", "{'a'"]),
    st.sampled_from(["bad json", "truncated"]),
)
KWARGS = st.one_of(
    st.just({}),
    st.builds(
        lambda name, args: {"function_call": {"name": name, "arguments": json.dumps(args)}},
        st.sampled_from(["get_weather", "wire_money"]),
        ARGS,
    ),
    st.builds(lambda r: {"refusal": r}, TEXT.filter(bool)),
)
SPEC = st.one_of(
    st.fixed_dictionaries({"kind": st.sampled_from(["human", "system"]), "content": CONTENT}),
    st.fixed_dictionaries(
        {
            "kind": st.just("chat"),
            "content": CONTENT,
            "role": st.sampled_from(["user", "system", "critic"]),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("ai"),
            "content": CONTENT,
            "calls": st.lists(CALL, max_size=2),
            "invalid": st.lists(INVALID, max_size=1),
            "kwargs": KWARGS,
            "raw": st.booleans(),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("tool"),
            "content": CONTENT,
            "answers": st.integers(0, 3),
            "status": st.sampled_from(["success", "error"]),
        }
    ),
    st.fixed_dictionaries({"kind": st.just("function"), "content": CONTENT}),
)
NAMED = st.tuples(SPEC, NAMES).map(lambda p: {**p[0], "name": p[1]})
CONVERSATION = st.lists(NAMED, min_size=1, max_size=4)

#: What each field of a spec may become: a conversation and one edited field of one message.
FIELDS: dict[str, Any] = {
    "kind": st.sampled_from(["human", "system"]),  # kinds that share their other fields
    "content": CONTENT,
    "name": NAMES,
    "role": st.sampled_from(["user", "system", "critic"]),
    "calls": st.lists(CALL, max_size=2),
    "invalid": st.lists(INVALID, max_size=1),
    "kwargs": KWARGS,
    "raw": st.booleans(),
    "answers": st.integers(0, 3),
    "status": st.sampled_from(["success", "error"]),
}


@st.composite
def edited(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    a = draw(CONVERSATION)
    i = draw(st.integers(0, len(a) - 1))
    fields = sorted(k for k in a[i] if k != "kind" or a[i]["kind"] in ("human", "system"))
    field = draw(st.sampled_from(fields))
    b = [dict(spec) for spec in a]
    b[i][field] = draw(FIELDS[field])
    return a, b


def build(specs: list[dict[str, Any]], salt: str) -> tuple[list[BaseMessage], list[Any]]:
    """The messages ``specs`` describe with run-time ids named by ``salt``, and what a
    provider is sent of them (the call a tool result answers by position, not by id)."""
    out: list[BaseMessage] = []
    sent: list[Any] = []
    ids: list[str] = []
    for i, spec in enumerate(specs):
        common: dict[str, Any] = {"content": spec["content"], "id": f"lc_run--{salt}-{i}"}
        if spec["name"] is not None:
            common["name"] = spec["name"]
        kind = spec["kind"]
        seen = dict(spec)
        if kind == "human":
            out.append(HumanMessage(**common))
        elif kind == "system":
            out.append(SystemMessage(**common))
        elif kind == "chat":
            out.append(ChatMessage(role=spec["role"], **common))
        elif kind == "function":
            out.append(FunctionMessage(**{**common, "name": spec["name"] or "f"}))
            seen["name"] = spec["name"] or "f"
        elif kind == "ai":
            calls = []
            for name, args in spec["calls"]:
                ids.append(f"call-{salt}-{len(ids)}")
                calls.append({"name": name, "args": args, "id": ids[-1], "type": "tool_call"})
            kwargs = dict(spec["kwargs"])
            if spec["raw"] and calls:
                kwargs["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                    }
                    for c in calls
                ]
            seen["raw"] = bool(spec["raw"] and calls)
            invalid = [
                {
                    "name": n,
                    "args": a,
                    "error": e,
                    "id": f"bad-{salt}-{i}",
                    "type": "invalid_tool_call",
                }
                for n, a, e in spec["invalid"]
            ]
            out.append(
                AIMessage(
                    tool_calls=calls, invalid_tool_calls=invalid, additional_kwargs=kwargs, **common
                )
            )
        else:
            answered = spec["answers"] % len(ids) if ids else f"orphan-{i}"
            seen["answers"] = answered
            tool_call_id = ids[answered] if ids else f"orphan-{salt}-{i}"
            out.append(ToolMessage(tool_call_id=tool_call_id, status=spec["status"], **common))
        sent.append(seen)
    return out, sent


def key(messages: list[BaseMessage]) -> str:
    """The fingerprint of a step's arguments holding the conversation."""
    return serde.fingerprint({"messages": messages, "ticket": 1})


@PROPERTY
@given(pair=st.one_of(edited(), st.tuples(CONVERSATION, CONVERSATION)))
def test_messages_that_differ_in_what_a_provider_is_sent_never_share_a_key(
    pair: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    a, b = pair
    (first, sent_a), (second, sent_b) = build(a, "one"), build(b, "two")
    if sent_a != sent_b:  # equal ones: test_run_time_ids_never_change_a_key
        assert key(first) != key(second), (sent_a, sent_b)


@PROPERTY
@given(a=CONVERSATION)
def test_run_time_ids_never_change_a_key(a: list[dict[str, Any]]) -> None:
    assert key(build(a, "one")[0]) == key(build(a, "other")[0])


@settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pair=st.one_of(edited(), st.tuples(CONVERSATION, CONVERSATION)))
def test_a_step_replays_only_the_same_conversation(
    configured: Any, tmp_path: Path, pair: tuple[list[dict[str, Any]], list[dict[str, Any]]]
) -> None:
    """Two attempts of one run id call a step with ``a`` then ``b``: the second executes
    exactly when a provider would be sent something else."""
    a, b = pair
    effects = tmp_path / "effects.txt"
    tag = f"t{next(_RUNS)}"

    @spanpoint.step
    def answer(messages: list[BaseMessage]) -> int:
        count_effect(effects, tag)
        return len(messages)

    (first, sent_a), (second, sent_b) = build(a, "one"), build(b, "two")
    for conversation in (first, second):
        with spanpoint.run(f"run-{tag}"):
            answer(conversation)
    assert read_effects(effects)[tag] == (1 if sent_a == sent_b else 2)
