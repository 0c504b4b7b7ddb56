"""What identifies a model call or a tool call: content fingerprints on the hot path.

A model call's fingerprint covers the model's identity and settings, the response format,
the tool definitions, the system prompt and every field of every message a provider is sent
(:func:`message_content`); a tool call's covers the tool name, its arguments, its definition
and the identity of every value injected into it (``spanpoint.calls.spec`` reads those).
Like :func:`spanpoint.serde.fingerprint` they are content-only: message ids (assigned by
LangChain at run time), usage and response metadata are left out, so a replayed run computes
the same keys as the original. :data:`CALL_KEY_VERSION` enters every one.

Ids by position, never by value: tool-call ids are minted by providers and
by libraries (``uuid4`` in langgraph-supervisor's hand-backs) and differ on every attempt.
A message's digest holds no id at all; the conversation adds one *linkage digest*: each
distinct tool-call id gets its first-seen position (0, 1, …) and the positions of every
``AIMessage.tool_calls[i].id`` and ``ToolMessage.tool_call_id`` are hashed in order, so which
result answers which call still counts, whatever the ids are.

Every model call covers the whole conversation, so this module encodes with one JSON pass
instead of the generic recursive walk, memoizes each message's digest, tool definitions, and
what identifies the model itself (:class:`FieldMemo`: per model object, while its fields are
unchanged). Values JSON cannot encode fall back to :func:`spanpoint.serde.canonical`.

The conversation is hashed incrementally, so a long run costs no more per model call than a
short one. An agent's next model call sees the previous call's messages,
the very same objects, plus the new ones; the running sha256 states of the previous call
(message digests and linkage) are kept on its last message and extended by the new messages
only. They are reused only when the prefix holds the very objects hashed before (a C-level
identity check) and no hashed message had a field assigned since: ``BaseMessage``'s
``__setattr__``/``__delattr__`` note every assignment to a hashed message (HumanInTheLoop
replacing ``tool_calls``, a library renaming a message) and the next call hashes from the
per-message memo again. The result is byte-for-byte the fingerprint computed from scratch
(:func:`model_call_fingerprint_from_scratch`, which the tests compare it with).

A container *inside* a field can change in place (``message.content.append(part)``,
``tool_calls[0]["args"][k] = v``, ``additional_kwargs[k] = v``) with no assignment for the
hook to see. So a memoized digest, and a kept running state, is used only while the exact
bytes of every hashed field still match (:func:`_snapshot`: ``marshal``, which is C-fast and
type-strict, so ``1``, ``1.0`` and ``True`` differ). A field marshal cannot write (an object,
a subclass of a builtin) leaves its message unmemoized: it is hashed again at every call.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import operator
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from spanpoint import _json, serde
from spanpoint.capture import is_secret_key
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


#: The version of every model-call and tool-call fingerprint. A key computed under another
#: version never matches: a row committed under it executes again, never replays wrongly.
CALL_KEY_VERSION = 2


def message_content(message: BaseMessage) -> list[Any]:
    """Every field of a message a provider is sent, JSON-ready; no ids.

    Type and ``ChatMessage.role``, content (text or parts), name, status,
    ``additional_kwargs`` (a legacy ``function_call``, provider fields) and tool calls,
    valid and invalid. Left out: the message id, ``response_metadata``, ``usage_metadata``
    and a ``ToolMessage``'s ``artifact`` (never sent), and tool-call ids, which the
    conversation's linkage digest counts by position (see the module docstring).
    """
    fields = message.__dict__  # direct reads: pydantic's __getattr__ is slow for absent fields
    get = fields.get
    return _content(
        message.type,
        get("role"),
        message.content,
        get("name"),
        get("status"),
        get("additional_kwargs"),
        get("tool_calls"),
        get("invalid_tool_calls"),
    )


def _content(
    kind: Any,
    role: Any,
    content: Any,
    name: Any,
    status: Any,
    kwargs: Any,
    tool_calls: Any,
    invalid: Any,
) -> list[Any]:
    return [
        kind,
        role,
        content,
        name,
        status,
        _provider_kwargs(kwargs),
        # Tool-call ids come from the model and differ on every real call: a call is
        # identified by its name and arguments; which result answers which call is the
        # conversation's linkage digest (by position, see the module docstring).
        [[call.get("name"), call.get("args")] for call in tool_calls or ()],
        [[call.get("name"), call.get("args"), call.get("error")] for call in invalid or ()] or None,
    ]


def _digest_of_read(message: BaseMessage, read: bytes) -> bytes:
    """The digest of ``message`` as it was when its hashed fields were ``read``
    (:func:`_snapshot`), whatever it holds now: equal to :func:`message_content`'s while it
    still holds them."""
    kind, role, content, name, status, kwargs, calls, invalid, _ = marshal.loads(read)
    if kind is None:  # not a field of this class: its type is the class's own
        kind = message.type
    found = _content(kind, role, content, name, status, kwargs, calls, invalid)
    return hashlib.sha256(_json(found)).digest()


def _provider_kwargs(kwargs: Any) -> Any:
    """``additional_kwargs`` as a provider is sent them, without the tool-call ids that a
    provider's raw ``tool_calls`` repeat (counted by position, as the parsed ones)."""
    if not kwargs:
        return None
    calls = kwargs.get("tool_calls") if isinstance(kwargs, Mapping) else None
    if isinstance(calls, list) and calls:
        kwargs = {
            **kwargs,
            "tool_calls": [
                {k: v for k, v in call.items() if k != "id"} if isinstance(call, Mapping) else call
                for call in calls
            ],
        }
    return kwargs


