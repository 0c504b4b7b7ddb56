"""What spanpoint captures from graphs, models and tools — metadata first, secrets never.

Defaults follow the GenAI conventions: message free text is *not* captured unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (or the policy) opts in; full graph
state values are off; config and context are captured with secret-looking keys redacted.
Every captured value is bounded (bytes, depth, items) and cycle-safe.

Keys are matched as whole *words*: ``api_key``, ``authToken``, ``X-Authorization`` are
redacted; ``max_tokens`` and ``author`` are not (``tokens`` and ``author`` are other words).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from langchain_core.messages import BaseMessage

ContentMode = Literal["NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"]

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
REDACTED = "[REDACTED]"

#: Words that make a key secret on their own.
SECRET_WORDS: frozenset[str] = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "authorization",
        "auth",
        "cookie",
        "credential",
        "credentials",
        "apikey",
        "bearer",
        "signature",
        "passphrase",
    }
)
#: Adjacent word pairs that make a key secret (``api_key``, ``private-key``, ``accessKey``).
SECRET_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("access", "key"),
        ("session", "id"),
        ("client", "secret"),
        ("set", "cookie"),
    }
)
#: Values that look like credentials whatever their key is called.
SECRET_VALUE = re.compile(
    r"(?:\bsk-[A-Za-z0-9_-]{16,}|\bBearer\s+[A-Za-z0-9._~+/-]{8,}=*|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bxox[baprs]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\b|[^A-Za-z])|[A-Z]?[a-z]+|[0-9]+")

_TRUE = {"1", "true", "yes", "on"}
_SCALARS = frozenset({bool, int, float})


def key_words(key: str) -> list[str]:
    """Split a key into lower-case words: ``apiKey`` → api, key; ``MAX_TOKENS`` → max, tokens."""
    return [w.lower() for w in _WORD.findall(key.replace("-", "_"))]


def is_secret_key(key: object, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a mapping key names a secret (whole-word match, see the module docstring)."""
    if not isinstance(key, str):
        return False
    if len(key) > 128:  # not a name that comes back: do not keep it
        return _is_secret_word_key.__wrapped__(key, extra)
    return _is_secret_word_key(key, extra)


# The same few keys (argument and config names) come back on every call: split them once.
@functools.lru_cache(maxsize=4096)
def _is_secret_word_key(key: str, extra: frozenset[str]) -> bool:
    words = key_words(key)
    if any(w in SECRET_WORDS or w in extra for w in words):
        return True
    return any(pair in SECRET_PAIRS for pair in itertools.pairwise(words))


