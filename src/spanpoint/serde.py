"""Serialization of boundary outputs and fingerprints of boundary inputs.

Outputs are *written* with LangGraph's own ``JsonPlusSerializer`` (msgpack; LangChain
messages, pydantic models and dataclasses) with the pickle fallback off. They are *read* by
spanpoint's own reviver, through an explicit allow list: a stored row is data written by
whoever can write the store, so a type it names is looked up in the list before anything is
imported or called, and anything else is refused (:class:`UntrustedCheckpointError`; the
boundary then executes again). See "Threat model" in docs/design-notes.md.

Inputs are never stored: a boundary's identity uses a sha256 *fingerprint* of a typed,
canonical, content-only view of its arguments. Every value carries its type in that view, so
two different inputs cannot share a fingerprint by construction; a value whose state cannot
be read faithfully is :class:`UnfingerprintableInputError` (the boundary is then not
cacheable), never a fingerprint of its type name. Volatile values that LangChain assigns at
run time (message ids, run ids, timestamps) are left out of that view, so that a replayed run
computes the same keys as the original one.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib
import re
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import PurePath
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import TYPE_CHECKING, Any
from uuid import UUID

import ormsgpack

from spanpoint import _json
from spanpoint.errors import (
    CorruptCheckpointError,
    SerializationError,
    UnfingerprintableInputError,
    UntrustedCheckpointError,
)

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from pydantic import BaseModel

# For import time: LangGraph's serializer, LangChain's messages and pydantic are not imported
# with this module (every spanpoint import reaches it, the CLI too: issue 18 wants its
# commands free of LangChain and LangGraph). The writer is built at the first dumps; the
# classes are looked up only once their modules are loaded (_loaded_class).
_SERDE: JsonPlusSerializer | None = None


def _writer() -> JsonPlusSerializer:
    global _SERDE
    if _SERDE is None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # for import time

        _SERDE = JsonPlusSerializer(pickle_fallback=False)
    return _SERDE


#: module -> class, once that module is imported (see _loaded_class).
_CLASSES: dict[str, type] = {}


def _loaded_class(module: str, name: str) -> type | None:
    """``module.name`` if that module is already imported, else None.

    A value can only be an instance of a class whose module was imported, so ``isinstance``
    against a class that is not loaded yet is False without importing anything: fingerprints
    need not import LangChain or pydantic to tell that a value is neither.
    """
    cls = _CLASSES.get(module)
    if cls is None:
        loaded = sys.modules.get(module)
        cls = getattr(loaded, name, None) if loaded is not None else None
        if not isinstance(cls, type):
            return None  # not imported, or still being imported
        _CLASSES[module] = cls
    return cls


def _is_message(value: Any) -> bool:
    cls = _loaded_class("langchain_core.messages.base", "BaseMessage")
    return cls is not None and isinstance(value, cls)


def _is_model(value: Any) -> bool:
    cls = _loaded_class("pydantic.main", "BaseModel")
    return cls is not None and isinstance(value, cls)


#: Fields of a LangChain message that identify its content. ``id`` (assigned at run time),
#: ``response_metadata`` (timestamps, request ids) and ``usage_metadata`` are not part of it.
_MESSAGE_FIELDS = ("content", "name", "tool_call_id", "status")

# --- the allow list -------------------------------------------------------------------------

#: What a checkpoint may name without configuration: (module, name) as LangGraph's writer
#: records them. JSON-like values (str, int, float, bool, None, list, dict, bytes) need no
#: entry: msgpack carries them without naming any type.
_DEFAULT_ALLOWED: dict[str, tuple[str, ...]] = {
    "datetime": ("datetime", "date", "time", "timedelta", "timezone"),
    "uuid": ("UUID",),
    "decimal": ("Decimal",),
    "builtins": ("set", "frozenset"),
    "collections": ("deque",),
    "ipaddress": (
        "IPv4Address",
        "IPv4Interface",
        "IPv4Network",
        "IPv6Address",
        "IPv6Interface",
        "IPv6Network",
    ),
    "pathlib": ("Path", "PosixPath", "WindowsPath"),
    "zoneinfo": ("ZoneInfo",),
    "re": ("compile",),
    "langchain_core.messages.human": ("HumanMessage", "HumanMessageChunk"),
    "langchain_core.messages.ai": ("AIMessage", "AIMessageChunk"),
    "langchain_core.messages.system": ("SystemMessage", "SystemMessageChunk"),
    "langchain_core.messages.chat": ("ChatMessage", "ChatMessageChunk"),
    "langchain_core.messages.tool": ("ToolMessage", "ToolMessageChunk"),
    "langchain_core.messages.function": ("FunctionMessage", "FunctionMessageChunk"),
    "langchain_core.messages.modifier": ("RemoveMessage",),
    "langchain_core.documents.base": ("Document",),
    "langgraph.types": ("Send", "Command", "Interrupt", "Overwrite", "TimeoutPolicy"),
    "langgraph.store.base": ("Item",),
    # spanpoint's own frozen value types (a step may return a graph call's result); named
    # here as data, imported only when a checkpoint holds one.
    "spanpoint.graph.results": ("RunResult", "InterruptInfo"),
    # Where they lived before the layout of issue 14: checkpoints written then name it.
    "spanpoint.graph_results": ("RunResult", "InterruptInfo"),
}
#: Modules that moved (old path -> new path): a checkpoint naming the old path still reads.
_MOVED = {"spanpoint.graph_results": "spanpoint.graph.results"}
#: Class methods a checkpoint may name (LangGraph writes datetimes as ``fromisoformat``).
_ALLOWED_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})


def _default_table() -> dict[tuple[str, str], Any]:
    return {(mod, name): None for mod, names in _DEFAULT_ALLOWED.items() for name in names}


#: (module, name) -> the class or callable, or None until first imported. Only entries of
#: this table are ever imported while reading a checkpoint. Replaced whole, never mutated
#: in place (but for caching an import), so a concurrent reader never sees it half-built.
_allowed: dict[tuple[str, str], Any] = _default_table()
_user_types: tuple[type | str, ...] = ()


def set_allowed_types(types: Iterable[type | str]) -> tuple[type | str, ...]:
    """Replace the user's types that checkpoints may name (``configure(allowed_types=...)``).

    Each entry is a class (a dataclass, a pydantic model, an enum, a namedtuple…) or a
    ``"package.module:Name"`` string, imported on first use. Returns the normalized tuple.
    """
    table = _default_table()
    normalized: list[type | str] = []
    for entry in types:
        if isinstance(entry, type):
            table[(entry.__module__, entry.__name__)] = entry
        elif isinstance(entry, str) and entry.count(":") == 1 and all(entry.split(":")):
            module, name = entry.split(":")
            table[(module, name)] = None
        else:
            raise ValueError(
                f"allowed_types entries must be classes or 'package.module:Name' strings, "
                f"not {entry!r}"
            )
        normalized.append(entry)
    global _allowed, _user_types
    _allowed, _user_types = table, tuple(normalized)
    return _user_types


def _refuse(module: str, name: str) -> UntrustedCheckpointError:
    return UntrustedCheckpointError(
        f"refusing to load {module}.{name} from a checkpoint: it is not an allowed type, so "
        "nothing was imported or called. If it is your own type, allow it with "
        f"spanpoint.configure(allowed_types=[{module}.{name}]) (or "
        f"'{module}:{name}'); otherwise the row was not written by spanpoint"
    )


def _target(module: Any, name: Any) -> Any:
    """The allowed class or callable for (module, name); refused before any import."""
    key = (module, name)
    if not (isinstance(module, str) and isinstance(name, str)) or key not in _allowed:
        raise _refuse(str(module), str(name))
    found = _allowed[key]
    if found is None:
        found = getattr(importlib.import_module(_MOVED.get(module, module)), name)
        _allowed[key] = found
    return found


# --- reading a checkpoint -------------------------------------------------------------------

# The msgpack extension codes LangGraph's writer uses (the reader below accepts no others).
_EXT_ONE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD = 0, 1, 2, 3
_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2, _EXT_NUMPY = 4, 5, 6
_UNPACK = ormsgpack.OPT_NON_STR_KEYS
#: Every msgpack extension header starts with one of these bytes: a payload with none of them
#: names no type, and is read without the reviver.
_EXT_HEADER = re.compile(rb"[\xc7-\xc9\xd4-\xd8]")
#: The extensions that name a type (or a method) and its arguments.
_CALL_CODES = frozenset(
    (_EXT_ONE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD, _EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2)
)
_SEQUENCES = (list, tuple)


class _Reviver:
    """The ormsgpack ``ext_hook`` of one read: rebuilds allowed types, refuses the rest.

    ormsgpack replaces an exception raised in the hook with a bare ``ValueError``, so the
    first refusal is kept here and raised by :func:`loads`.
    """

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: CorruptCheckpointError | None = None

    def __call__(self, code: int, data: bytes) -> Any:
        try:
            return self._revive(code, data)
        except CorruptCheckpointError as exc:
            self.error = self.error or exc
            raise
        except Exception as exc:
            self.error = self.error or CorruptCheckpointError(
                f"cannot rebuild a stored value (extension {code}): {exc}"
            )
            raise

    def _revive(self, code: int, data: bytes) -> Any:
        # Nested values are rebuilt (through this same allow list) before the one that holds
        # them; the type this payload names is checked before it is imported or called.
        payload = ormsgpack.unpackb(data, ext_hook=self, option=_UNPACK)
        if code == _EXT_NUMPY:
            return _numpy_array(payload)
        if code not in _CALL_CODES or not isinstance(payload, _SEQUENCES) or len(payload) < 3:
            raise UntrustedCheckpointError(
                f"refusing a stored value with msgpack extension {code}: spanpoint never "
                "writes it that way"
            )
        module, name, args = payload[0], payload[1], payload[2]
        if code == _EXT_METHOD:
            method = payload[3] if len(payload) > 3 else None
            if (module, name, method) not in _ALLOWED_METHODS:
                raise _refuse(str(module), f"{name}.{method}")
            return getattr(_target(module, name), method)(args)
        # The imported allowed target, looked up once (a replay revives every message of a
        # graph's state this way); anything else goes through _target, which refuses.
        target = _allowed.get((module, name)) if type(module) is str and type(name) is str else None
        if target is None:
            target = _target(module, name)
        if code == _EXT_ONE_ARG:
            return target(args)
        if code == _EXT_POS_ARGS:
            if (module, name) == ("langgraph.types", "Send") and len(args) == 3:
                return target(args[0], args[1], timeout=args[2])
            return target(*args)
        if not isinstance(args, dict):
            raise CorruptCheckpointError(f"a stored {module}.{name} has no field mapping")
        if code == _EXT_KW_ARGS:
            return target(**args)
        try:
            return target(**args)
        except Exception as exc:
            from pydantic import ValidationError  # loaded already: target is a pydantic model

            if not isinstance(exc, ValidationError):
                raise
            # The writer dumped this model; if its validators reject their own output, keep
            # exactly the stored fields rather than lose the value (LangGraph does the same).
            build = target.model_construct if code == _EXT_PYDANTIC_V2 else target.construct
            return build(**args)


def _numpy_array(payload: Any) -> Any:
    if ("numpy", "ndarray") not in _allowed:
        raise _refuse("numpy", "ndarray")
    import numpy  # only when a checkpoint holds an array and arrays are allowed

    dtype_str, shape, order, buf = payload
    dtype = numpy.dtype(dtype_str)
    if dtype.hasobject:
        raise _refuse("numpy", f"ndarray of dtype {dtype_str}")
    return numpy.frombuffer(buf, dtype=dtype).reshape(shape, order=order)


def loads(type_tag: str, data: bytes) -> Any:
    """Read what :func:`dumps` produced, through the allow list.

    :class:`UntrustedCheckpointError` for a type or format that is not allowed (refused
    before any import or call); :class:`CorruptCheckpointError` for data that cannot be read.
    """
    if type_tag == "msgpack":
        if _EXT_HEADER.search(data) is None:
            try:
                return ormsgpack.unpackb(data, option=_UNPACK)
            except Exception as exc:
                raise CorruptCheckpointError(f"cannot decode a msgpack checkpoint: {exc}") from exc
        reviver = _Reviver()
        try:
            return ormsgpack.unpackb(data, ext_hook=reviver, option=_UNPACK)
        except Exception as exc:
            if reviver.error is not None:
                raise reviver.error from None
            raise CorruptCheckpointError(f"cannot decode a msgpack checkpoint: {exc}") from exc
    if type_tag == "null" and not data:
        return None
    if type_tag == "bytes":
        return bytes(data)
    if type_tag == "bytearray":
        return bytearray(data)
    # "pickle" runs code by design, and "json" revives LangChain constructors by name:
    # spanpoint writes neither, so such a row was written by someone else.
    raise UntrustedCheckpointError(
        f"refusing to load a {type_tag!r} checkpoint: spanpoint writes only msgpack, null, "
        "bytes and bytearray rows, so this row was not written by spanpoint"
    )


def dumps(value: Any) -> tuple[str, bytes]:
    """Serialize ``value`` to ``(type tag, bytes)``; :class:`SerializationError` if impossible,
    or if it would not read back exactly (then the output is not committed)."""
    try:
        tag, data = _writer().dumps_typed(value)
    except Exception as exc:  # ormsgpack raises its own types, and TypeError for cycles
        raise SerializationError(
            f"cannot serialize a {type(value).__name__} output: {exc}. Return JSON-like data, "
            "LangChain messages, pydantic models or dataclasses from a boundary, or mark it "
            "replay=False"
        ) from exc
    # LangGraph's writer replaces a lone surrogate with "?": a lossy copy must not replay.
    if tag == "msgpack" and b"?" in data and _has_lone_surrogate(value, 0):
        raise SerializationError(
            f"cannot store a {type(value).__name__} output exactly: it contains a lone "
            "surrogate (a str that is not valid Unicode), which would read back as '?'"
        )
    return tag, data


def _has_lone_surrogate(value: Any, depth: int) -> bool:
    if isinstance(value, str):
        if value.isascii():
            return False
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    if depth > 64:
        return False
    depth += 1
    if isinstance(value, Mapping):
        return any(
            _has_lone_surrogate(k, depth) or _has_lone_surrogate(v, depth) for k, v in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset | deque):
        return any(_has_lone_surrogate(v, depth) for v in value)
    if _is_model(value):
        return _has_lone_surrogate(value.model_dump(), depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(
            _has_lone_surrogate(getattr(value, f.name), depth) for f in dataclasses.fields(value)
        )
    return False


# --- fingerprints ---------------------------------------------------------------------------
#
# The canonical view is JSON in which every JSON object is a one-key tag chosen here: a user's
# mapping is always wrapped ({"__map__": …}), so no user value can spell a tag. JSON itself
# keeps str, int, float (1 vs 1.0; NaN and Infinity are not strings), bool and null apart; every
# other type is a tag that names it. Hence two inputs that differ in value or type cannot
# produce the same text (see "Typed fingerprints" in docs/design-notes.md).

#: Values that are their own canonical view (exact types: a subclass such as IntEnum or a str
#: subclass is tagged with its type instead).
_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_MAX_DEPTH = 64


def canonical(value: Any) -> Any:
    """A JSON-safe, typed, content-only, deterministic view of ``value`` for fingerprints.

    Raises :class:`UnfingerprintableInputError` for a value whose state cannot be read.
    """
    if type(value) in _PLAIN:
        return value
    return _canon(value, 0, ())


def _canon(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    cls = type(value)
    if cls in _PLAIN:
        return value
    if depth > _MAX_DEPTH:
        raise SerializationError("input nests more than 64 levels deep; cannot fingerprint it")
    ident = id(value)
    if ident in seen:
        # How many levels up the value it repeats is: two cycles differ if they close
        # on different ancestors.
        return {"__cycle__": len(seen) - seen.index(ident)}
    if cls is dict or isinstance(value, Mapping):
        return _canon_map(value, depth + 1, (*seen, ident))
    if cls is list:
        return _canon_items(value, depth + 1, (*seen, ident))
    if cls is tuple:
        return {"__tuple__": _canon_items(value, depth + 1, (*seen, ident))}
    if _is_message(value):
        return _canonical_message(value, depth + 1, (*seen, ident))
    return _canon_other(value, cls, depth + 1, (*seen, ident))


def _canon_map(value: Mapping[Any, Any], depth: int, seen: tuple[int, ...]) -> Any:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            return _canon_typed_keys(value, depth, seen)
        try:
            out[key] = item if type(item) in _PLAIN else _canon(item, depth, seen)
        except UnfingerprintableInputError as exc:
            exc.path.insert(0, f"[{key!r}]")
            raise
    return {"__map__": out}  # the encoder sorts the keys


def _canon_typed_keys(value: Mapping[Any, Any], depth: int, seen: tuple[int, ...]) -> Any:
    pairs = []
    for key, item in value.items():
        try:
            pairs.append((_canon(key, depth, seen), _canon(item, depth, seen)))
        except UnfingerprintableInputError as exc:
            exc.path.insert(0, f"[{key!r}]")
            raise
    pairs.sort(key=lambda kv: _stable_json(kv[0]))
    return {"__mapk__": pairs}


def _canon_items(value: Iterable[Any], depth: int, seen: tuple[int, ...]) -> list[Any]:
    out = []
    for index, item in enumerate(value):
        try:
            out.append(item if type(item) in _PLAIN else _canon(item, depth, seen))
        except UnfingerprintableInputError as exc:
            exc.path.insert(0, f"[{index}]")
            raise
    return out


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _canon_other(value: Any, cls: type, depth: int, seen: tuple[int, ...]) -> Any:
    if isinstance(value, set | frozenset):
        members = sorted(_stable_json(_canon(v, depth, seen)) for v in value)
        return {"__frozenset__" if isinstance(value, frozenset) else "__set__": members}
    if isinstance(value, bytes | bytearray):
        tag = "__bytes__" if cls is bytes else "__bytearray__"
        return {tag: hashlib.sha256(value).hexdigest()}
    if isinstance(value, enum.Enum):
        return {"__enum__": [_qualified(cls), value.name]}
    if cls in _BY_STR:
        return {"__" + cls.__name__ + "__": str(value)}
    if isinstance(value, datetime | date | time | timedelta | timezone | UUID | Decimal | PurePath):
        return {"__value__": [_qualified(cls), str(value)]}
    if isinstance(value, str | int | float):  # a subclass: its type and its value
        base = str if isinstance(value, str) else int if isinstance(value, int) else float
        return {"__sub__": [_qualified(cls), base(value)]}
    if _is_model(value):
        return {"__model__": [_qualified(cls), _canon_map(_model_state(value), depth, seen)]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"__dataclass__": [_qualified(cls), _canon_map(fields, depth, seen)]}
    return _canon_object(value, cls, depth, seen)


_BY_STR: frozenset[type] = frozenset({datetime, date, time, timedelta, UUID, Decimal})


def _model_state(model: BaseModel) -> dict[str, Any]:
    state = dict(model)  # fields and extras, nested models kept as models
    private = getattr(model, "__pydantic_private__", None)
    if private:
        state["__private__"] = private
    return state


def _canon_object(value: Any, cls: type, depth: int, seen: tuple[int, ...]) -> Any:
    """A plain object: its fully qualified type and the state we can read (``vars()`` and
    ``__slots__``). Anything else is not fingerprinted at all."""
    if isinstance(value, FunctionType | BuiltinFunctionType | type | ModuleType):
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
        closure = getattr(value, "__closure__", None)
        if "<" in name or closure:  # a lambda, a local function or class, a closure
            raise UnfingerprintableInputError(
                _qualified(cls), "is not identified by its name (a lambda, local or closure)"
            )
        module = getattr(value, "__module__", None) or ""
        return {"__named__": [_qualified(cls), f"{module}.{name}"]}
    state: dict[str, Any] = {}
    has_dict = hasattr(value, "__dict__")
    if has_dict:
        state.update(vars(value))
    slots = [s for k in cls.__mro__ for s in getattr(k, "__slots__", ()) if isinstance(s, str)]
    for slot in slots:
        if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
            state["__slot__" + slot] = getattr(value, slot)
    if not has_dict and not slots:
        raise UnfingerprintableInputError(_qualified(cls), "has no state spanpoint can read")
    if "<locals>" in cls.__qualname__:
        raise UnfingerprintableInputError(
            _qualified(cls), "is a class local to a function (its name does not identify it)"
        )
    try:
        return {"__object__": [_qualified(cls), _canon_map(state, depth, seen)]}
    except UnfingerprintableInputError as exc:
        exc.path[0:1] = [f".{exc.path[0][2:-2]}"] if exc.path else []
        raise


def _canonical_message(msg: BaseMessage, depth: int, seen: tuple[int, ...]) -> Any:
    view: dict[str, Any] = {"type": msg.type}
    for field in _MESSAGE_FIELDS:
        val = getattr(msg, field, None)
        if val not in (None, "", [], {}):
            view[field] = _canon(val, depth, seen)
    tool_calls = getattr(msg, "tool_calls", None)
    if tool_calls:
        # Tool-call ids come from the model and change on every real call: identity is the
        # call's name and arguments. A ToolMessage keeps its tool_call_id (see above).
        view["tool_calls"] = [
            [_canon(tc.get("name"), depth, seen), _canon(tc.get("args"), depth, seen)]
            for tc in tool_calls
        ]
    return {"__message__": view}


# The C JSON encoder lives in _json, a name module that stores may import without LangGraph.
_stable_json = _json.stable_json
json_text = _json.json_text


def text_digest(text: str) -> str:
    """sha256 hex digest of a canonical text, a lone surrogate included (kept, not replaced:
    its "surrogatepass" bytes are not valid UTF-8, so they cannot equal any other text's)."""
    try:
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def fingerprint(value: Any) -> str:
    """The sha256 hex digest of the typed canonical view of ``value``.

    Raises :class:`UnfingerprintableInputError` when part of ``value`` has no readable state.
    """
    if type(value) is dict:
        # A flat dict of plain values (a step's arguments, most of the time) is its own
        # canonical view inside the map tag: the same text, without a copy or the walk.
        for key, item in value.items():
            if type(key) is not str or type(item) not in _PLAIN:
                break
        else:
            return text_digest(_stable_json({"__map__": value}))
    return text_digest(_stable_json(canonical(value)))


def checkpoint_key(run_id: str, path: str, ordinal: int, input_fingerprint: str) -> str:
    """sha256 over (run_id, boundary path, ordinal, input fingerprint), stable everywhere."""
    material = "\x1f".join((run_id, path, str(ordinal), input_fingerprint))
    return text_digest(material)
