"""Serialization of boundary outputs and fingerprints of boundary inputs.

Outputs are *written* with LangGraph's own ``JsonPlusSerializer`` (msgpack; LangChain
messages, pydantic models and dataclasses) with the pickle fallback off. They are *read* by
spanpoint's own reviver, through an explicit allow list: a stored row is data written by
whoever can write the store, so a type it names is looked up in the list before anything is
imported or called, and anything else is refused (:class:`UntrustedCheckpointError`; the
boundary then executes again). See "Threat model" in docs/design-notes.md. An output is
committed only if it reads back as an equal value of the same type at every level (the
shapes LangGraph's writer would flatten, such as tuples, are written as its extensions);
anything else is :class:`SerializationError`, and the boundary executes again next time.

Inputs are never stored: a boundary's identity uses a sha256 *fingerprint* of a typed,
canonical, content-only view of its arguments. Every value carries its type in that view, so
two different inputs cannot share a fingerprint by construction; a value whose state cannot
be read faithfully (an allow list of shapes decides) is :class:`UnfingerprintableInputError`
(the boundary is then not cacheable), never a fingerprint of its type name. Volatile values
that LangChain assigns at run time (message ids, run ids, timestamps) are left out of that
view, so that a replayed run computes the same keys as the original one.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib
import math
import re
import sys
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import PosixPath, PurePosixPath, PureWindowsPath, WindowsPath
from types import (
    BuiltinFunctionType,
    FunctionType,
    MappingProxyType,
    MethodType,
    ModuleType,
    NoneType,
)
from typing import TYPE_CHECKING, Any
from uuid import UUID
from zoneinfo import ZoneInfo

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
# with this module (every spanpoint import reaches it, the CLI too, and its commands stay
# free of LangChain and LangGraph). The writer is built at the first dumps; the
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
    # Their former module path (see _MOVED): older checkpoints name it.
    "spanpoint.graph_results": ("RunResult", "InterruptInfo"),
}
#: LangChain's message classes, written field by field when a value holds one of them exactly.
_MESSAGE_CLASSES: frozenset[tuple[str, str]] = frozenset(
    (module, name)
    for module, names in _DEFAULT_ALLOWED.items()
    if module.startswith("langchain_core.messages.")
    for name in names
)
#: Modules that moved (old path -> new path): a checkpoint naming the old path still reads.
_MOVED = {"spanpoint.graph_results": "spanpoint.graph.results"}
#: Class methods a checkpoint may name (LangGraph writes datetimes as ``fromisoformat``).
_ALLOWED_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})


def _counter(pairs: list[list[Any]]) -> Counter[Any]:
    return Counter(dict(pairs))


#: default_factory values a stored defaultdict may name, besides the allowed types.
_FACTORIES: dict[tuple[str, str], Any] = {
    ("builtins", f.__name__): f
    for f in (int, float, str, bytes, bool, list, dict, set, frozenset, tuple)
} | {("collections", f.__name__): f for f in (Counter, OrderedDict, deque)}


def _defaultdict(ref: Any, pairs: list[list[Any]]) -> defaultdict[Any, Any]:
    factory = None
    if ref is not None:
        module, name = ref
        factory = _FACTORIES.get((module, name)) or _target(module, name)
    return defaultdict(factory, pairs)


#: Allow-list entries that rebuild the shapes _Preparer writes (module, name as written).
_REVIVERS: dict[tuple[str, str], Any] = {
    ("builtins", "tuple"): tuple,
    ("builtins", "dict"): dict,
    ("builtins", "int"): int,
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): _counter,
    ("collections", "defaultdict"): _defaultdict,
}


def _default_table() -> dict[tuple[str, str], Any]:
    table = {(mod, name): None for mod, names in _DEFAULT_ALLOWED.items() for name in names}
    table.update(_REVIVERS)
    return table


#: (module, name) -> the class or callable, or None until first imported. Only entries of
#: this table are ever imported while reading a checkpoint. Replaced whole, never mutated
#: in place (but for caching an import), so a concurrent reader never sees it half-built.
_allowed: dict[tuple[str, str], Any] = _default_table()
_user_types: tuple[type | str, ...] = ()
_named_by_user: frozenset[tuple[str, str]] = frozenset()


def set_allowed_types(types: Iterable[type | str]) -> tuple[type | str, ...]:
    """Replace the user's types that checkpoints may name (``configure(allowed_types=...)``).

    Each entry is a class (a dataclass, a pydantic model, an enum, a namedtuple…) or a
    ``"package.module:Name"`` string, imported on first use. Returns the normalized tuple.
    """
    table = _default_table()
    normalized: list[type | str] = []
    named: set[tuple[str, str]] = set()
    for entry in types:
        if isinstance(entry, type):
            table[(entry.__module__, entry.__name__)] = entry
        elif isinstance(entry, str) and entry.count(":") == 1 and all(entry.split(":")):
            module, name = entry.split(":")
            table[(module, name)] = None
            named.add((module, name))
        else:
            raise ValueError(
                f"allowed_types entries must be classes or 'package.module:Name' strings, "
                f"not {entry!r}"
            )
        normalized.append(entry)
    global _allowed, _user_types, _named_by_user
    _allowed, _user_types, _named_by_user = table, tuple(normalized), frozenset(named)
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
        if key not in _named_by_user:
            # A user's "module:Name" is looked up in its module at every read (a dict lookup
            # once imported): the class a checkpoint revives is the one loaded now, never
            # one kept from before its module was loaded again.
            _allowed[key] = found
    return found


# --- reading a checkpoint -------------------------------------------------------------------

# The msgpack extension codes LangGraph's writer uses (the reader below accepts no others).
_EXT_ONE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD = 0, 1, 2, 3
_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2, _EXT_NUMPY = 4, 5, 6
#: spanpoint's own extension: a LangChain message written field by field (each field through
#: the exact writer below) and rebuilt with ``model_construct``, so it reads back as the very
#: fields it was written with. LangGraph's writer uses codes 0–6.
MESSAGE_EXTENSION = _EXT_MESSAGE = 64
_UNPACK = ormsgpack.OPT_NON_STR_KEYS
#: Bound once: every read of a checkpoint, and the read-back check of every commit, calls it.
_unpackb = ormsgpack.unpackb
#: Every msgpack extension header starts with one of these bytes: a payload with none of them
#: names no type, and is read without the reviver.
_EXT_HEADER = re.compile(rb"[\xc7-\xc9\xd4-\xd8]")
#: The extensions that name a type (or a method) and its arguments.
_CALL_CODES = frozenset(
    (
        _EXT_ONE_ARG,
        _EXT_POS_ARGS,
        _EXT_KW_ARGS,
        _EXT_METHOD,
        _EXT_PYDANTIC_V1,
        _EXT_PYDANTIC_V2,
        _EXT_MESSAGE,
    )
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
        payload = _unpackb(data, ext_hook=self, option=_UNPACK)
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
        if code == _EXT_MESSAGE:
            return _construct_message(module, name, target, args)
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


def _construct_message(module: str, name: str, target: Any, args: dict[str, Any]) -> Any:
    """A message written by :meth:`_Preparer.message`: its fields as they were, unvalidated
    (validating could rewrite them), with the fields its writer had set explicitly."""
    if (module, name) not in _MESSAGE_CLASSES:
        raise UntrustedCheckpointError(
            f"refusing a stored {module}.{name} written as a message: spanpoint writes only "
            "LangChain's own message classes that way"
        )
    fields, fields_set = args.get("fields"), args.get("set")
    if not isinstance(fields, dict) or not isinstance(fields_set, list):
        raise CorruptCheckpointError(f"a stored {module}.{name} has no field mapping")
    return target.model_construct(_fields_set=set(fields_set), **fields)


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
                return _unpackb(data, option=_UNPACK)
            except Exception as exc:
                raise CorruptCheckpointError(f"cannot decode a msgpack checkpoint: {exc}") from exc
        reviver = _Reviver()
        try:
            return _unpackb(data, ext_hook=reviver, option=_UNPACK)
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
    """Serialize ``value`` to ``(type tag, bytes)`` with LangGraph's writer.

    Raises :class:`SerializationError` if that is impossible, or if what was written would
    not read back as an equal value of the same type (then the output is not committed and
    the boundary executes again next time: a replay never returns a different type).
    """
    prepare = _Preparer()
    try:
        try:
            tag, data = _writer().dumps_typed(prepare(value, 0))
        except TypeError as exc:
            if "64-bit" not in str(exc):
                raise
            # An int msgpack cannot hold: the walk again, writing such ints as text.
            prepare = _WidePreparer()
            tag, data = _writer().dumps_typed(prepare(value, 0))
    except SerializationError:
        raise
    except Exception as exc:  # ormsgpack raises its own types, and TypeError for cycles
        raise SerializationError(
            f"cannot serialize a {type(value).__name__} output: {exc}. Return JSON-like data, "
            "LangChain messages, pydantic models or dataclasses from a boundary, or mark it "
            "replay=False"
        ) from exc
    problem = _revival_problem(value, tag, data) if prepare.opaque else None
    if problem is not None:
        raise SerializationError(
            f"cannot store a {_qualified(type(value))} output exactly: {problem}, so it was "
            "not committed and executes again on a rerun (return a type that reads back "
            "exactly, allow your own type with spanpoint.configure(allowed_types=[...]), or "
            "mark the boundary replay=False)"
        )
    return tag, data


# --- writing what LangGraph's writer would flatten ------------------------------------------
#
# LangGraph's writer turns a tuple into a list, an OrderedDict, a Counter or a defaultdict
# into a dict, a datetime's ZoneInfo into a fixed offset, and refuses a dict with tuple keys.
# Those values are handed to it already written as the same msgpack extensions it writes for
# other types (module, name, arguments), naming reviver entries of the allow list; everything
# inside is still written by LangGraph's writer.

_MAX_OUTPUT_DEPTH = 200
#: Values msgpack writes and reads back exactly as they are (a str, only when valid Unicode).
_SCALARS: frozenset[type] = frozenset({int, float, bool, type(None), bytes})


class _Preparer:
    """One output's walk before LangGraph's writer. ``opaque`` says whether a part of it was
    left to the writer as it is (a model, a message, a date, a subclass, a str that is not
    valid Unicode…): only then can what reads back differ, so only then is it read back and
    compared. What this walk writes itself (JSON-like data, the shapes above) is exact."""

    __slots__ = ("opaque",)

    def __init__(self) -> None:
        self.opaque = False

    def __call__(self, value: Any, depth: int) -> Any:
        cls = type(value)
        if cls is str:
            if not value.isascii() and not _valid_unicode(value):
                self.opaque = True
            return value
        if cls in _PLAIN or cls is bytes:
            return value
        if depth > _MAX_OUTPUT_DEPTH:
            raise SerializationError(
                f"cannot serialize an output that nests more than {_MAX_OUTPUT_DEPTH} levels deep"
            )
        depth += 1
        if cls is list:
            return [
                item
                if (kind := type(item)) in _SCALARS or (kind is str and item.isascii())
                else self(item, depth)
                for item in value
            ]
        if cls is dict:
            out = {}
            for key, item in value.items():
                if type(key) is not str:
                    return _ext(_EXT_ONE_ARG, "builtins", "dict", self.pairs(value, depth))
                if not key.isascii():
                    self(key, depth)
                kind = type(item)
                out[key] = (
                    item
                    if kind in _SCALARS or (kind is str and item.isascii())
                    else self(item, depth)
                )
            return out
        writer = _PREPARERS.get(cls)
        if writer is not None:
            return writer(self, value, depth)
        written = _message_name(cls)
        if written is not None and not value.__pydantic_private__:
            return self.message(value, written, depth)
        self.opaque = True
        if _is_model(value):
            return value  # LangGraph's writer's own: model_dump, read back and compared
        if isinstance(value, tuple) and hasattr(cls, "_fields") and hasattr(value, "_asdict"):
            fields = {k: self(v, depth) for k, v in value._asdict().items()}
            return _ext(_EXT_KW_ARGS, cls.__module__, cls.__name__, fields)
        if (
            dataclasses.is_dataclass(value)
            and not isinstance(value, type)
            and not any(hasattr(value, a) for a in ("model_dump", "dict", "get_secret_value"))
            and not _is_send(value)
        ):
            fields = {
                f.name: self(getattr(value, f.name), depth) for f in dataclasses.fields(value)
            }
            return _ext(_EXT_KW_ARGS, cls.__module__, cls.__name__, fields)
        return value  # LangGraph's writer's own (and checked when read back)

    def items(self, value: Any, depth: int) -> list[Any]:
        return [self(item, depth) for item in value]

    def message(self, value: Any, written: tuple[str, str], depth: int) -> Any:
        """A LangChain message, exactly: every field (and extra field) through this walk, and
        which fields were set, rebuilt by ``model_construct`` (:func:`_construct_message`).
        What this writes reads back as written, so such a message needs no read-back."""
        fields = {
            key: item
            if (kind := type(item)) in _SCALARS or (kind is str and item.isascii())
            else self(item, depth)
            for key, item in value.__dict__.items()
        }
        extra = value.__pydantic_extra__
        if extra:
            for key, item in extra.items():
                if type(key) is not str:
                    self.opaque = True
                    return value
                fields[key] = self(item, depth)
        written_set = sorted(value.__pydantic_fields_set__)
        return _ext(_EXT_MESSAGE, *written, {"fields": fields, "set": written_set})

    def pairs(self, value: Any, depth: int) -> list[list[Any]]:
        return [[self(k, depth), self(v, depth)] for k, v in value.items()]

    def datetime(self, value: datetime, depth: int) -> Any:
        if value.fold == 0 and (value.tzinfo is None or type(value.tzinfo) is timezone):
            return value  # LangGraph's ISO text says all of it
        self.opaque = True  # the zone is the writer's
        fields = {
            name: getattr(value, name)
            for name in ("year", "month", "day", "hour", "minute", "second", "microsecond", "fold")
        }
        fields["tzinfo"] = value.tzinfo
        return _ext(_EXT_KW_ARGS, "datetime", "datetime", fields)

    def defaultdict(self, value: defaultdict[Any, Any], depth: int) -> Any:
        factory = value.default_factory
        ref = None if factory is None else [factory.__module__, factory.__qualname__]
        named = isinstance(factory, type | FunctionType | BuiltinFunctionType)
        if factory is not None and (not named or "<" in factory.__qualname__):
            raise SerializationError(
                f"cannot store a defaultdict whose default_factory is a {type(factory).__name__}"
            )
        if ref is not None and tuple(ref) not in _FACTORIES:
            self.opaque = True  # revived only if the user allows it
        return _ext(_EXT_POS_ARGS, "collections", "defaultdict", [ref, self.pairs(value, depth)])


#: LangChain's message classes seen so far -> (module, name).
_message_names: dict[type, tuple[str, str]] = {}


def _message_name(cls: type) -> tuple[str, str] | None:
    """(module, name) when ``cls`` is exactly one of LangChain's message classes (not a
    subclass: a user's subclass may keep state its fields do not show)."""
    found = _message_names.get(cls)
    if found is not None:
        return found
    key = (cls.__module__, cls.__name__)
    if key not in _MESSAGE_CLASSES or getattr(sys.modules.get(key[0]), key[1], None) is not cls:
        return None
    _message_names[cls] = key
    return key


