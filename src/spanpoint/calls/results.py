"""Whole tool results: what a tool call returned *and wrote*, committed and replayed exactly.

A tool call's checkpoint is everything the call gave LangGraph (DESIGN.md, invariant 8):

- its return value: a ``ToolMessage`` (with its artifact), a ``Command`` (state ``update``,
  ``goto`` with ``Send`` args, ``graph``), or a plain value;
- the channel writes it made through the task's ``send`` while it ran. Deep Agents'
  ``StateBackend`` writes ``files`` that way, and ``write_file`` returns a bare
  ``ToolMessage``: committing the return value alone loses the file.

Ids are volatile: providers and libraries mint new ones on every attempt. A result that
carries the tool's *input* messages (a swarm handoff's ``Command`` holds the whole
conversation) is stored with each such message as a reference to its position in the input,
never by its id; a replay puts the *current* input's message there, so LangGraph's
``add_messages`` sees ids it already holds and appends nothing twice. A ``ToolMessage`` that
answers the call (or a tool call of the input) is re-bound to the current call's id.
Messages the call minted itself keep their committed ids: they are consistent within the
attempt that replays them.

What cannot be replayed exactly raises :class:`NotReplayable`: the boundary then warns and
executes again (when committing: nothing is committed). Never a lossy replay.

Three functions, used by both tool seams (``CheckpointMiddleware.wrap_tool_call`` and the
``BaseTool.run`` patch):

- :func:`capture_writes` (or :func:`recording_writes` where the config cannot be passed in):
  record the call's writes while forwarding them;
- :func:`encode_tool_result`: the stored form (at commit);
- :func:`replay_tool_result`: the output again, re-bound to the current run (at replay).

LangGraph's serializer turns tuples into lists, as it does in its own checkpoints: a tuple
inside a tool's value reads back as a list here exactly as it would from LangGraph's state.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Command, Send

from spanpoint import _compat
from spanpoint.errors import NotReplayable

__all__ = [
    "NotReplayable",
    "capture_writes",
    "encode_tool_result",
    "input_messages_of",
    "recording_writes",
    "replay_tool_result",
]

#: The stored form's marker and version: a stored value without it is not a tool result.
FORMAT = "spanpoint.tool_result"
VERSION = 1
#: The key of a message reference inside the stored form (a user dict holding it is refused).
_REF = "__spanpoint_ref__"

Write = tuple[str, Any]


# --- writes ------------------------------------------------------------------------------


def _recorder(send: Callable[[Sequence[Write]], None], writes: list[Write]) -> Callable[..., None]:
    lock = threading.Lock()  # ToolNode may run the calls of one task in threads

    def recording_send(values: Sequence[Write]) -> None:
        values = list(values)
        send(values)  # forwarded first: a write LangGraph refuses is not recorded
        with lock:
            writes.extend((channel, value) for channel, value in values)

    return recording_send


def capture_writes(config: Mapping[str, Any] | None) -> tuple[Any, list[Write]]:
    """A config for the tool whose task ``send`` records what the call writes, and the list.

    The returned config is a copy of ``config`` whose ``configurable`` holds a ``send``
    (LangGraph's private ``__pregel_send``, through :mod:`spanpoint._compat`) that forwards
    every write to the task's own ``send`` and appends it, as ``(channel, value)``, to the
    returned list. Pass that config to the tool (``BaseTool.run(..., config=...)``): code that
    reads ``get_config()`` inside the tool then sees the recording ``send``, and reads stay
    correct because every write still reaches the task. Outside a LangGraph task (no ``send``)
    ``config`` is returned unchanged with a list that stays empty: nothing can be written.
    """
    writes: list[Write] = []
    conf = config.get("configurable") if config else None
    send = conf.get(_compat.CONFIG_KEY_SEND) if isinstance(conf, Mapping) else None
    if send is None or config is None:
        return config, writes
    recording = {**conf, _compat.CONFIG_KEY_SEND: _recorder(send, writes)}  # type: ignore[dict-item]
    return {**config, "configurable": recording}, writes


@contextmanager
def recording_writes(config: dict[str, Any] | None) -> Iterator[list[Write]]:
    """Record the writes of a call that runs with ``config`` itself, for the ``with`` block.

    For a seam that cannot hand the tool another config: LangGraph's ``ToolNode`` invokes the
    tool with the per-call config it built (``ToolCallRequest.runtime.config``), so
    ``CheckpointMiddleware`` swaps that dict's ``configurable`` for a recording copy (as
    :func:`capture_writes` makes) and puts the original back when the block ends. Each tool
    call of a ToolNode has its own config dict, so parallel calls never see each other's.
    """
    recorded, writes = capture_writes(config)
    if config is None or recorded is config:
        yield writes
        return
    original = config.get("configurable")
    config["configurable"] = recorded["configurable"]
    try:
        yield writes
    finally:
        config["configurable"] = original


def _send_of(config: Mapping[str, Any] | None) -> Callable[[Sequence[Write]], None] | None:
    conf = config.get("configurable") if config else None
    return conf.get(_compat.CONFIG_KEY_SEND) if isinstance(conf, Mapping) else None


# --- input messages ----------------------------------------------------------------------


def _messages_in(state: Any) -> list[BaseMessage] | None:
    if isinstance(state, Mapping):
        found = state.get("messages")
    elif isinstance(state, list):
        found = state
    else:
        found = getattr(state, "messages", None)
    if isinstance(found, list) and _all_messages(found):
        return found
    return None


def _all_messages(items: list[Any]) -> bool:
    """Whether every item is a message: by the distinct types, found in C (a tool call sees
    the whole conversation, so a check per item cost every call O(n) in a long run)."""
    return all(issubclass(kind, BaseMessage) for kind in set(map(type, items)))


def input_messages_of(
    state: Any = None, tool_input: Any = None, config: Mapping[str, Any] | None = None
) -> list[BaseMessage] | None:
    """The messages a tool call was given, for re-binding ids; None when none can be found.

    In order: ``state`` (a ``ToolCallRequest.state``: a dict or model with ``messages``, or a
    list of messages); the injected state or ``ToolRuntime.state`` found among the tool's
    arguments (``tool_input``); else the current task's ``messages`` channel, read through
    the config (LangGraph's private ``__pregel_read``, as the task saw it when it started).
    None means there is nothing to re-bind: results that embed no input message are still
    replayed exactly, and results that embed messages with ids are refused
    (:class:`NotReplayable`), since those ids cannot be placed.
    """
    found = _messages_in(state) if state is not None else None
    if found is not None:
        return found
    if isinstance(tool_input, Mapping):
        args = tool_input.get("args") if tool_input.get("type") == "tool_call" else tool_input
        for value in (args or {}).values() if isinstance(args, Mapping) else ():
            inner = getattr(value, "state", value)  # a ToolRuntime carries the state
            found = _messages_in(inner) if isinstance(inner, Mapping | list) else None
            if found is not None:
                return found
    conf = config.get("configurable") if config else None
    read = conf.get(_compat.CONFIG_KEY_READ) if isinstance(conf, Mapping) else None
    if callable(read):
        try:
            found = _messages_in({"messages": read("messages", False)})
        except Exception:  # no such channel in this graph: nothing to re-bind
            found = None
    return found


# --- walking a result --------------------------------------------------------------------


def _walk(value: Any, fn: Callable[[BaseMessage], Any], path: str) -> Any:
    """``value`` with every message inside it replaced by ``fn(message)``.

    Walks what LangGraph itself walks in a tool's result: plain dicts, lists and tuples,
    ``Command`` (update, goto, resume) and ``Send`` (arg). A message inside another object
    (a pydantic or dataclass state) cannot be re-bound: :class:`NotReplayable`.
    """
    if isinstance(value, BaseMessage):
        return fn(value)
    kind = type(value)
    if kind is dict:
        if _REF in value:
            raise NotReplayable(f"{path} holds a dict with the reserved key {_REF!r}")
        return {k: _walk(v, fn, f"{path}[{k!r}]") for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(_walk(v, fn, f"{path}[{i}]") for i, v in enumerate(value))
    if isinstance(value, Command):
        return _command(
            value,
            _walk(value.update, fn, f"{path}.update"),
            _walk(value.resume, fn, f"{path}.resume"),
            _walk(value.goto, fn, f"{path}.goto"),
        )
    if isinstance(value, Send):
        return _send(value, _walk(value.arg, fn, f"{path}.arg"))
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict) and _holds_message(fields.values()):
        raise NotReplayable(
            f"{path} is a {kind.__qualname__} holding messages, whose ids spanpoint cannot "
            "re-bind; return messages in a dict or a list"
        )
    return value


def _command(command: Command[Any], update: Any, resume: Any, goto: Any) -> Command[Any]:
    """``command`` with new update, resume and goto; every other field kept (graph, …)."""
    return dataclasses.replace(command, update=update, resume=resume, goto=goto)


def _send(send: Send, arg: Any) -> Send:
    """``send`` with a new ``arg``; every other field kept (node, timeout, …)."""
    found = copy.copy(send)
    found.arg = arg
    return found


def _holds_message(values: Any) -> bool:
    for v in values:
        if isinstance(v, BaseMessage):
            return True
        if isinstance(v, list | tuple) and any(isinstance(m, BaseMessage) for m in v):
            return True
    return False


_message_id = operator.attrgetter("id")


def _backwards(items: Sequence[Any]) -> range:
    return range(len(items) - 1, -1, -1)


def _tool_call_places(inputs: Sequence[BaseMessage]) -> dict[str, list[int]]:
    """Each tool-call id of the input messages -> [message position, call position]."""
    places: dict[str, list[int]] = {}
    for j, message in enumerate(inputs):
        if isinstance(message, AIMessage):
            for k, call in enumerate(message.tool_calls):
                call_id = call.get("id")
                if call_id:
                    places.setdefault(call_id, [j, k])
    return places


# --- encode ------------------------------------------------------------------------------


def encode_tool_result(
    output: Any,
    writes: Sequence[Write],
    input_messages: Sequence[BaseMessage] | None,
    *,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    """The stored form of a tool call's whole result: its output and its channel writes.

    Args:
        output: what the tool returned (``ToolMessage``, ``Command``, or any value).
        writes: the ``(channel, value)`` writes the call made (from :func:`capture_writes`).
        input_messages: the messages the call was given (:func:`input_messages_of`), or None.
        tool_call_id: the id of the call being executed, when there is one.

    A message that *is* input message *j* (the same object, or an equal message with the
    same id) is stored as a reference to *j* with its type and content; one that has input
    *j*'s id but other content (an edit, a ``RemoveMessage``) keeps a reference to *j* for
    its id. A minted ``ToolMessage`` answering this call, or a tool call of the input, keeps
    a reference to that call instead of the id value. Everything else is stored as is.

    Raises:
        NotReplayable: the output embeds messages with ids while the input messages are
            unknown (the ids cannot be placed); or messages inside an object spanpoint
            cannot walk; or a minted ``ToolMessage`` answers a call it cannot place.
    """
    inputs = list(input_messages) if input_messages is not None else None
    # Built on first need: most results hold one minted ToolMessage answering this call,
    # and a long conversation would cost more to index than the rest of the commit.
    index: dict[str, Any] = {}

    def position(message: BaseMessage) -> int | None:
        if not inputs:
            return None
        # Built in C (map/zip), last position first so that the first occurrence wins.
        by_object = index.get("object")
        if by_object is None:
            ids = map(id, reversed(inputs))
            by_object = index["object"] = dict(zip(ids, _backwards(inputs), strict=True))
        j = by_object.get(id(message))
        message_id = message.id
        if j is None and message_id is not None:
            by_id = index.get("id")
            if by_id is None:
                ids = map(_message_id, reversed(inputs))
                by_id = index["id"] = dict(zip(ids, _backwards(inputs), strict=True))
            j = by_id.get(message_id)
        return j  # type: ignore[no-any-return]

    def places() -> dict[str, list[int]]:
        if "places" not in index:
            index["places"] = _tool_call_places(inputs or ())
        return index["places"]  # type: ignore[no-any-return]

    def encode(message: BaseMessage) -> Any:
        # The common result, a ToolMessage minted for this very call: with no id there is no
        # id to re-bind, and stored as answering the call it replays as an equal message even
        # if the tool returned an input object, so its input position is not looked for (that
        # index over the whole conversation made every tool call O(n) in a long run).
        minted = (
            tool_call_id is not None
            and message.id is None
            and isinstance(message, ToolMessage)
            and message.tool_call_id == tool_call_id
        )
        j = None if minted else position(message)
        if inputs is not None and j is not None:
            original = inputs[j]
            if message is original or message == original:
                return {_REF: "in", "i": j, "type": original.type, "content": original.content}
        elif inputs is None and message.id is not None:
            raise NotReplayable(
                f"the result embeds a {message.type} message with an id, and the tool's input "
                "messages are unknown, so that id cannot be re-bound on replay"
            )
        record: dict[str, Any] = {_REF: "msg", "m": message}
        artifact = getattr(message, "artifact", None)
        if artifact is not None:
            # Stored beside the message: LangGraph's writer encodes a message's fields as
            # plain data, so a pydantic artifact inside it would read back as a dict.
            record["m"] = message.model_copy(update={"artifact": None})
            record["artifact"] = artifact
        if j is not None:
            original = inputs[j]  # type: ignore[index]
            record["id_of"] = [j, original.type, original.content]
        if isinstance(message, ToolMessage):
            answered = message.tool_call_id
            if tool_call_id is not None and answered == tool_call_id:
                record["answers"] = "call"
            elif answered in places():
                j, k = places()[answered]
                caller = inputs[j]  # type: ignore[index]
                record["answers"] = [j, k, caller.content, caller.tool_calls[k].get("name")]  # type: ignore[attr-defined]
            elif tool_call_id is None and inputs is None and output is not message:
                raise NotReplayable(
                    "the result holds a ToolMessage whose tool-call id cannot be placed (no "
                    "call id and no input messages), so a replay could answer a stale call"
                )
        return record

    stored_writes = []
    for n, write in enumerate(writes):
        channel, value = write
        stored_writes.append([channel, _walk(value, encode, f"write {n} ({channel!r})")])
    return {
        "format": FORMAT,
        "version": VERSION,
        "out": _walk(output, encode, "the result"),
        "writes": stored_writes,
    }


# --- replay ------------------------------------------------------------------------------


def replay_tool_result(
    stored: Any,
    *,
    input_messages: Sequence[BaseMessage] | None,
    tool_call_id: str | None,
    config: Mapping[str, Any] | None,
) -> Any:
    """The output of a committed tool call, re-bound to the current run, its writes re-issued.

    Each input reference takes the *current* input's message at that position (its type and
    content must equal the committed one's); a minted ``ToolMessage`` answering the call gets
    ``tool_call_id``, one answering an input tool call gets that call's current id; a
    returned ``ToolMessage`` gets ``tool_call_id`` too. Then the committed writes go through
    the current task's ``send`` (from ``config``), and the output is returned. Nothing is
    written unless the whole result could be re-bound.

    Raises:
        NotReplayable: not a stored tool result; an input reference is out of range or
            differs from the current input (the call's input changed); writes to re-issue
            but no task ``send`` in ``config``.
    """
    if not (isinstance(stored, dict) and stored.get("format") == FORMAT):
        raise NotReplayable("the stored value is not a spanpoint tool result")
    if stored.get("version") != VERSION:
        raise NotReplayable(f"tool result format version {stored.get('version')!r} is unknown")
    inputs = list(input_messages) if input_messages is not None else None

    def current(j: Any, kind: Any, content: Any, what: str) -> BaseMessage:
        if inputs is None:
            raise NotReplayable(f"{what} refers to input message {j}, and the input is unknown")
        if not (isinstance(j, int) and 0 <= j < len(inputs)):
            raise NotReplayable(f"{what} refers to input message {j}; the input has {len(inputs)}")
        message = inputs[j]
        if message.type != kind or message.content != content:
            raise NotReplayable(
                f"{what} refers to input message {j}, which was a {kind} message and is now a "
                f"{message.type} message with other content: the call's input changed"
            )
        return message

    def call_id_at(place: Any) -> str:
        j, k, content, name = place
        calls = getattr(current(j, "ai", content, "a ToolMessage"), "tool_calls", None) or []
        if not (isinstance(k, int) and 0 <= k < len(calls)) or calls[k].get("name") != name:
            raise NotReplayable(
                f"a ToolMessage answers tool call {k} ({name!r}) of input message {j}, which "
                "the current input does not hold"
            )
        return str(calls[k].get("id"))

    def decode(value: Any) -> Any:
        kind = type(value)
        if kind is dict:
            ref = value.get(_REF)
            if ref == "in":
                found = value.get("i"), value.get("type"), value.get("content")
                return current(*found, "the result")
            if ref == "msg":
                return minted(value)
            return {k: decode(v) for k, v in value.items()}
        if kind is list or kind is tuple:
            return kind(decode(v) for v in value)
        if isinstance(value, Command):
            return _command(value, decode(value.update), decode(value.resume), decode(value.goto))
        if isinstance(value, Send):
            return _send(value, decode(value.arg))
        return value

    def minted(record: dict[str, Any]) -> BaseMessage:
        message = record.get("m")
        if not isinstance(message, BaseMessage):
            raise NotReplayable("a stored message reference holds no message")
        update: dict[str, Any] = {}
        if "artifact" in record:
            update["artifact"] = record["artifact"]
        if "id_of" in record:
            j, kind, content = record["id_of"]
            update["id"] = current(j, kind, content, f"a {message.type} message").id
        answers = record.get("answers")
        if answers == "call":
            if tool_call_id is None:
                raise NotReplayable("a ToolMessage answers the call, and the call has no id now")
            update["tool_call_id"] = tool_call_id
        elif answers is not None:
            update["tool_call_id"] = call_id_at(answers)
        return message.model_copy(update=update) if update else message

    output = decode(stored.get("out"))
    writes: list[Write] = [(str(channel), decode(value)) for channel, value in stored["writes"]]
    if isinstance(output, ToolMessage) and tool_call_id not in (None, output.tool_call_id):
        output = output.model_copy(update={"tool_call_id": tool_call_id})
    if writes:
        send = _send_of(config)
        if send is None:
            raise NotReplayable(
                f"the call wrote {len(writes)} channel value(s) and there is no LangGraph task "
                "to write them to now"
            )
        _check_channels(config, writes)
        send(writes)
    return output


def _check_channels(config: Mapping[str, Any] | None, writes: Sequence[Write]) -> None:
    """Refuse writes to a channel the current graph does not have: LangGraph would drop them
    with a log line, and the replay would silently lose part of the result."""
    conf = config.get("configurable") if config else None
    read = conf.get(_compat.CONFIG_KEY_READ) if isinstance(conf, Mapping) else None
    if not callable(read):
        return  # no way to ask; LangGraph's own check still runs when the writes apply
    for channel in {channel for channel, _ in writes if not channel.startswith("__")}:
        try:
            read(channel, False)
        except KeyError:
            raise NotReplayable(
                f"the call wrote the channel {channel!r}, which this graph no longer has"
            ) from None
        except Exception:  # a channel that cannot be read now still exists: LangGraph decides
            continue