# id(message) -> (weak ref to the message, snapshot of its hashed fields, digest). The
# conversation grows by appending and LangGraph hands the same message objects to every later
# model call, so each message is encoded once per run instead of once per call. An entry is
# used only while it points at the very message and the bytes of its hashed fields are the
# ones hashed (:func:`_snapshot`); an assignment to a field drops it at once (the edit hook:
# HumanInTheLoop, for one, replaces an AIMessage's tool_calls). Entries leave with their
# message, so the cache never keeps a conversation alive.
_MESSAGE_DIGESTS: dict[int, tuple[weakref.ref[BaseMessage], bytes, bytes]] = {}
_MAX_CACHED_MESSAGES = 65536


def _hashed_fields(fields: Mapping[str, Any]) -> tuple[Any, ...]:
    """The fields a model call's fingerprint reads, from a message's ``__dict__``."""
    get = fields.get
    return (
        get("type"),
        get("role"),
        get("content"),
        get("name"),
        get("status"),
        get("additional_kwargs"),
        get("tool_calls"),
        get("invalid_tool_calls"),
        get("tool_call_id"),  # not in the digest: the conversation's linkage reads it
    )


def _snapshot(value: Any) -> bytes | None:
    """The exact bytes of ``value`` (hashed fields, or a list of them), or None when marshal
    cannot write it (an object, a subclass of a builtin, nesting too deep): then nothing
    derived from it is memoized, and it is hashed again at every call."""
    try:
        return marshal.dumps(value, _MARSHAL_VERSION)
    except ValueError:
        return None


#: Version 0 writes a value's content only: later versions mark shared objects by reference
#: count and strings by whether they are interned, so equal content could differ in bytes.
_MARSHAL_VERSION = 0


