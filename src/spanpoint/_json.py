"""The C JSON encoder, built once: fingerprints, views and the small JSON texts stores keep.

A name module (no spanpoint or framework imports), so stores can encode JSON without knowing
LangGraph's serializer (DESIGN.md: a store knows nothing of LangGraph or its serializer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# One encoder for every fingerprint: json.dumps with options builds a new one per call.
STABLE_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
        True,  # allow_nan: NaN and Infinity stay numbers, never the strings "nan" / "inf"
    )
    return lambda value: "".join(encoder(value, 0))


def _reject(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: Canonical JSON: sorted keys, compact, UTF-8 (what fingerprints hash).
stable_json: Callable[[Any], str] = (
    c_json(":", ",", sort_keys=True, ensure_ascii=False) or STABLE_ENCODER.encode
)

#: ``json.dumps(value)`` with its default options, for the small JSON texts a store keeps.
json_text: Callable[[Any], str] = (
    c_json(": ", ", ", sort_keys=False, ensure_ascii=True) or json.dumps
)


class Encoded(dict):  # type: ignore[type-arg]
    """A mapping that carries its own :data:`json_text` in ``text``, made by its producer from
    memoized parts (an input view's 64 messages are encoded once per run, not once per
    commit); stores write ``text`` instead of encoding the mapping again
    (:func:`encoded_text`). The producer guarantees ``text == json_text(dict(self))``; an
    ``Encoded`` is never changed after it is made."""

    __slots__ = ("text",)

    text: str


def encoded_text(value: Any) -> str:
    """:data:`json_text` of ``value``, read from an :class:`Encoded` mapping's ``text``."""
    if type(value) is Encoded:
        try:
            return value.text
        except AttributeError:  # a copy (dataclasses.asdict, copy.copy) carries no text
            pass
    return json_text(value)