@dataclass(frozen=True, slots=True)
class CapturePolicy:
    """What is captured into spans, events, logs and the store's human-readable views.

    Args:
        content: message text capture mode (``NO_CONTENT`` default; from the GenAI env var).
        capture_state: capture graph state values (off by default: they hold user data).
        capture_config: capture redacted ``config``/``context`` (on by default).
        max_bytes: the largest captured value, as UTF-8 JSON.
        max_depth: deeper values become ``"<depth limit>"``.
        max_items: longer lists/mappings are cut, noting how many items were left out.
        redact_keys: extra secret key words beyond :data:`SECRET_WORDS`.
    """

    content: ContentMode = "NO_CONTENT"
    capture_state: bool = False
    capture_config: bool = True
    max_bytes: int = 4096
    max_depth: int = 6
    max_items: int = 50
    redact_keys: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        from spanpoint.errors import ConfigurationError

        if self.content not in ("NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"):
            raise ConfigurationError(
                f"content must be NO_CONTENT, SPAN_ONLY, EVENT_ONLY or SPAN_AND_EVENT, "
                f"not {self.content!r}"
            )
        for name in ("max_bytes", "max_depth", "max_items"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")
        object.__setattr__(self, "redact_keys", frozenset(w.lower() for w in self.redact_keys))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CapturePolicy:
        """The policy the environment asks for (``SPANPOINT_CAPTURE_*`` and the GenAI var)."""
        env = os.environ if environ is None else environ
        content = env.get(CONTENT_ENV, "NO_CONTENT").strip().upper() or "NO_CONTENT"
        if content in _TRUE | {"TRUE"}:  # the older boolean form of the variable
            content = "SPAN_AND_EVENT"
        elif content in {"FALSE", "0", "NO", "OFF"}:
            content = "NO_CONTENT"
        policy = cls(content=content)  # type: ignore[arg-type]
        changes: dict[str, Any] = {}
        for name in ("state", "config"):
            raw = env.get(f"SPANPOINT_CAPTURE_{name.upper()}")
            if raw is not None:
                changes[f"capture_{name}"] = raw.strip().lower() in _TRUE
        for name in ("max_bytes", "max_depth", "max_items"):
            raw = env.get(f"SPANPOINT_CAPTURE_{name.upper()}")
            if raw is not None:
                changes[name] = _int_setting(f"SPANPOINT_CAPTURE_{name.upper()}", raw)
        extra = env.get("SPANPOINT_CAPTURE_REDACT_KEYS")
        if extra:
            changes["redact_keys"] = frozenset(w.strip() for w in extra.split(",") if w.strip())
        return replace(policy, **changes) if changes else policy

    @property
    def content_on_spans(self) -> bool:
        """Whether message text may go on span attributes."""
        return self.content in ("SPAN_ONLY", "SPAN_AND_EVENT")

    @property
    def content_on_events(self) -> bool:
        """Whether message text may go on span events and logs."""
        return self.content in ("EVENT_ONLY", "SPAN_AND_EVENT")

    @property
    def captures_content(self) -> bool:
        """Whether message text is captured anywhere."""
        return self.content != "NO_CONTENT"

    # --- capture ---------------------------------------------------------------------------

    def redact(self, value: Any) -> Any:
        """A bounded, cycle-safe, JSON-safe copy of ``value`` with secrets replaced."""
        return self._walk(value, 0, set())

    def to_json(self, value: Any) -> str:
        """:meth:`redact` then JSON, cut to ``max_bytes`` (noting how much was cut)."""
        text = json.dumps(self.redact(value), ensure_ascii=False, separators=(",", ":"))
        return truncate(text, self.max_bytes)

    def message_view(self, message: BaseMessage) -> dict[str, Any]:
        """A structural view of a message: type, sizes, tool calls; text only if opted in."""
        view: dict[str, Any] = {"type": message.type}
        content = message.content
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        view["content_chars"] = len(text)
        if self.captures_content:
            view["content"] = truncate(redact_text(text), self.max_bytes)
        # Fields are read from __dict__: pydantic answers an absent one (an AIMessage has no
        # tool_call_id) by raising inside __getattr__, which costs more than the whole view.
        fields = getattr(message, "__dict__", None) or {}
        for attr in ("name", "tool_call_id"):
            val = fields.get(attr)
            if val:
                view[attr] = val
        tool_calls = fields.get("tool_calls")
        if tool_calls:
            view["tool_calls"] = [
                {"name": tc.get("name"), "id": tc.get("id"), "args": self.redact(tc.get("args"))}
                for tc in tool_calls
            ]
        return view

    def _walk(self, value: Any, depth: int, seen: set[int]) -> Any:
        kind = type(value)
        if kind is str:  # the common cases first: tool arguments are mostly str and dict
            return truncate(redact_text(value), self.max_bytes)
        if value is None or kind in _SCALARS or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return truncate(redact_text(value), self.max_bytes)
        if depth >= self.max_depth:
            return "<depth limit>"
        if id(value) in seen:
            return "<cycle>"
        seen = seen | {id(value)}
        if kind is dict:  # not a message; isinstance against pydantic's ABC meta is slow
            return self._walk_mapping(value, depth, seen)
        if isinstance(value, BaseMessage):
            return self.message_view(value)
        if isinstance(value, Mapping):
            return self._walk_mapping(value, depth, seen)
        if isinstance(value, list | tuple | set | frozenset):
            return self._walk_items(value, depth, seen)
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            try:
                return self._walk(dump(), depth, seen)
            except Exception:
                return f"<{type(value).__name__}>"
        return f"<{type(value).__name__}>"

    def _walk_mapping(self, value: Mapping[Any, Any], depth: int, seen: set[int]) -> Any:
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= self.max_items:
                out["…"] = f"{len(value) - self.max_items} more keys"
                break
            if is_secret_key(key, self.redact_keys):
                out[str(key)] = REDACTED
            else:
                out[str(key)] = self._walk(item, depth + 1, seen)
        return out

    def _walk_items(self, value: Iterable[Any], depth: int, seen: set[int]) -> list[Any]:
        items = list(value)
        out = [self._walk(v, depth + 1, seen) for v in items[: self.max_items]]
        if len(items) > self.max_items:
            out.append(f"… {len(items) - self.max_items} more items")
        return out


def redact_text(text: str) -> str:
    """Replace credential-looking substrings of free text with ``[REDACTED]``."""
    return SECRET_VALUE.sub(REDACTED, text) if text else text


def truncate(text: str, max_bytes: int) -> str:
    """Cut ``text`` to at most ``max_bytes`` UTF-8 bytes, saying how much was cut."""
    if len(text) * 4 <= max_bytes:  # a character is at most 4 bytes: short text fits
        return text
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    kept = data[: max(0, max_bytes - 32)].decode("utf-8", errors="ignore")
    return f"{kept}…[{len(data) - len(kept.encode())} bytes cut]"


def _int_setting(name: str, raw: str) -> int:
    from spanpoint.errors import ConfigurationError

    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a positive integer, not {raw!r}") from None
    if value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, not {raw!r}")
    return value