def message_digest(message: BaseMessage, read: bytes | None = None) -> bytes:
    """sha256 of :func:`message_content`, memoized per message object while the bytes of its
    hashed fields stay the same (see the module docstring). ``read``: those bytes as the
    caller read them; the digest is then the one of the content they say."""
    key = id(message)
    snapshot = read if read is not None else _snapshot(_hashed_fields(message.__dict__))
    entry = _MESSAGE_DIGESTS.get(key)
    if entry and snapshot is not None and entry[0]() is message and entry[1] == snapshot:
        return entry[2]
    if read is not None:
        found = _digest_of_read(message, read)
    else:
        found = hashlib.sha256(_json(message_content(message))).digest()
    if snapshot is None:
        return found  # a field marshal cannot write: never memoized
    if BaseMessage.__setattr__ is not _HOOK[0]:
        note_message_edits()
    kind = type(message)
    if kind.__setattr__ is not _HOOK[0] or kind.__delattr__ is not _HOOK[1]:
        return found  # a class whose assignments the edit hook cannot see: never memoized
    if len(_MESSAGE_DIGESTS) >= _MAX_CACHED_MESSAGES:
        # The edit hook notes only messages in this memo: conversations hashed from the
        # messages forgotten here could no longer see their edits.
        _CONVERSATIONS.clear()
        _MESSAGE_DIGESTS.clear()
    try:
        ref = weakref.ref(message, lambda _ref: _forget(key, _ref))
    except TypeError:  # not weak-referenceable: do not cache
        return found
    _MESSAGE_DIGESTS[key] = (ref, snapshot, found)
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
    stored_as: str = "model_response",
    snapshots: list[bytes] | None = None,
) -> str:
    """The fingerprint of one model call (see the module docstring for what it covers).

    ``stored_as`` names the form its output is stored in (``spanpoint.calls.spec``): two
    forms of one call's output are two checkpoints, never one read as the other. A list
    given as ``snapshots`` receives the bytes of each message's hashed fields as this call
    read them (:func:`_snapshot`; nothing when one cannot be written), for
    :func:`message_digests` to find the digests this key covers without reading them again.
    """
    # The JSON list [model type, identifying params, LangSmith params, settings, …]: its
    # first three items depend on the model alone and are encoded once per model.
    params, model_part = _MODEL_IDENTITIES.get(
        model, lambda m: (ls_params, _model_identity(m, ls_params))
    )
    if params is not ls_params and params != ls_params:  # params given by another caller
        model_part = _model_identity(model, ls_params)
    rest = _request_identity(
        stored_as, settings, tool_choice, response_format, tools, system_message
    )
    header = f"[{model_part},{rest[1:]}"
    if BaseMessage.__setattr__ is not _HOOK[0]:  # the first call, or replaced since
        note_message_edits()
    if type(messages) is list and messages:
        return _incremental(header, messages, snapshots)
    return _from_scratch(header, messages)


def model_call_fingerprint_from_scratch(
    model: Any,
    ls_params: Mapping[str, Any],
    *,
    settings: Mapping[str, Any],
    tool_choice: Any,
    response_format: Any,
    tools: Sequence[BaseTool | dict[str, Any]],
    system_message: BaseMessage | None,
    messages: Sequence[BaseMessage],
    stored_as: str = "model_response",
) -> str:
    """:func:`model_call_fingerprint` with every message and the model encoded and hashed
    again (no message memo, no running state): the reference the incremental hashing must
    equal, byte for byte."""
    model_part = _model_identity(model, ls_params)
    digests = [message_digest_from_scratch(m) for m in messages]
    rest = _json_text(
        [
            CALL_KEY_VERSION,
            stored_as,
            settings,
            tool_choice,
            _format_identity(response_format),
            [tool_digest(t) for t in tools],
            message_content(system_message) if system_message is not None else None,
        ]
    )
    h = hashlib.sha256(_utf8(f"[{model_part},{rest[1:]}"))
    h.update(b"".join(digests))
    h.update(linkage_digest(messages))
    return h.hexdigest()


def message_digest_from_scratch(message: BaseMessage) -> bytes:
    """:func:`message_digest` with no memo: the reference it must equal."""
    return hashlib.sha256(_json(message_content(message))).digest()


