"""A cassette's file: LangGraph's msgpack spelled out as JSON, redacted, written safely.

Entries are sorted by key and hold nothing that changes from one recording to the next (no
trace or span ids, no LangChain ``lc_run--`` ids, no clock values), so recording the same
calls with the same answers again rewrites no byte. Reading checks every entry and turns
whatever is wrong into one :class:`CassetteError` naming the file, the entry and the field.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ormsgpack

from spanpoint import semconv
from spanpoint._files import replace_private
from spanpoint.capture import REDACTED, CapturePolicy, is_secret_key, redact_text, truncate
from spanpoint.errors import ConfigurationError, UnsafePathError
from spanpoint.stores.base import Checkpoint

#: What a cassette holds. A graph call or a step is never recorded: its identity is its input,
#: not the code it runs, so replaying it would hide a changed prompt or tool; it executes, and
#: the model and tool calls inside it replay.
CALL_KINDS = frozenset({semconv.KIND_MODEL_CALL, semconv.KIND_TOOL_CALL})
#: The run id of every cassette: keys depend on the calls alone, not on a file's name.
CASSETTE_RUN_ID = "spanpoint.cassette"
FORMAT_VERSION = 1
_KEY = re.compile(r"[0-9a-f]{64}")
#: LangChain's per-run message id (``lc_run--<uuid>``): a new one on every recording.
_RUN_ID_PREFIX = "lc_run-"

BeforeRecord = Callable[[dict[str, Any]], "dict[str, Any] | None"]


class CassetteError(ConfigurationError):
    """A cassette file cannot be used: malformed, unsafe to write, or replayed incompletely.

    The message names the file, the entry (by position) and the problem, and what to do.
    """


@dataclass
class Entry:
    """One recorded call: its checkpoint, what it asked for, whether redaction changed it."""

    checkpoint: Checkpoint
    request: dict[str, Any] | None
    redacted: bool = False


# --- LangGraph's msgpack spelled out as JSON ------------------------------------------------


class _Ext:
    """A msgpack extension value (LangGraph encodes a message, a pydantic model, … so)."""

    __slots__ = ("code", "value")

    def __init__(self, code: int, value: Any) -> None:
        self.code, self.value = code, value


def _unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data, ext_hook=lambda code, inner: _Ext(code, _unpack(inner)))


def _pack(value: Any) -> bytes:
    return ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS)


def _to_json(value: Any) -> Any:
    """A msgpack-decoded value as JSON: extension types and bytes spelled out, maps whose keys
    are not all strings (or look like this encoding's markers) as pairs."""
    if isinstance(value, _Ext):
        return {"$ext": value.code, "$data": _to_json(value.value)}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _to_json(v) for k, v in value.items()}
        return {"$map": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if "$ext" in value:
            return ormsgpack.Ext(int(value["$ext"]), _pack(_from_json(value["$data"])))
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"], validate=True)
        if "$map" in value:
            return {_hashable(_from_json(k)): _from_json(v) for k, v in value["$map"]}
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def encode_output(output_type: str, data: bytes) -> Any:
    """A stored output as JSON (``msgpack`` spelled out; anything else as base64)."""
    if output_type == "msgpack":
        try:
            decoded = _unpack(data)
        except Exception:  # not msgpack after all: kept exactly, as bytes
            return {"$bytes": base64.b64encode(data).decode()}
        return _to_json(decoded)
    return {"$bytes": base64.b64encode(data).decode()}


def decode_output(output_type: str, value: Any) -> bytes:
    """The stored bytes of :func:`encode_output`'s JSON."""
    if isinstance(value, dict) and set(value) == {"$bytes"}:
        return base64.b64decode(value["$bytes"], validate=True)
    return _pack(_from_json(value))


def _redact_tree(value: Any, extra: frozenset[str], masked: bool = False) -> Any:
    """Every text redacted, every value under a secret key masked (JSON tree of an output):
    the capture policy's own key rule (:func:`~spanpoint.capture.is_secret_key`) and text
    patterns (:func:`~spanpoint.capture.redact_text`), without its size bounds (an output
    must stay whole to replay).

    Under a secret key a scalar is masked whatever its type, and a mapping or list keeps its
    shape: its texts are masked and its numbers kept. A count is never a credential, and a
    reply's usage (``token_usage``) must replay as numbers, or LangChain cannot add it up.
    """
    if isinstance(value, str):
        return REDACTED if masked else redact_text(value)
    if isinstance(value, list):
        return [_redact_tree(v, extra, masked) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and is_secret_key(k, extra):
                out[k] = _redact_tree(v, extra, True) if isinstance(v, dict | list) else REDACTED
            else:
                out[k] = _redact_tree(v, extra, masked)
        return out
    return value


def _scrub_run_ids(value: Any) -> Any:
    """The JSON tree without LangChain's per-run message ids: a message that had one
    replays with none (LangGraph gives it a fresh id, as it does any id-less message)."""
    if isinstance(value, list):
        return [_scrub_run_ids(v) for v in value]
    if isinstance(value, dict):
        return {
            k: None
            if k == "id" and isinstance(v, str) and v.startswith(_RUN_ID_PREFIX)
            else _scrub_run_ids(v)
            for k, v in value.items()
        }
    return value


# --- writing: stable text, one safe replace ----------------------------------------------------


def entry_json(entry: Entry, capture: CapturePolicy) -> dict[str, Any]:
    """One entry as the file holds it: redacted, with no per-recording id."""
    cp = entry.checkpoint
    output = _scrub_run_ids(encode_output(cp.output_type, cp.output))
    redacted = _redact_tree(output, capture.redact_keys)
    return {
        "key": cp.key,
        "kind": cp.kind,
        "name": cp.name,
        "path": cp.path,
        "ordinal": cp.ordinal,
        "request": entry.request,
        "view": _redact_tree(cp.view, capture.redact_keys),
        "output_type": cp.output_type,
        "output": redacted,
        "output_redacted": entry.redacted or redacted != output,
    }


def write_entries(
    path: Path,
    entries: Sequence[Entry],
    capture: CapturePolicy,
    before_record: BeforeRecord | None = None,
) -> None:
    calls = []
    for entry in entries:
        call = entry_json(entry, capture)
        if before_record is not None:
            changed = before_record(call)
            if changed is None:
                continue
            if not isinstance(changed, dict) or changed.get("key") != call["key"]:
                raise CassetteError(
                    f"before_record must return the entry (a dict with its key unchanged) or "
                    f"None, not {type(changed).__name__} for {call['path']!r}"
                )
            call = changed
        calls.append(call)
    # By key: parallel calls complete in any order, and land in the same place every time.
    calls.sort(key=lambda c: (c["key"], c["kind"], c["path"]))
    document = {"spanpoint_cassette": FORMAT_VERSION, "calls": calls}
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_text_safely(path, text)


def write_text_safely(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` all at once, through spanpoint's one safe-file write
    (:func:`spanpoint._files.replace_private`: a temp file beside it created with ``O_EXCL |
    O_NOFOLLOW``, then renamed over it). A symlink at the path or at its temp path (a
    ``refund.json.tmp -> ~/.bashrc`` planted in a repository) is refused and never written
    through. A file whose text is already ``text`` is left alone.
    """
    data = text.encode("utf-8")
    try:
        if not path.is_symlink() and path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        replace_private(path, data)
    except UnsafePathError as exc:
        raise CassetteError(f"cannot write cassette {str(path)!r}: {exc}") from exc


# --- reading: one CassetteError naming the file, the entry and the problem ---------------------

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "key": str,
    "kind": str,
    "name": str,
    "path": str,
    "ordinal": int,
    "output_type": str,
}


def _bad(path: Path, where: str, problem: str) -> CassetteError:
    return CassetteError(
        f"cassette {str(path)!r} is malformed at {where}: {problem}; fix the file or delete it "
        "and record it again (mode='rewrite')"
    )


def read_entries(path: Path) -> list[Entry]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CassetteError(
            f"{str(path)!r} is not a spanpoint cassette ({type(exc).__name__}: "
            f"{truncate(str(exc), 200)}); delete it and record again (mode='rewrite')"
        ) from None
    if not isinstance(document, dict) or "calls" not in document:
        raise CassetteError(
            f"{str(path)!r} is not a spanpoint cassette (no 'calls' list); delete it and record "
            "again (mode='rewrite')"
        )
    version = document.get("spanpoint_cassette")
    if version != FORMAT_VERSION:
        raise CassetteError(
            f"cassette {str(path)!r} has format {version!r}, this spanpoint reads "
            f"{FORMAT_VERSION}; record it again (mode='rewrite')"
        )
    calls = document["calls"]
    if not isinstance(calls, list):
        raise _bad(path, "'calls'", f"a list was expected, not {type(calls).__name__}")
    entries, seen = [], set()
    for index, call in enumerate(calls, start=1):
        entry = _read_entry(path, index, call)
        if entry.checkpoint.key in seen:
            raise _bad(path, f"entry #{index}", f"key {entry.checkpoint.key!r} appears twice")
        seen.add(entry.checkpoint.key)
        entries.append(entry)
    return entries


def _read_entry(path: Path, index: int, call: Any) -> Entry:
    where = f"entry #{index}"
    if not isinstance(call, dict):
        raise _bad(path, where, f"an object was expected, not {type(call).__name__}")
    for name, kind in _FIELDS.items():
        value = call.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _bad(
                path, f"{where} field {name!r}", f"{_kind_name(kind)} expected, got {value!r:.80}"
            )
    if not _KEY.fullmatch(call["key"]):
        raise _bad(path, f"{where} field 'key'", "64 lowercase hex digits expected")
    if call["kind"] not in CALL_KINDS:
        raise _bad(path, f"{where} field 'kind'", f"one of {sorted(CALL_KINDS)} expected")
    where = f"{where} ({call['kind']} {call['path']!r})"
    for name in ("request", "view"):
        if call.get(name) is not None and not isinstance(call[name], dict):
            raise _bad(path, f"{where} field {name!r}", "an object or null expected")
    if "output" not in call:
        raise _bad(path, where, "field 'output' is missing")
    try:
        output = decode_output(call["output_type"], call["output"])
    except RecursionError:
        raise _bad(path, f"{where} field 'output'", "nested too deeply") from None
    except (ValueError, TypeError, KeyError, OverflowError, binascii.Error,
            ormsgpack.MsgpackEncodeError) as exc:  # fmt: skip
        problem = f"{type(exc).__name__}: {truncate(str(exc), 200)}"
        raise _bad(path, f"{where} field 'output'", problem) from None
    cp = Checkpoint(
        key=call["key"],
        run_id=CASSETTE_RUN_ID,
        path=call["path"],
        name=call["name"],
        kind=call["kind"],
        ordinal=call["ordinal"],
        output_type=call["output_type"],
        output=output,
        trace_id="",
        span_id="",
        view=call.get("view") or {},
    )
    return Entry(cp, call.get("request"), bool(call.get("output_redacted")))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return {str: "a string", int: "an integer"}.get(kind, str(kind))  # type: ignore[call-overload]


def read_calls(path: str | Path) -> list[dict[str, Any]]:
    """The entries of the cassette at ``path`` as JSON dicts, in file order, once the file has
    been checked as replay checks it (:class:`CassetteError` otherwise)."""
    path = Path(path)
    read_entries(path)
    return list(json.loads(path.read_text(encoding="utf-8"))["calls"])