def _is_send(value: Any) -> bool:
    cls = _loaded_class("langgraph.types", "Send")
    return cls is not None and isinstance(value, cls)


def _ext(code: int, module: str, name: str, args: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, _writer().dumps_typed([module, name, args])[1])


#: The ints msgpack holds: int64 and uint64.
_MSGPACK_INT_RANGE = range(-(2**63), 2**64)


class _WidePreparer(_Preparer):
    """The walk for an output holding an int beyond msgpack's 64 bits: every such int is
    written as its decimal text and rebuilt by ``int`` (lists and dicts are walked item by
    item, since the plain walk hands their ints to msgpack as they are)."""

    __slots__ = ()

    def __call__(self, value: Any, depth: int) -> Any:
        cls = type(value)
        if cls is int:
            if value in _MSGPACK_INT_RANGE:
                return value
            return _ext(_EXT_ONE_ARG, "builtins", "int", str(value))
        if (cls is list or cls is dict) and depth <= _MAX_OUTPUT_DEPTH:
            if cls is list:
                return [self(item, depth + 1) for item in value]
            if all(type(key) is str for key in value):
                return {self(key, depth + 1): self(item, depth + 1) for key, item in value.items()}
        return super().__call__(value, depth)


_PREPARERS: dict[type, Callable[[_Preparer, Any, int], Any]] = {
    tuple: lambda p, v, d: _ext(_EXT_ONE_ARG, "builtins", "tuple", p.items(v, d)),
    set: lambda p, v, d: _ext(_EXT_ONE_ARG, "builtins", "set", p.items(v, d)),
    frozenset: lambda p, v, d: _ext(_EXT_ONE_ARG, "builtins", "frozenset", p.items(v, d)),
    deque: lambda p, v, d: _ext(_EXT_POS_ARGS, "collections", "deque", [p.items(v, d), v.maxlen]),
    OrderedDict: lambda p, v, d: _ext(_EXT_ONE_ARG, "collections", "OrderedDict", p.pairs(v, d)),
    Counter: lambda p, v, d: _ext(_EXT_ONE_ARG, "collections", "Counter", p.pairs(v, d)),
    defaultdict: _Preparer.defaultdict,
    datetime: _Preparer.datetime,
}