def _from_scratch(header: str, messages: Sequence[BaseMessage]) -> str:
    h = hashlib.sha256(_utf8(header))
    h.update(b"".join(message_digests(messages)))
    h.update(linkage_digest(messages))
    return h.hexdigest()


# --- the conversation, hashed incrementally ----------------------------------------------


class _Conversation:
    """What one model call hashed of its conversation, kept on its last message.

    ``hashed``: sha256 of the header and every message digest, not finalized; ``linkage``:
    sha256 of the linkage sequence's JSON without its closing bracket, ``items`` entries long;
    ``positions``: first-seen position of each tool-call id (shared with the first
    conversation that extends this one, which only adds ids at positions ``>= ids``).
    ``prefix`` holds the messages before the last one (strongly: their ids must not be reused
    while this is kept); the last one is weak, and this entry leaves with it. ``snapshot``:
    the marshalled hashed fields of the ``length`` messages (:func:`_snapshot` of each), one
    after another, which a later call must find again before it extends this state.
    """

    __slots__ = (
        "edits", "hashed", "header", "ids", "items", "last", "length", "linkage", "positions",
        "prefix", "shared", "snapshot",
    )  # fmt: skip

    def __init__(
        self,
        header: str,
        messages: list[BaseMessage],
        edits: int,
        hashed: Any,
        linkage: Any,
        items: int,
        positions: dict[Any, int],
        snapshot: bytes | None,
    ) -> None:
        self.header = header
        self.snapshot = snapshot
        self.prefix = messages[:-1]
        self.length = len(messages)
        self.last: weakref.ref[BaseMessage] | None = None
        self.edits = edits
        self.hashed = hashed
        self.linkage = linkage
        self.items = items
        self.positions = positions
        self.ids = len(positions)
        self.shared = False  # whether an extension took ``positions`` to add to it

    def fingerprint(self) -> str:
        h = self.hashed.copy()
        if self.items:
            link = self.linkage.copy()
            link.update(b"]")
            h.update(link.digest())
        return h.hexdigest()  # type: ignore[no-any-return]


# id(last message) -> its conversation. Bounded: each entry holds its prefix's references.
_CONVERSATIONS: dict[int, _Conversation] = {}
_MAX_CONVERSATIONS = 64
#: How far back from the end the previous call's last message is looked for (the new
#: messages of one step: an AI turn, its tool results, what middleware added).
_LOOK_BACK = 16
# Reentrant: hashing a new message may install the hook again (a library replaced it).
_CONVERSATION_LOCK = threading.RLock()
#: Assignments to the fields of hashed messages so far (the edit hook counts them).
_EDITS = [0]
_is = operator.is_


