"""What a model or tool call was given, as a small redacted JSON-safe description.

One description serves every place that shows a call's input to a person: the input view a
checkpoint keeps (``Checkpoint.input_view``, which ``spanpoint diff`` compares and a fork
checks), and the request a cassette records to say what changed on a miss.

- a model call: ``{"messages": [{"role", "digest", "text", "chars"[, "tool_calls"]}...],
  "tools": [{"name", "digest"}...], "settings": {...}}``, the messages the system prompt and
  the newest :data:`VIEW_MESSAGES` (then ``"omitted"``: how many were left out, at list
  position ``"omitted_at"``);
- a tool call: ``{"args": <redacted arguments>}``.

Each message carries the digest of its whole content (:func:`identity.message_digests`,
memoized per message, so this costs a dictionary hit per message on the hot path), so two
messages that differ past the cut, or whose text is not captured, still compare different.
Text follows the capture policy (invariant 7): redacted and cut to :data:`TEXT_LIMIT`
characters when content capture is on, ``None`` otherwise; a cassette, which exists to
show what its calls asked, passes ``text=True``. Tool-call arguments are redacted by key and
by pattern (``CapturePolicy.redact``), as in the checkpoint's ``view``.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from spanpoint._json import Encoded, json_text
from spanpoint.calls.identity import message_digests, tool_digest
from spanpoint.capture import CapturePolicy, redact_text

#: Characters of one message's text kept in an input view (the digest covers all of it).
TEXT_LIMIT = 2000

#: Messages a model call's input view keeps: the system prompt and the newest ones.
VIEW_MESSAGES = 64


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, sort_keys=True, default=str)


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit} characters cut]"


def message_views(
    messages: Sequence[BaseMessage],
    capture: CapturePolicy,
    *,
    text: bool | None = None,
    limit: int | None = TEXT_LIMIT,
) -> list[dict[str, Any]]:
    """Each message's role, content digest, redacted text (see the module docstring), length
    in characters and tool calls (name and redacted arguments; never their run-time ids)."""
    return [entry for entry, _ in _described(messages, capture, text, limit)]


def _described(
    messages: Sequence[BaseMessage],
    capture: CapturePolicy,
    text: bool | None,
    limit: int | None,
    snapshots: Sequence[bytes | None] | None = None,
) -> list[tuple[dict[str, Any], str | None]]:
    """:func:`message_views`' views, each with its :data:`json_text` (None if it has none).

    ``snapshots``: the bytes each message's digest was read from (:func:`message_digests`).
    """
    with_text = capture.captures_content if text is None else text
    policy = (capture, with_text, limit)
    try:
        memo = _VIEWS.setdefault(policy, {})
    except TypeError:  # a policy holding an unhashable value: no memo
        memo, policy = {}, None
    out: list[tuple[dict[str, Any], str | None]] = []
    for message, digest in zip(messages, message_digests(messages, snapshots), strict=True):
        found = memo.get(digest)
        if found is None:
            found = _RECENT.get((policy, digest)) if policy is not None else None
            if found is None:
                entry = _message_view(message, digest, capture, with_text, limit)
                try:
                    encoded: str | None = json_text(entry)
                except (TypeError, ValueError):  # the store's encoding then says what failed
                    encoded = None
                found = (entry, encoded)
                if policy is not None:
                    _remember_recent((policy, digest), found)
            try:
                ref = weakref.ref(message, _drop)
            except TypeError:  # not weak-referenceable: looked up again at every call
                pass
            else:
                memo[digest] = found
                _HOLDERS[id(ref)] = (ref, memo, digest)
        out.append(found)
    return out


def _remember_recent(key: tuple[Any, bytes], found: tuple[dict[str, Any], str | None]) -> None:
    _RECENT[key] = found
    if len(_RECENT) > _MAX_RECENT:
        _RECENT.popitem(last=False)  # the oldest made


def _drop(ref: weakref.ref[BaseMessage]) -> None:
    """The message a view was made from is gone: the view leaves with it."""
    held = _HOLDERS.pop(id(ref), None)
    if held is not None:
        held[1].pop(held[2], None)


# (policy, with text, limit) -> message digest -> its view and the view's JSON text. The
# digest covers everything a view shows (type, content, name, status, tool calls), and every
# model call of an agent describes the whole conversation again: each message is described
# and encoded once while it lives, not once per call. An entry leaves with the message it
# was made from, so the memo holds the live conversations only, however many threads came
# and went (another message with the same digest then makes it again). Views are shared
# between the lists returned: read them, never change them.
_VIEWS: dict[tuple[Any, ...], dict[bytes, tuple[dict[str, Any], str | None]]] = {}
# id(weak reference) -> (the reference, its memo, the digest it drops): keeps each reference,
# and so its callback, alive while its message lives.
_HOLDERS: dict[int, tuple[weakref.ref[BaseMessage], dict[bytes, Any], bytes]] = {}
# (policy, digest) -> view and text, for the last :data:`_MAX_RECENT` views made, whatever
# their messages: another conversation often holds a message with the same content (the
# same tool call and result, the same final answer), and a bounded count keeps memory flat.
_RECENT: OrderedDict[tuple[Any, bytes], tuple[dict[str, Any], str | None]] = OrderedDict()
_MAX_RECENT = 64


def _message_view(
    message: BaseMessage, digest: bytes, capture: CapturePolicy, with_text: bool, limit: int | None
) -> dict[str, Any]:
    full = _text(message.content)
    entry: dict[str, Any] = {
        "role": message.type,
        "digest": digest.hex(),
        # Redacted after the cut: the regular expressions then see 2,000 characters at most,
        # whatever the message's length.
        "text": redact_text(_cut(full, limit)) if with_text else None,
        "chars": len(full),
    }
    fields = getattr(message, "__dict__", None) or {}
    calls = fields.get("tool_calls")
    if calls:
        entry["tool_calls"] = [
            {"name": c.get("name"), "args": capture.redact(c.get("args"))} for c in calls
        ]
    return entry


def _tool_name(tool: Any) -> str:
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        if isinstance(fn, Mapping) and fn.get("name"):
            return str(fn["name"])
        return str(tool.get("name") or tool.get("type") or "tool")
    return str(tool)


def tool_views(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Each tool definition's name and digest (memoized per tool object)."""
    out = []
    for tool in tools:
        try:
            found: str | None = tool_digest(tool)
        except Exception:  # a definition that cannot be encoded: named, not digested
            found = None
        out.append({"name": _tool_name(tool), "digest": found})
    return out