# --- checking that a value reads back -------------------------------------------------------


def _revival_problem(value: Any, tag: str, data: bytes) -> str | None:
    """Why ``data`` would not read back as ``value`` (same types, equal values), or None."""
    try:
        revived = loads(tag, data)
    except UntrustedCheckpointError as exc:
        return str(exc)
    except (CorruptCheckpointError, RecursionError) as exc:
        return f"it does not read back ({exc})"
    try:
        found = _difference(value, revived, 0)
    except Exception as exc:  # a user's __eq__ may raise
        return f"comparing it with what reads back raised {type(exc).__name__}"
    if found is None:
        return None
    where, what = found
    return f"{''.join(reversed(where)) or 'the value'} {what}"


#: Types whose equal values of the same type are the same value (not float: -0.0 == 0.0).
_EXACT_EQUAL: frozenset[type] = frozenset({str, int, bool, type(None), bytes})


def _difference(a: Any, b: Any, depth: int) -> tuple[list[str], str] | None:
    """How ``b`` (read back) differs from ``a`` (returned), and where (innermost first, built
    only on a difference); no values quoted, as the message goes to logs and spans."""
    ta = type(a)
    if ta is not type(b):
        return [], f"is a {_qualified(ta)} that would read back as a {_qualified(type(b))}"
    if ta in _PLAIN:
        if a == b and (ta is not float or a != 0 or math.copysign(1, a) == math.copysign(1, b)):
            return None
        if ta is float and a != a and b != b:
            return None
        if ta is str and not _valid_unicode(a):
            return [], "holds a lone surrogate (not valid Unicode), which would read back as '?'"
        return [], "would read back unequal"
    if depth > _MAX_OUTPUT_DEPTH:
        return [], "nests too deep to check"
    depth += 1
    if ta is dict or isinstance(a, dict):
        if len(a) != len(b) or (
            ta is not dict
            and getattr(a, "default_factory", None) != getattr(b, "default_factory", None)
        ):
            return [], "would read back with other entries"
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            same_key = type(ka) is type(kb) and ka == kb
            if same_key and type(va) is type(vb) and type(va) in _EXACT_EQUAL and va == vb:
                continue
            found = _difference(ka, kb, depth)
            if found is None:
                found = _difference(va, vb, depth)
                if found is not None:
                    found[0].append(f"[{ka!r}]" if type(ka) is str else "[…]")
                    return found
            else:
                found[0].append("[…] (a key)")
                return found
        return None
    if ta is list or ta is tuple or isinstance(a, list | tuple | deque):
        if len(a) != len(b) or (ta is deque and a.maxlen != b.maxlen):
            return [], "would read back with other items"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if type(x) is type(y) and type(x) in _EXACT_EQUAL and x == y:
                continue
            found = _difference(x, y, depth)
            if found is not None:
                found[0].append(f"[{index}]")
                return found
        return None
    if isinstance(a, set | frozenset):
        by_value = {item: item for item in b}
        for item in a:
            if item not in by_value:
                return [], "would read back with other members"
            found = _difference(item, by_value[item], depth)
            if found is not None:
                found[0].append(" (a member)")
                return found
        return None if len(a) == len(b) else ([], "would read back with other members")
    state = _comparable_state(a)
    if state is not None:
        return _difference(state, _comparable_state(b), depth)
    if isinstance(a, datetime | time):
        if a != b or a.fold != b.fold:
            return [], "would read back unequal"
        found = _difference(a.tzinfo, b.tzinfo, depth)
        if found is not None:
            found[0].append(".tzinfo")
        return found
    if isinstance(a, ZoneInfo):
        return None if a.key == b.key and a.key is not None else ([], "names no zone")
    if isinstance(a, Decimal):
        return None if str(a) == str(b) else ([], "would read back unequal")
    return None if a == b else ([], "would read back unequal")