def _incremental(
    header: str, messages: list[BaseMessage], snapshots: list[bytes] | None = None
) -> str:
    """:func:`_from_scratch`'s fingerprint, hashing only the messages no kept conversation
    covers (see the module docstring)."""
    edits = _EDITS[0]
    n = len(messages)
    base: _Conversation | None = None
    get = _CONVERSATIONS.get
    # The bytes of every message's hashed fields, one after another: a kept state's
    # messages are unchanged exactly when their bytes begin these (each message's bytes
    # delimit themselves). None when one cannot be written.
    dumps, fields_of = marshal.dumps, _hashed_fields
    try:
        snaps: list[bytes] | None = [
            dumps(fields_of(m.__dict__), _MARSHAL_VERSION) for m in messages
        ]
    except ValueError:
        snaps = None
    whole = b"".join(snaps) if snaps is not None else None
    if snaps is not None and snapshots is not None:
        snapshots.extend(snaps)
    for j in range(n - 1, max(-1, n - 1 - _LOOK_BACK), -1):
        found = get(id(messages[j]))
        if (
            found is not None
            and found.length == j + 1
            and found.edits == edits
            and found.last is not None
            and found.last() is messages[j]
            and found.header == header
            and all(map(_is, found.prefix, messages))
            # Nothing inside a hashed field changed in place since (module docstring).
            and whole is not None
            and whole.startswith(found.snapshot)
        ):
            base = found
            break
    if base is not None and base.length == n:
        return base.fingerprint()  # the same conversation again (a retry)
    with _CONVERSATION_LOCK:
        if base is None:
            start, items = 0, 0
            hashed = hashlib.sha256(_utf8(header))
            linkage = hashlib.sha256(b"[")
            positions: dict[Any, int] = {}
        else:
            start, items = base.length, base.items
            hashed, linkage = base.hashed.copy(), base.linkage.copy()
            if base.shared:  # another extension adds to these: keep only base's own ids
                positions = {k: v for k, v in base.positions.items() if v < base.ids}
            else:
                positions, base.shared = base.positions, True
        new = messages[start:]
        hashed.update(b"".join(message_digests(new, snaps[start:] if snaps else None)))
        sequence: list[int] = []
        for message in new:
            fields = message.__dict__
            for call in fields.get("tool_calls") or ():
                call_id = call.get("id")
                sequence.append(positions.setdefault(call_id, len(positions)) if call_id else -1)
            call_id = fields.get("tool_call_id")
            if call_id is not None:
                sequence.append(positions.setdefault(call_id, len(positions)))
        if sequence:
            text = _json_text(sequence)[1:-1]
            linkage.update(_utf8(f",{text}" if items else text))
            items += len(sequence)
        state = _Conversation(header, messages, edits, hashed, linkage, items, positions, whole)
        result = state.fingerprint()
        if whole is not None and _EDITS[0] == edits and all(map(_noted, new)):
            _keep(state, messages[-1])
            if base is not None:
                # Superseded: the conversation goes on from the new state. A kept state holds
                # its whole prefix, and many of them over a long conversation are references
                # for every full garbage collection to walk (quadratic in the run); a second
                # branch from this prefix hashes from the per-message memo instead.
                _forget_state(base)
    return result


def _forget_state(state: _Conversation) -> None:
    last = state.last() if state.last is not None else None
    if last is not None and _CONVERSATIONS.get(id(last)) is state:
        del _CONVERSATIONS[id(last)]


def _noted(message: BaseMessage) -> bool:
    """Whether an edit of ``message`` would be noted: memoized, and of a class whose
    attribute assignment is the hook's."""
    kind = type(message)
    return (
        id(message) in _MESSAGE_DIGESTS
        and kind.__setattr__ is _HOOK[0]
        and kind.__delattr__ is _HOOK[1]
    )


def _keep(state: _Conversation, last: BaseMessage) -> None:
    key = id(last)
    try:
        # The callback holds the key only: a state it held would be a cycle (state -> ref
        # -> callback -> state) that only the cyclic collector frees, with its prefix.
        state.last = weakref.ref(last, lambda ref: _drop(key, ref))
    except TypeError:  # not weak-referenceable: not kept
        return
    _CONVERSATIONS.pop(key, None)
    _CONVERSATIONS[key] = state
    while len(_CONVERSATIONS) > _MAX_CONVERSATIONS:
        _CONVERSATIONS.pop(next(iter(_CONVERSATIONS)), None)


def _drop(key: int, ref: weakref.ref[BaseMessage]) -> None:
    found = _CONVERSATIONS.get(key)
    if found is not None and found.last is ref:  # not a newer conversation ending on that id
        _CONVERSATIONS.pop(key, None)


#: Fields that never enter a fingerprint: assigning them is not an edit (LangChain sets a
#: generated message's id and metadata after the fact).
_NOT_HASHED = frozenset({"id", "response_metadata", "usage_metadata"})


def _edited(message: Any, name: str) -> None:
    """A hashed message's field was assigned: forget its digest and every kept conversation's
    running state (the next model calls hash from the per-message memo again)."""
    if name in _NOT_HASHED:
        return
    key = id(message)
    entry = _MESSAGE_DIGESTS.get(key)
    if entry is None or entry[0]() is not message:
        return
    _MESSAGE_DIGESTS.pop(key, None)
    _EDITS[0] += 1