def model_input_view(
    messages: Sequence[BaseMessage],
    capture: CapturePolicy,
    *,
    system_message: BaseMessage | None = None,
    tools: Sequence[Any] = (),
    settings: Mapping[str, Any] | None = None,
    snapshots: Sequence[bytes] | None = None,
) -> dict[str, Any]:
    """The input view of one model call: its messages (the system prompt first), its tool
    definitions and its settings, redacted. ``snapshots`` (one per message, as
    :func:`identity.model_call_fingerprint` read them): each message then shows the digest
    of the content its key covered."""
    # The last VIEW_MESSAGES messages only: every model call of an agent sees the whole
    # conversation again, and a view of all of it would make each checkpoint as long as the
    # run so far (bytes in the store quadratic in the run's length). A diff's first divergent call
    # differs in its newest messages (the older ones were the previous call's, which did not
    # diverge), and the fingerprint still covers every message.
    cut = len(messages) > VIEW_MESSAGES
    tail = list(messages[-VIEW_MESSAGES:]) if cut else list(messages)
    read: list[Any] | None = None
    if snapshots is not None and len(snapshots) == len(messages):
        read = list(snapshots[-VIEW_MESSAGES:]) if cut else list(snapshots)
        if system_message is not None:
            read.insert(0, None)
    described = _described(
        [system_message, *tail] if system_message is not None else tail,
        capture,
        None,
        TEXT_LIMIT,
        read,
    )
    view = Encoded(
        messages=[entry for entry, _ in described],
        tools=tool_views(tools),
        settings=capture.redact(dict(settings or {})),
    )
    if len(tail) < len(messages):
        # Left out: `omitted` messages, right after the system prompt (or from the start).
        view["omitted"] = len(messages) - len(tail)
        view["omitted_at"] = 1 if system_message is not None else 0
    # The store writes this text: the messages' JSON from the memo, joined, and the rest
    # encoded here ("messages" is the first key, so the rest follows its placeholder).
    texts: list[str] = []
    for _, encoded in described:
        if encoded is None:
            return dict(view)  # the store encodes it, and says what cannot be encoded
        texts.append(encoded)
    try:
        rest = json_text({**view, "messages": 0})
    except (TypeError, ValueError):
        return dict(view)
    view.text = f'{{"messages": [{", ".join(texts)}]{rest[len(_PLACEHOLDER) :]}'
    return view


_PLACEHOLDER = '{"messages": 0'