def _valid_unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _comparable_state(value: Any) -> dict[str, Any] | None:
    """The state a message, a pydantic model or a dataclass reads back with (None for other
    types): every attribute, so an attribute the writer drops is a difference."""
    if _is_model(value):
        state = dict(value.__dict__)
        state.update(getattr(value, "__pydantic_extra__", None) or {})
        private = getattr(value, "__pydantic_private__", None)
        if private:
            state["__private__"] = private
        return state
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _object_state(value, type(value))
    return None


# --- fingerprints ---------------------------------------------------------------------------
#
# The canonical view is JSON in which every JSON object is a one-key tag chosen here: a user's
# mapping is always wrapped ({"__map__": …}), so no user value can spell a tag. JSON itself
# keeps str, int, float (1 vs 1.0; NaN and Infinity are not strings), bool and null apart; every
# other type is a tag that names it. Hence two inputs that differ in value or type cannot
# produce the same text (see "Typed fingerprints" in docs/design-notes.md).
#
# What can be read is an allow list. A type is read whole when it is one of the builtin shapes
# below (each read through its own reader, which sees every part of its state), or a class
# defined in Python whose state is its attributes (``vars()`` and ``__slots__``) on top of one
# of those shapes. Anything else — a type implemented in C that keeps state spanpoint cannot
# see (``io.StringIO``, a generator, a lock, an exception with fields outside its ``args``) —
# is not cacheable: UnfingerprintableInputError, and the boundary executes.