def note_message_edits() -> None:
    """Install the edit hook on ``BaseMessage``: done by the first model-call fingerprint.

    ``__setattr__``/``__delattr__`` run what was there (pydantic's) first; the hook then
    notes an assignment to a message this module hashed. Were another library to replace
    them later, the next fingerprint installs the hook again around theirs, and forgets every
    digest and running state kept meanwhile (an edit in between went unnoticed).
    """
    with _CONVERSATION_LOCK:
        if BaseMessage.__setattr__ is _HOOK[0] and BaseMessage.__delattr__ is _HOOK[1]:
            return
        hooks = _hooks(BaseMessage.__setattr__, BaseMessage.__delattr__)
        BaseMessage.__setattr__, BaseMessage.__delattr__ = hooks  # type: ignore[method-assign,assignment]
        _HOOK[:] = hooks
        _CONVERSATIONS.clear()
        _MESSAGE_DIGESTS.clear()
        _EDITS[0] += 1


def _hooks(
    set_original: Callable[[Any, str, Any], None], del_original: Callable[[Any, str], None]
) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    # Each installation wraps what it found (its own closure): a library that wrapped ours
    # is called by the new hook and calls the old one, never a loop.
    def __setattr__(self: Any, name: str, value: Any) -> None:
        try:
            set_original(self, name, value)
        finally:
            _edited(self, name)

    def __delattr__(self: Any, name: str) -> None:
        try:
            del_original(self, name)
        finally:
            _edited(self, name)

    return __setattr__, __delattr__


