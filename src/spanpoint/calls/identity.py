"""What identifies a model call or a tool call: content fingerprints on the hot path.

A model call's fingerprint covers the model's identity and settings, the response format,
the tool definitions, the system prompt and every message; a tool call's covers the tool
name and its arguments. Like :func:`spanpoint.serde.fingerprint` they are
content-only: message ids (assigned by LangChain at run time), usage and response metadata
are left out, so a replayed run computes the same keys as the original.

Ids by position, never by value (issue 15 item 8): tool-call ids are minted by providers and
by libraries (``uuid4`` in langgraph-supervisor's hand-backs) and differ on every attempt.
A message's digest holds no id at all; the conversation adds one *linkage digest*: each
distinct tool-call id gets its first-seen position (0, 1, …) and the positions of every
``AIMessage.tool_calls[i].id`` and ``ToolMessage.tool_call_id`` are hashed in order, so which
result answers which call still counts, whatever the ids are.

Every model call hashes the whole conversation, so this module encodes with one JSON pass
instead of the generic recursive walk, memoizes each message's digest (the conversation grows
by appending the same objects), tool definitions, and what identifies the model itself
(:class:`FieldMemo`: per model object, while its fields are unchanged).
Values JSON cannot encode fall back to :func:`spanpoint.serde.canonical`.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from spanpoint import _json, serde
from spanpoint.errors import UnfingerprintableInputError

T = TypeVar("T")


class FieldMemo(Generic[T]):
    """Values derived from an object's fields, memoized per object while its fields hold.

    A chat model's LangSmith params and identity are functions of its fields, and an agent
    hands the same model object to every model call: computing them (``_get_ls_params`` alone
    probes absent pydantic attributes through exceptions) costs more than the rest of a call's
    identity. An entry is used only while it points at the very object and the object's
    ``__dict__`` values are the same objects (or equal ones) as when it was computed, so a
    field that is reassigned is noticed; a container field mutated in place is not (LangChain
    derives these values from scalar fields). Entries leave with their object.
    """

    __slots__ = ("_entries", "_max")

    def __init__(self, max_entries: int = 256) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], tuple[Any, ...], T]] = {}
        self._max = max_entries

    def get(self, obj: Any, compute: Callable[[Any], T]) -> T:
        """``compute(obj)``, or what it returned for ``obj`` with the same fields."""
        fields = getattr(obj, "__dict__", None)
        if not isinstance(fields, dict):
            return compute(obj)
        snapshot = tuple(fields.values())
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            try:
                if entry[1] == snapshot:
                    return entry[2]
            except Exception:  # a field whose == raises: compute again
                pass
        value = compute(obj)
        try:
            ref = weakref.ref(obj, lambda _ref: self._forget(key, _ref))
        except TypeError:  # not weak-referenceable: do not cache
            return value
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[key] = (ref, snapshot, value)
        return value

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:  # not a newer object that got the same id
            self._entries.pop(key, None)


def _default(value: Any) -> Any:
    return serde.canonical(value)


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
)


# Built once, in C (_json.c_json): these fingerprints encode small values many times per
# model call. Identical output to _ENCODER.
_encode = (
    _json.c_json(":", ",", sort_keys=True, ensure_ascii=False, default=_default) or _ENCODER.encode
)


def _json_text(value: Any) -> str:
    try:
        return _encode(value)
    except UnfingerprintableInputError:
        serde.canonical(value)  # raises it again, naming where the value sits
        raise
    except (TypeError, RecursionError):  # unsortable mixed keys, or a value containing itself
        # The generic canonical form sorts by text and marks cycles.
        return json.dumps(serde.canonical(value), sort_keys=True, separators=(",", ":"))


def _json(value: Any) -> bytes:
    return _utf8(_json_text(value))


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: kept exactly, as serde.text_digest does
        return text.encode("utf-8", "surrogatepass")


def digest(value: Any) -> str:
    """sha256 of the canonical JSON of ``value`` (for small, JSON-like inputs)."""
    return hashlib.sha256(_json(value)).hexdigest()


def message_content(message: BaseMessage) -> list[Any]:
    """The content of a message (type, text, name, status, tool calls), JSON-ready; no ids."""
    fields = message.__dict__  # direct reads: pydantic's __getattr__ is slow for absent fields
    tool_calls = fields.get("tool_calls") or ()
    return [
        message.type,
        message.content,
        fields.get("name"),
        fields.get("status"),
        # Tool-call ids come from the model and differ on every real call: a call is
        # identified by its name and arguments; which result answers which call is the
        # conversation's linkage digest (by position, see the module docstring).
        [[call.get("name"), call.get("args")] for call in tool_calls],
    ]


# id(message) -> (weak ref to the message, content, tool_calls, digest). The conversation
# grows by appending and LangGraph hands the same message objects to every later model call,
# so each message is encoded once per run instead of once per call. An entry is used only
# while it points at the very message and that message still holds the same content and
# tool-call objects (HumanInTheLoop, for one, replaces an AIMessage's tool_calls). Entries
# leave with their message, so the cache never keeps a conversation alive.
_MESSAGE_DIGESTS: dict[int, tuple[weakref.ref[BaseMessage], Any, Any, bytes]] = {}
_MAX_CACHED_MESSAGES = 65536


def message_digest(message: BaseMessage) -> bytes:
    """sha256 of :func:`message_content`, memoized per message object."""
    fields = message.__dict__
    content, tool_calls = fields.get("content"), fields.get("tool_calls")
    key = id(message)
    entry = _MESSAGE_DIGESTS.get(key)
    if entry and entry[0]() is message and entry[1] is content and entry[2] is tool_calls:
        return entry[3]
    found = hashlib.sha256(_json(message_content(message))).digest()
    if len(_MESSAGE_DIGESTS) >= _MAX_CACHED_MESSAGES:
        _MESSAGE_DIGESTS.clear()
    try:
        ref = weakref.ref(message, lambda _ref: _forget(key, _ref))
    except TypeError:  # not weak-referenceable: do not cache
        return found
    _MESSAGE_DIGESTS[key] = (ref, content, tool_calls, found)
    return found


def _forget(key: int, ref: weakref.ref[BaseMessage]) -> None:
    entry = _MESSAGE_DIGESTS.get(key)
    if entry is not None and entry[0] is ref:  # not a newer message that got the same id
        _MESSAGE_DIGESTS.pop(key, None)


def model_call_fingerprint(
    model: Any,
    ls_params: Mapping[str, Any],
    *,
    settings: Mapping[str, Any],
    tool_choice: Any,
    response_format: Any,
    tools: Sequence[BaseTool | dict[str, Any]],
    system_message: BaseMessage | None,
    messages: Sequence[BaseMessage],
) -> str:
    """The fingerprint of one model call (see the module docstring for what it covers)."""
    # The JSON list [model type, identifying params, LangSmith params, settings, …]: its
    # first three items depend on the model alone and are encoded once per model.
    params, model_part = _MODEL_IDENTITIES.get(
        model, lambda m: (ls_params, _model_identity(m, ls_params))
    )
    if params is not ls_params and params != ls_params:  # params given by another caller
        model_part = _model_identity(model, ls_params)
    rest = _request_identity(settings, tool_choice, response_format, tools, system_message)
    h = hashlib.sha256(_utf8(f"[{model_part},{rest[1:]}"))
    h.update(b"".join(_conversation_digests(messages)))
    h.update(linkage_digest(messages))
    return h.hexdigest()


def linkage_digest(messages: Sequence[BaseMessage]) -> bytes:
    """Which tool result answers which tool call, by the ids' first-seen positions (0, 1, …)
    in the conversation, never by their values."""
    positions: dict[Any, int] = {}
    sequence: list[int] = []
    for message in messages:
        fields = message.__dict__
        for call in fields.get("tool_calls") or ():
            call_id = call.get("id")
            sequence.append(positions.setdefault(call_id, len(positions)) if call_id else -1)
        call_id = fields.get("tool_call_id")
        if call_id is not None:
            sequence.append(positions.setdefault(call_id, len(positions)))
    if not sequence:
        return b""
    return hashlib.sha256(_utf8(_json_text(sequence))).digest()


def _request_identity(
    settings: Mapping[str, Any],
    tool_choice: Any,
    response_format: Any,
    tools: Sequence[BaseTool | dict[str, Any]],
    system_message: BaseMessage | None,
) -> str:
    """The JSON list [settings, tool choice, response format, tool digests, system prompt].

    The same for every model call of an agent: memoized by the tool digests and the system
    prompt's digest when the rest is simple (no settings, no response format).
    """
    digests = tuple(tool_digest(t) for t in tools)
    key: Any = None
    if not settings and response_format is None and isinstance(tool_choice, str | None):
        system = message_digest(system_message) if system_message is not None else None
        key = (digests, system, tool_choice, settings is None)
        found = _REQUEST_IDENTITIES.get(key)
        if found is not None:
            return found
    text = _json_text(
        [
            settings,
            tool_choice,
            _format_identity(response_format),
            list(digests),
            message_content(system_message) if system_message is not None else None,
        ]
    )
    if key is not None:
        if len(_REQUEST_IDENTITIES) >= 1024:
            _REQUEST_IDENTITIES.clear()
        _REQUEST_IDENTITIES[key] = text
    return text


_REQUEST_IDENTITIES: dict[Any, str] = {}


def _conversation_digests(messages: Sequence[BaseMessage]) -> list[bytes]:
    """:func:`message_digest` of every message; the memo's hit path inlined (every model call
    walks the whole conversation, so this loop is per message of every call).

    Reusing the previous call's conversation as a whole was measured slower: proving in C
    that its messages are still the same objects with the same content costs more per
    message than this loop's memo hits.
    """
    cache_get = _MESSAGE_DIGESTS.get
    digests: list[bytes] = []
    append = digests.append
    for message in messages:
        entry = cache_get(id(message))
        if entry is not None and entry[0]() is message:
            fields = message.__dict__
            if entry[1] is fields.get("content") and entry[2] is fields.get("tool_calls"):
                append(entry[3])
                continue
        append(message_digest(message))
    return digests


def _model_identity(model: Any, ls_params: Mapping[str, Any]) -> str:
    """The model's part of a model call's identity, as the inside of a JSON list."""
    try:
        identifying: Any = dict(model._identifying_params)
    except Exception:  # a model without identifying params is identified by type and params
        identifying = None
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    return _json_text([kind, identifying, dict(ls_params)])[1:-1]


_MODEL_IDENTITIES: FieldMemo[tuple[Mapping[str, Any], str]] = FieldMemo()


def tool_call_fingerprint(name: str, args: Any, tool: BaseTool | None = None) -> str:
    """The fingerprint of one tool call: name, arguments and the tool's definition (what the
    model sees: a changed tool is another call), never its call id (ids differ on every
    attempt; which call it is comes from the task anchor and the ordinal)."""
    return digest([name, args, tool_digest(tool) if isinstance(tool, BaseTool) else None])


_TOOL_DIGESTS: dict[tuple[int, str, str, int], str] = {}


def tool_digest(tool: BaseTool | dict[str, Any]) -> str:
    """The digest of the definition the model sees (name, description, parameter schema)."""
    if not isinstance(tool, BaseTool):
        return digest(tool)
    # Building a JSON schema costs more than the rest of the identity: memoize it per tool
    # object and per (name, description, schema), so a tool edited in place is not stale.
    key = (id(tool), tool.name, tool.description, id(tool.args_schema))
    found = _TOOL_DIGESTS.get(key)
    if found is None:
        if len(_TOOL_DIGESTS) > 4096:
            _TOOL_DIGESTS.clear()
        from langchain_core.utils.function_calling import convert_to_openai_tool

        found = _TOOL_DIGESTS[key] = digest(convert_to_openai_tool(tool))
    return found


def _format_identity(response_format: Any) -> Any:
    if response_format is None:
        return None
    schema = getattr(response_format, "schema", response_format)
    json_schema = getattr(schema, "model_json_schema", None)
    if callable(json_schema):
        schema = json_schema()
    elif isinstance(schema, type):
        schema = f"{schema.__module__}.{schema.__qualname__}"
    return {"strategy": type(response_format).__qualname__, "schema": schema}