#: Values that are their own canonical view (exact types: a subclass such as IntEnum or a str
#: subclass is tagged with its type instead).
_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_MAX_DEPTH = 100
_HEAP_TYPE, _IMMUTABLE_TYPE = 1 << 9, 1 << 8


def canonical(value: Any) -> Any:
    """A JSON-safe, typed, content-only, deterministic view of ``value`` for fingerprints.

    Raises :class:`UnfingerprintableInputError` for a value whose state cannot be read
    faithfully (then the boundary is not cacheable).
    """
    if type(value) in _PLAIN:
        return value
    token = _CALL_IDS.set({})
    try:
        return _canon(value, 0, ())
    except UnfingerprintableInputError as exc:
        if len(exc.path) > 8:  # a deep value: its first steps name the argument
            exc.path[4:-2] = ["…"]
        raise
    except RecursionError:
        raise UnfingerprintableInputError(
            _qualified(type(value)), "nests too deep to be read"
        ) from None
    finally:
        _CALL_IDS.reset(token)


def _canon(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    cls = type(value)
    if cls in _PLAIN:
        return value
    if depth > _MAX_DEPTH:
        raise UnfingerprintableInputError(
            _qualified(cls), f"nests more than {_MAX_DEPTH} levels deep"
        )
    ident = id(value)
    if ident in seen:
        # How many levels up the value it repeats is: two cycles differ if they close
        # on different ancestors.
        return {"__cycle__": len(seen) - seen.index(ident)}
    seen = (*seen, ident)
    depth += 1
    if cls is dict:
        return _canon_map(value, depth, seen)
    if cls is list:
        return _canon_items(value, depth, seen)
    if cls is tuple:
        return {"__tuple__": _canon_items(value, depth, seen)}
    reader = _READERS.get(cls)
    if reader is not None:
        return reader(value, depth, seen)
    return _canon_other(value, cls, depth, seen)


def _canon_map(value: Mapping[Any, Any], depth: int, seen: tuple[int, ...]) -> Any:
    out: dict[str, Any] = {}
    for key, item in dict.items(value) if isinstance(value, dict) else value.items():
        if type(key) is not str:
            return _canon_typed_keys(value, depth, seen)
        try:
            out[key] = item if type(item) in _PLAIN else _canon(item, depth, seen)
        except UnfingerprintableInputError as exc:
            exc.path.insert(0, f"[{key!r}]")
            raise
    return {"__map__": out}  # the encoder sorts the keys


def _canon_pairs(items: Iterable[tuple[Any, Any]], depth: int, seen: tuple[int, ...]) -> list[Any]:
    pairs = []
    for key, item in items:
        try:
            pairs.append([_canon(key, depth, seen), _canon(item, depth, seen)])
        except UnfingerprintableInputError as exc:
            exc.path.insert(0, f"[{key!r}]")
            raise
    return pairs


def _canon_typed_keys(value: Mapping[Any, Any], depth: int, seen: tuple[int, ...]) -> Any:
    items = dict.items(value) if isinstance(value, dict) else value.items()
    pairs = _canon_pairs(items, depth, seen)
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
    return f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', cls.__name__)}"


def _canon_set(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    members = sorted(_stable_json(_canon(v, depth, seen)) for v in set.__iter__(value))
    return {"__set__": members}


def _canon_frozenset(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    members = sorted(_stable_json(_canon(v, depth, seen)) for v in frozenset.__iter__(value))
    return {"__frozenset__": members}


def _canon_datetime(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    # The zone itself, not its offset: a ZoneInfo and a fixed offset that agree today are
    # two different inputs (they disagree at the next DST change).
    naive = datetime.isoformat(datetime.replace(value, tzinfo=None))
    return {"__datetime__": [naive, value.fold, _canon(value.tzinfo, depth, seen)]}


def _canon_time(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    naive = time.isoformat(time.replace(value, tzinfo=None))
    return {"__time__": [naive, value.fold, _canon(value.tzinfo, depth, seen)]}


def _canon_zone(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    if value.key is None:
        raise UnfingerprintableInputError(
            _qualified(type(value)), "was read from a file and has no key that names it"
        )
    return {"__zoneinfo__": value.key}


def _canon_deque(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    return {"__deque__": [_canon_items(deque.__iter__(value), depth, seen), value.maxlen]}


def _canon_ordered(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    # Order is part of an OrderedDict (its own order: move_to_end does not reorder the dict).
    return {"__ordereddict__": _canon_pairs(OrderedDict.items(value), depth, seen)}


def _canon_defaultdict(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    factory = _canon(value.default_factory, depth, seen)
    return {"__defaultdict__": [factory, _canon_map(value, depth, seen)]}


def _canon_partial(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    parts = (value.func, value.args, value.keywords, vars(value))  # vars: attributes set on it
    return {"__partial__": [_canon(part, depth, seen) for part in parts]}


def _canon_method(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    return {
        "__method__": [_canon(value.__func__, depth, seen), _canon(value.__self__, depth, seen)]
    }


def _canon_named(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    """A function, class or module, by its import name; a bound builtin method with the
    object it is bound to."""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
    if "<" in name or getattr(value, "__closure__", None):
        raise UnfingerprintableInputError(
            _qualified(type(value)), "is not identified by its name (a lambda, local or closure)"
        )
    module = getattr(value, "__module__", None) or ""
    bound = getattr(value, "__self__", None)
    if isinstance(value, BuiltinFunctionType) and not isinstance(bound, ModuleType | NoneType):
        return {"__named__": [_qualified(type(value)), name, _canon(bound, depth, seen)]}
    return {"__named__": [_qualified(type(value)), f"{module}.{name}"]}


def _by_text(base: type) -> Callable[[Any, int, tuple[int, ...]], Any]:
    """A reader of a value that its base type's own ``__str__`` spells exactly."""
    tag, spell = f"__{base.__name__}__", base.__str__
    return lambda value, depth, seen: {tag: spell(value)}


def _canon_bytes(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    tag = "__bytes__" if isinstance(value, bytes) else "__bytearray__"
    return {tag: hashlib.sha256(value).hexdigest()}


def _canon_path(value: Any, depth: int, seen: tuple[int, ...]) -> Any:
    return {"__path__": [_qualified(type(value)), str(value)]}


class Uncacheable:
    """Stands in an identity for an input known to have no faithful fingerprint (a LangGraph
    store, whose contents change between calls): fingerprinting the identity raises
    :class:`UnfingerprintableInputError` naming where it stands, so the boundary executes
    every time, with a warning, instead of being keyed without it."""

    __slots__ = ("reason", "type_name")

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason


def _canon_uncacheable(value: Uncacheable, depth: int, seen: tuple[int, ...]) -> Any:
    raise UnfingerprintableInputError(value.type_name, value.reason)


#: The builtin shapes read whole, by exact type (a Python subclass of one of them is read
#: by the same reader, plus its type and attributes: see _canon_other).
_READERS: dict[type, Callable[[Any, int, tuple[int, ...]], Any]] = {
    set: _canon_set,
    frozenset: _canon_frozenset,
    bytes: _canon_bytes,
    bytearray: _canon_bytes,
    complex: lambda v, d, s: {"__complex__": [v.real, v.imag]},
    datetime: _canon_datetime,
    time: _canon_time,
    date: _by_text(date),
    timedelta: _by_text(timedelta),
    timezone: lambda v, d, s: {"__timezone__": repr(v)},
    ZoneInfo: _canon_zone,
    UUID: _by_text(UUID),
    Decimal: _by_text(Decimal),
    range: lambda v, d, s: {"__range__": [v.start, v.stop, v.step]},
    deque: _canon_deque,
    OrderedDict: _canon_ordered,
    defaultdict: _canon_defaultdict,
    functools.partial: _canon_partial,
    MappingProxyType: lambda v, d, s: {"__mappingproxy__": _canon_map(dict(v), d, s)},
    MethodType: _canon_method,
    FunctionType: _canon_named,
    BuiltinFunctionType: _canon_named,
    type: _canon_named,
    ModuleType: _canon_named,
    **{cls: _canon_path for cls in (PurePosixPath, PureWindowsPath, PosixPath, WindowsPath)},
    Uncacheable: _canon_uncacheable,
}

#: How a Python subclass's builtin content is read (by the builtin's own methods, so that an
#: override of ``__iter__`` or ``__str__`` cannot hide part of it).
_CONTENT: dict[type, Callable[[Any, int, tuple[int, ...]], Any]] = {
    dict: _canon_map,
    list: lambda v, d, s: _canon_items(list.__iter__(v), d, s),
    tuple: lambda v, d, s: _canon_items(tuple.__iter__(v), d, s),
    str: lambda v, d, s: str.__str__(v),
    int: lambda v, d, s: int.__repr__(v),
    float: lambda v, d, s: float.__repr__(v),
    object: lambda v, d, s: None,
}

#: Builtin exceptions whose whole state is their ``args`` (others, such as OSError's
#: ``filename`` or AttributeError's ``obj``, keep fields spanpoint does not read).
_ARGS_EXCEPTIONS: frozenset[type] = frozenset(
    {
        BaseException,
        Exception,
        ArithmeticError,
        AssertionError,
        BufferError,
        EOFError,
        FloatingPointError,
        IndexError,
        KeyError,
        LookupError,
        NotImplementedError,
        OverflowError,
        RecursionError,
        RuntimeError,
        TypeError,
        ValueError,
        ZeroDivisionError,
        Warning,
        UserWarning,
        DeprecationWarning,
        PendingDeprecationWarning,
        RuntimeWarning,
        FutureWarning,
    }
)


def _defined_in_python(cls: type) -> bool:
    """A class statement's class (its state lives in ``vars()`` and ``__slots__``), not a
    type implemented in C, static or not."""
    flags = cls.__flags__
    return bool(flags & _HEAP_TYPE) and not flags & _IMMUTABLE_TYPE


def _builtin_base(cls: type) -> type | None:
    """The one type implemented in C under ``cls`` (``object`` for a plain class); None when
    the class stands on more than one, or on one spanpoint cannot read."""
    found = None
    for klass in cls.__mro__:
        if _defined_in_python(klass):
            continue
        if found is None:
            found = klass
        elif not issubclass(found, klass):
            return None
    return found


def _canon_other(value: Any, cls: type, depth: int, seen: tuple[int, ...]) -> Any:
    if isinstance(value, type | ModuleType):  # a class with a metaclass of its own, too
        return _canon_named(value, depth, seen)
    if isinstance(value, enum.Enum):
        return {"__enum__": [_qualified(cls), value.name]}
    if _is_message(value):
        return _canonical_message(value, depth, seen)
    if _is_model(value):
        return {"__model__": [_qualified(cls), _canon_map(_model_state(value), depth, seen)]}
    if dataclasses.is_dataclass(value):
        state = _dataclass_state(value, cls)
        try:
            return {"__dataclass__": [_qualified(cls), _canon_map(state, depth, seen)]}
        except UnfingerprintableInputError as exc:
            exc.path[0:1] = [f".{exc.path[0][2:-2]}"] if exc.path else []
            raise
    base = _builtin_base(cls)
    if isinstance(value, BaseException):
        if base not in _ARGS_EXCEPTIONS:
            raise UnfingerprintableInputError(
                _qualified(cls), "keeps fields outside its args that spanpoint cannot read"
            )
        content = [_canon(value.args, depth, seen), _canon(value.__cause__, depth, seen)]
    elif cls is object:
        raise UnfingerprintableInputError("builtins.object", "has no state, only an identity")
    elif base in _CONTENT:
        content = _CONTENT[base](value, depth, seen)
    elif base in _READERS and base not in _NOT_SUBCLASSED:
        content = _READERS[base](value, depth, seen)
    else:
        raise UnfingerprintableInputError(
            _qualified(cls), "keeps state where spanpoint cannot read it (a type implemented in C)"
        )
    if _comparison_raises(value, cls):
        raise UnfingerprintableInputError(
            _qualified(cls), "raises when compared or hashed (its identity is undefined)"
        )
    if "<locals>" in cls.__qualname__:
        raise UnfingerprintableInputError(
            _qualified(cls), "is a class local to a function (its name does not identify it)"
        )
    try:
        state = _canon_map(_object_state(value, cls), depth, seen)
    except UnfingerprintableInputError as exc:
        exc.path[0:1] = [f".{exc.path[0][2:-2]}"] if exc.path else []
        raise
    return {"__object__": [_qualified(cls), content, state]}


def _comparison_raises(value: Any, cls: type) -> bool:
    """Whether a class that defines its own equality or hash in Python raises from it: such
    a value says nothing about which other values it stands for, so it is never a cached
    input. (A builtin's own, such as a tuple's hash of a list inside, is not asked.)"""
    probes = [
        probe
        for method, probe in (("__eq__", lambda: value == value), ("__hash__", lambda: hash(value)))
        if _defined_in_python(_defining_class(cls, method))
        and getattr(cls, method, None) is not None
    ]
    try:
        for probe in probes:
            probe()
    except Exception:
        return True
    return False


def _defining_class(cls: type, name: str) -> type:
    return next((klass for klass in cls.__mro__ if name in klass.__dict__), object)


#: Readers that name a value rather than read it: a subclass of these is not read by them.
_NOT_SUBCLASSED = frozenset({MethodType, FunctionType, BuiltinFunctionType, type, ModuleType})


def _object_state(value: Any, cls: type) -> dict[str, Any]:
    """Every attribute a Python class keeps: ``vars()`` and each ``__slots__`` entry."""
    state: dict[str, Any] = {}
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        state.update(attrs)
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__") or not isinstance(slot, str):
                continue
            name = f"_{klass.__name__.lstrip('_')}{slot}" if slot.startswith("__") else slot
            if hasattr(value, name):
                state[f"__slot__{klass.__qualname__}.{slot}"] = getattr(value, name)
    return state


def _dataclass_state(value: Any, cls: type) -> dict[str, Any]:
    """A dataclass's fields, then every other attribute it keeps (a subclass's own)."""
    state = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    for name, item in _object_state(value, cls).items():
        if name.startswith("__slot__"):
            name = name.rpartition(".")[2]
        state.setdefault(name, item)
    return state


def _model_state(model: BaseModel) -> dict[str, Any]:
    state = dict(model)  # fields and extras, nested models kept as models
    private = getattr(model, "__pydantic_private__", None)
    if private:
        state["__private__"] = private
    return state


#: Fields of a LangChain message that change on every execution and so are not part of what
#: it says: ``id`` (assigned at run time), ``response_metadata`` (timestamps, request ids) and
#: ``usage_metadata``. Every other field is: type and class, ``ChatMessage.role``, content
#: and its parts, name, ``additional_kwargs`` (a legacy ``function_call``, provider fields),
#: tool calls valid and invalid, status, a tool message's artifact.
_VOLATILE_MESSAGE_FIELDS = frozenset({"id", "response_metadata", "usage_metadata"})
_TOOL_CALL_FIELDS = frozenset({"tool_calls", "invalid_tool_calls", "tool_call_chunks"})

#: Tool-call ids come from the model and differ on every real call: inside one fingerprinted
#: value each distinct id stands as the order it was first seen in, so which result answers
#: which call (a ToolMessage's ``tool_call_id``, a provider's raw tool calls) is kept, not the
#: id's spelling. Set by :func:`canonical` for the value it reads.
_CALL_IDS: ContextVar[dict[str, int] | None] = ContextVar("spanpoint_call_ids", default=None)


def _canonical_message(msg: BaseMessage, depth: int, seen: tuple[int, ...]) -> Any:
    fields = dict(msg.__dict__)
    fields.update(getattr(msg, "__pydantic_extra__", None) or {})
    ids = _CALL_IDS.get()
    if ids is None:
        ids = {}
    view: dict[str, Any] = {}
    for field, val in fields.items():
        if field in _VOLATILE_MESSAGE_FIELDS or val is None or (type(val) in _EMPTY and not val):
            continue
        if field in _TOOL_CALL_FIELDS and type(val) is list:
            val = [_linked(call, ids) for call in val]
        elif field == "additional_kwargs" and type(val) is dict and "tool_calls" in val:
            val = {**val, "tool_calls": [_linked(c, ids) for c in val["tool_calls"] or ()]}
        elif field == "tool_call_id" and type(val) is str:
            val = {"__call__": ids.setdefault(val, len(ids))}
        try:
            view[field] = val if type(val) in _PLAIN else _canon(val, depth, seen)
        except UnfingerprintableInputError as exc:
            exc.path.insert(0, f".{field}")
            raise
    view["__class__"] = _qualified(type(msg))  # a subclass may keep the same ``type``
    return {"__message__": view}


_EMPTY = frozenset({str, list, dict})


def _linked(call: Any, ids: dict[str, int]) -> Any:
    """A tool call with its id as the order the id was first seen in (see _CALL_IDS)."""
    if not isinstance(call, dict):
        return call
    linked = {k: v for k, v in call.items() if k != "id"}
    ident = call.get("id")
    if type(ident) is str:
        linked["id"] = {"__call__": ids.setdefault(ident, len(ids))}
    elif ident is not None:
        linked["id"] = ident
    return linked


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


#: The format of a key and of the fingerprint it holds (the rules in "Step identity and
#: faithful replay", docs/concepts.md). It enters every key, so a change to those rules
#: changes every key once: a checkpoint written under another format is never found, and its
#: boundary executes again instead of replaying something the rules no longer vouch for.
_KEY_FORMAT = "spanpoint-key-3"


def checkpoint_key(run_id: str, path: str, ordinal: int, input_fingerprint: str) -> str:
    """sha256 over (key format, run_id, boundary path, ordinal, input fingerprint), stable
    everywhere."""
    material = "\x1f".join((_KEY_FORMAT, run_id, path, str(ordinal), input_fingerprint))
    return text_digest(material)