#: The installed (__setattr__, __delattr__) hooks.
_HOOK: list[Any] = [None, None]


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
    stored_as: str,
    settings: Mapping[str, Any],
    tool_choice: Any,
    response_format: Any,
    tools: Sequence[BaseTool | dict[str, Any]],
    system_message: BaseMessage | None,
) -> str:
    """The JSON list [key version, stored form, settings, tool choice, response format, tool
    digests, system prompt].

    The same for every model call of an agent: memoized by the tool digests and the system
    prompt's digest when the rest is simple (no settings, no response format).
    """
    digests = tuple(tool_digest(t) for t in tools)
    key: Any = None
    if not settings and response_format is None and isinstance(tool_choice, str | None):
        system = message_digest(system_message) if system_message is not None else None
        key = (stored_as, digests, system, tool_choice, settings is None)
        found = _REQUEST_IDENTITIES.get(key)
        if found is not None:
            return found
    text = _json_text(
        [
            CALL_KEY_VERSION,
            stored_as,
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


def message_digests(
    messages: Sequence[BaseMessage], snapshots: Sequence[bytes | None] | None = None
) -> list[bytes]:
    """:func:`message_digest` of every message; the memo's hit path inlined.

    Called with a conversation's new messages (:func:`_incremental`), with all of them
    when no kept running state covers a prefix, and with the messages an input view shows.
    A hit costs one ``marshal`` of the message's hashed fields, compared with the bytes
    hashed (see the module docstring); ``snapshots``, when given, are those bytes already
    read, one per message (a model call's, :func:`model_call_fingerprint`; None where not
    read): each digest is then the one of the content those bytes say, also for a message
    changed since.
    """
    cache_get = _MESSAGE_DIGESTS.get
    digests: list[bytes] = []
    append = digests.append
    dumps, fields_of = marshal.dumps, _hashed_fields
    for i, message in enumerate(messages):
        read = snapshots[i] if snapshots is not None else None
        entry = cache_get(id(message))
        if entry is not None and entry[0]() is message:
            if read is not None:
                same = read == entry[1]
            else:
                try:
                    same = dumps(fields_of(message.__dict__), _MARSHAL_VERSION) == entry[1]
                except ValueError:
                    same = False
            if same:
                append(entry[2])
                continue
        append(message_digest(message, read))
    return digests


def _model_identity(model: Any, ls_params: Mapping[str, Any]) -> str:
    """The model's part of a model call's identity, as the inside of a JSON list: its type,
    identifying params, LangSmith params and how it was constructed."""
    try:
        identifying: Any = dict(model._identifying_params)
    except Exception:  # a model without identifying params is identified by type and params
        identifying = None
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    parts: list[Any] = [kind, identifying, dict(ls_params)]
    constructed = _constructor(model)
    if constructed is not None:
        parts.append(constructed)
    return _json_text(parts)[1:-1]


def _constructor(model: Any) -> Any:
    """What a LangChain-serializable model was constructed with (``dumpd``), or None.

    Identifying params leave out where a request goes and what shape the reply takes: a
    ``base_url`` (another server, another deployment), ``default_headers`` and
    ``default_query`` (an ``api-version``), ``use_responses_api`` and ``output_version``.
    The constructor arguments hold them all. Secrets are ``dumpd``'s ids, never values, and a
    header that names a credential is left out (rotating a key changes no answer); an
    argument ``dumpd`` cannot write keeps its type, not its ``repr`` (an address that differs
    in every process).
    """
    try:
        if not model.is_lc_serializable():
            return None
        from langchain_core.load import dumpd

        return _stable(dumpd(model))
    except Exception:  # a model dumpd cannot describe is identified by its params alone
        return None


def _stable(value: Any) -> Any:
    """``dumpd``'s output with nothing that differs between processes or credentials."""
    if isinstance(value, Mapping):
        if value.get("type") == "not_implemented" and "id" in value:
            return {"not_implemented": value["id"]}
        return {
            str(k): _headers(v) if k == "default_headers" and isinstance(v, Mapping) else _stable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_stable(v) for v in value]
    return value


def _headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """Request headers without the ones that carry a credential."""
    return {
        str(k): v
        for k, v in headers.items()
        if not is_secret_key(str(k)) and str(k).lower() not in _CREDENTIAL_HEADERS
    }


#: Request headers that carry a credential whatever the capture policy's words say.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})


_MODEL_IDENTITIES: FieldMemo[tuple[Mapping[str, Any], str]] = FieldMemo()


def tool_call_fingerprint(
    name: str, args: Any, tool: BaseTool | None = None, injected: Mapping[str, Any] | None = None
) -> str:
    """The fingerprint of one tool call: name, arguments, the tool's definition (what the
    model sees: a changed tool is another call) and ``injected``, the identity of every
    value LangChain injects into the tool (``spanpoint.calls.spec`` reads them). The call id
    is in it only where the tool declares it an input; otherwise which call it is comes from
    the task anchor and the ordinal."""
    definition = tool_digest(tool) if isinstance(tool, BaseTool) else None
    # The arguments stay at [1]: an unreadable one is named by that path in the warning.
    return digest([name, args, definition, injected or None, CALL_KEY_VERSION])


def state_identity(value: Any) -> Any:
    """A graph state, or a part of it, as identity: each list of messages by its messages'
    content digests and its linkage digest (no run-time ids, as in a model call), a mapping or
    list item by item, anything else as it is (:func:`digest` encodes it, or says why not)."""
    if isinstance(value, BaseMessage):
        return {"__message__": message_digest(value).hex()}
    if (
        isinstance(value, list)
        and value
        and isinstance(value[0], BaseMessage)
        and all(isinstance(m, BaseMessage) for m in value)
    ):
        h = hashlib.sha256(b"".join(message_digests(value)))
        h.update(linkage_digest(value))
        return {"__messages__": h.hexdigest()}
    if isinstance(value, dict):
        return {k: state_identity(v) for k, v in value.items()}
    if type(value) is list:
        return [state_identity(v) for v in value]
    return value


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
