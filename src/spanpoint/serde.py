"""Serialization of boundary outputs and fingerprints of boundary inputs.

Outputs are serialized with LangGraph's own ``JsonPlusSerializer`` (msgpack; LangChain
messages, pydantic models and dataclasses round-trip) with the pickle fallback off, so loading
a checkpoint never unpickles anything.

Inputs are never stored: a boundary's identity uses a sha256 *fingerprint* of a canonical,
content-only view of its arguments. Volatile values that LangChain assigns at run time
(message ids, run ids, timestamps) are left out of that view, so that a replayed run computes
the same keys as the original one.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import PurePath
from typing import Any
from uuid import UUID

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from spanpoint.errors import CorruptCheckpointError, SerializationError

_SERDE = JsonPlusSerializer(pickle_fallback=False)

#: Fields of a LangChain message that identify its content. ``id`` (assigned at run time),
#: ``response_metadata`` (timestamps, request ids) and ``usage_metadata`` are not part of it.
_MESSAGE_FIELDS = ("content", "name", "tool_call_id", "status")


def dumps(value: Any) -> tuple[str, bytes]:
    """Serialize ``value`` to ``(type tag, bytes)``; :class:`SerializationError` if impossible."""
    try:
        return _SERDE.dumps_typed(value)
    except Exception as exc:  # ormsgpack raises its own types, and TypeError for cycles
        raise SerializationError(
            f"cannot serialize a {type(value).__name__} output: {exc}. Return JSON-like data, "
            "LangChain messages, pydantic models or dataclasses from a boundary, or mark it "
            "replay=False"
        ) from exc


def loads(type_tag: str, data: bytes) -> Any:
    """Deserialize what :func:`dumps` produced; :class:`CorruptCheckpointError` on bad data."""
    if type_tag == "pickle":
        raise CorruptCheckpointError("refusing to load a pickled checkpoint")
    try:
        return _SERDE.loads_typed((type_tag, data))
    except Exception as exc:
        raise CorruptCheckpointError(f"cannot decode a {type_tag!r} checkpoint: {exc}") from exc


def canonical(value: Any, *, _depth: int = 0, _seen: frozenset[int] = frozenset()) -> Any:
    """A JSON-safe, content-only, deterministic view of ``value`` for fingerprints."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if _depth > 64:
        raise SerializationError("input nests more than 64 levels deep; cannot fingerprint it")
    if id(value) in _seen:
        return "<cycle>"
    seen = _seen | {id(value)}
    depth = _depth + 1
    if isinstance(value, BaseMessage):
        return _canonical_message(value, depth, seen)
    if isinstance(value, Mapping):
        items = [(str(k), canonical(v, _depth=depth, _seen=seen)) for k, v in value.items()]
        return {"__map__": sorted(items, key=lambda kv: kv[0])}
    if isinstance(value, list | tuple):
        return [canonical(v, _depth=depth, _seen=seen) for v in value]
    if isinstance(value, set | frozenset):
        members = [canonical(v, _depth=depth, _seen=seen) for v in value]
        return {"__set__": sorted(members, key=_stable_json)}
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, enum.Enum):
        return {"__enum__": f"{type(value).__qualname__}.{value.name}"}
    if isinstance(value, datetime | date | time | UUID | Decimal | PurePath):
        return {"__" + type(value).__name__ + "__": str(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__qualname__, "fields": canonical(fields, _depth=depth)}
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):  # pydantic v2 models
        return {
            "__type__": type(value).__qualname__,
            "fields": canonical(model_dump(), _depth=depth),
        }
    return _canonical_opaque(value)


def _canonical_message(msg: BaseMessage, depth: int, seen: frozenset[int]) -> Any:
    view: dict[str, Any] = {"type": msg.type}
    for field in _MESSAGE_FIELDS:
        val = getattr(msg, field, None)
        if val not in (None, "", [], {}):
            view[field] = canonical(val, _depth=depth, _seen=seen)
    tool_calls = getattr(msg, "tool_calls", None)
    if tool_calls:
        # Tool-call ids come from the model and change on every real call: identity is the
        # call's name and arguments. A ToolMessage keeps its tool_call_id (see above).
        view["tool_calls"] = [
            {"name": tc.get("name"), "args": canonical(tc.get("args"), _depth=depth)}
            for tc in tool_calls
        ]
    return view


def _canonical_opaque(value: Any) -> Any:
    """Objects with no content view: serialize them, else fall back to their type name.

    A type-only fallback can only make two different inputs look alike when they are also
    the same call position in the same run, so it never replays another run's output.
    """
    try:
        _tag, data = _SERDE.dumps_typed(value)
        return {"__type__": type(value).__qualname__, "sha256": hashlib.sha256(data).hexdigest()}
    except Exception:
        return {"__type__": f"{type(value).__module__}.{type(value).__qualname__}"}


# One encoder for every fingerprint: json.dumps with options builds a new one per call.
_STABLE_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def c_json(
    key_separator: str,
    item_separator: str,
    *,
    sort_keys: bool,
    ensure_ascii: bool,
    default: Callable[[Any], Any] | None = None,
) -> Callable[[Any], str] | None:
    """The C encoder ``JSONEncoder.iterencode`` would build, built once (identical output).

    ``JSONEncoder.encode`` builds it through two Python frames on every call, which is most of
    the cost of encoding a boundary's small identity or view. No marker dict, so the encoder
    is safe to share between threads; a value that contains itself is a RecursionError (the
    canonical views hashed here never do). None without the C accelerator.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    encode_str = (
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    )
    encoder = make(
        None,
        default or _reject,
        encode_str,
        None,
        key_separator,
        item_separator,
        sort_keys,
        False,
        True,
    )
    return lambda value: "".join(encoder(value, 0))


def _reject(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_stable_json: Callable[[Any], str] = (
    c_json(":", ",", sort_keys=True, ensure_ascii=False) or _STABLE_ENCODER.encode
)

#: ``json.dumps(value)`` with its default options, for the small JSON texts a store keeps.
json_text: Callable[[Any], str] = (
    c_json(": ", ", ", sort_keys=False, ensure_ascii=True) or json.dumps
)


def fingerprint(value: Any) -> str:
    """The sha256 hex digest of the canonical view of ``value``."""
    return hashlib.sha256(_stable_json(canonical(value)).encode()).hexdigest()


def checkpoint_key(run_id: str, path: str, ordinal: int, input_fingerprint: str) -> str:
    """sha256 over (run_id, boundary path, ordinal, input fingerprint), stable everywhere."""
    material = "\x1f".join((run_id, path, str(ordinal), input_fingerprint))
    return hashlib.sha256(material.encode()).hexdigest()
