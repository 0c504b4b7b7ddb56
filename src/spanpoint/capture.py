"""What spanpoint captures from graphs, models and tools — metadata first, secrets never.

Defaults follow the GenAI conventions: message free text is *not* captured unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (or the policy) opts in; full graph
state values are off; config and context are captured with secret-looking keys redacted.
Every captured value is bounded (bytes, depth, items) and cycle-safe.

Keys are matched by normalized *tokens*, never by substring. A key is split at ``_``, ``-``,
``.``, spaces and camelCase humps and lower-cased (``Ocp-Apim-Subscription-Key`` → ocp, apim,
subscription, key). It is secret when:

* a token is a secret word (:data:`SECRET_WORDS`: ``password``, ``token``, ``jwt``, ``ssn``,
  ``webhook`` ...), or a run-together compound that ends in one (``accesstoken``,
  ``clientsecret``) or is a known qualifier + ``key`` (``privatekey``, ``openaikey``);
* two adjacent tokens written together are such a token (``passWord`` → ``password``);
* an adjacent pair is in :data:`SECRET_PAIRS` (``session_id``, ``connection_string``);
* the *last* token is ``key`` after another token (``openai_key``, ``x-functions-key``,
  ``*-subscription-key``), unless that token names a structural key
  (:data:`STRUCTURAL_KEY_WORDS`: ``primary_key``, ``sort_key``, ``cache_key``).

So ``max_tokens``, ``author``, ``keyboard``, ``monkey``, ``primary_key_column`` and a bare
``key`` are kept: ``tokens``, ``author``, ``keyboard`` and ``monkey`` are other words, and
``key`` alone or in the middle of a name is a lookup key far more often than a credential.

Values are redacted by pattern whatever their key (:func:`redact_text`): provider tokens
(``sk-…``, ``ghp_…``, ``AKIA…``, JWTs, ``Bearer …``), the password of a DSN or URL
(``postgresql://user:****@host``), and secret-named ``name=value`` pairs in query strings and
connection strings (``?token=****``, ``Password=****;``). Exception messages and stack
traces go through the same patterns before they leave the process (:func:`exception_text`,
:func:`record_failure`).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import sys
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

from spanpoint.errors import ConfigurationError

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
        "secrets",
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
        "jwt",
        "webhook",
        "webhooks",
        "privatekey",
        "ssn",
        "dsn",
        "otp",
        "cvv",
    }
)
#: Run-together compounds ending in one of these are secret (``accesstoken``, ``dbpassword``).
SECRET_SUFFIXES: tuple[str, ...] = ("password", "passwd", "secret", "token", "passphrase")
#: ``<word>key`` written as one token is secret for these words (``privatekey``, ``openaikey``).
KEY_QUALIFIERS: frozenset[str] = frozenset(
    {
        "api",
        "private",
        "secret",
        "access",
        "subscription",
        "function",
        "functions",
        "master",
        "signing",
        "encryption",
        "account",
        "license",
        "admin",
        "auth",
        "openai",
        "anthropic",
        "azure",
        "aws",
        "google",
        "gemini",
        "mistral",
        "cohere",
        "groq",
        "stripe",
        "github",
        "slack",
        "sharedaccess",
    }
)
#: Words before a final ``key`` that name a structural key, not a credential (``sort_key``).
STRUCTURAL_KEY_WORDS: frozenset[str] = frozenset(
    {
        "primary",
        "foreign",
        "public",
        "sort",
        "partition",
        "cache",
        "idempotency",
        "dedup",
        "dedupe",
        "lookup",
        "row",
        "hash",
        "index",
        "unique",
        "composite",
        "natural",
        "surrogate",
        "shard",
        "routing",
        "group",
        "object",
        "message",
        "thread",
        "run",
        "step",
        "checkpoint",
        "state",
        "store",
        "item",
        "entry",
        "cursor",
        "page",
        "order",
        "namespace",
        "bucket",
        "join",
        "dict",
        "map",
        "s3",
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
        ("connection", "string"),
        ("conn", "str"),
        ("social", "security"),
        ("credit", "card"),
        ("card", "number"),
    }
)
#: The mask put in place of the password of a DSN or URL, or of a secret ``name=value``.
MASK = "****"
#: Values that look like credentials whatever their key is called. No ``\b``: without it the
#: engine skips ahead to a possible first character, several times faster on the plain text
#: most values are; :func:`redact_text` checks that a match starts a word.
SECRET_VALUE = re.compile(
    r"(?:sk-[A-Za-z0-9_-]{16,}|Bearer\s+[A-Za-z0-9._~+/-]{8,}=*|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|[rs]k_(?:live|test)_[A-Za-z0-9]{10,}"
    r"|AIza[0-9A-Za-z_-]{30,}|xox[baprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}(?![A-Za-z0-9_])"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|Basic\s+(?=[A-Za-z0-9+/]+[A-Z0-9+/])[A-Za-z0-9+/]{12,}={0,2}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)?)"
)
#: ``scheme://user:password@`` in a DSN or URL: the password is masked, the user kept.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\[\]]*:)([^\s@/]+)(@)")
#: ``name=value`` in a query string, a connection string or free text; masked when ``name``
#: is secret by the key rule (or a query-string credential such as ``key``, ``sig``, ``code``).
_NAMED_VALUE = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z][A-Za-z0-9_.-]{0,63})(\s*=\s*[\"']?)([^\s&;,#'\"]+)"
)
#: Query-string parameters that carry a credential although their name is no secret word.
_QUERY_SECRETS = frozenset({"key", "sig", "code", "pass", "pw", "p"})
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\b|[^A-Za-z])|[A-Z]?[a-z]+|[0-9]+")

_TRUE = {"1", "true", "yes", "on"}
_SCALARS = frozenset({bool, int, float})

#: LangChain's BaseMessage once its module is loaded. For import time, capture does not import
#: LangChain (every spanpoint import reaches this module, the CLI too: issue 18): a value can
#: only be a message if LangChain's message module was imported, so until then none is.
_MESSAGE_CLASS: list[type] = []


def _is_message(value: Any) -> bool:
    if not _MESSAGE_CLASS:
        module = sys.modules.get("langchain_core.messages.base")
        cls = getattr(module, "BaseMessage", None) if module is not None else None
        if not isinstance(cls, type):
            return False
        _MESSAGE_CLASS.append(cls)
    return isinstance(value, _MESSAGE_CLASS[0])


def key_words(key: str) -> list[str]:
    """Split a key into lower-case words: ``apiKey`` → api, key; ``MAX_TOKENS`` → max, tokens.

    ``_``, ``-``, ``.``, spaces and camelCase humps all separate words."""
    return [w.lower() for w in _WORD.findall(key.replace("-", "_"))]


def _secret_word(word: str, extra: frozenset[str]) -> bool:
    """One lower-case token: a secret word, or a run-together compound that makes one."""
    if word in SECRET_WORDS or word in extra:
        return True
    if len(word) > 4:
        if word.endswith(SECRET_SUFFIXES):
            return True
        if word.endswith("key") and word[:-3] in KEY_QUALIFIERS:
            return True
    return False


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
    if any(_secret_word(w, extra) for w in words):
        return True
    for pair in itertools.pairwise(words):
        if pair in SECRET_PAIRS or _secret_word(pair[0] + pair[1], extra):
            return True
    # A final "key" after a qualifier (openai_key, x-functions-key, *-subscription-key), but
    # not a structural one (primary_key, sort_key) and not a bare "key".
    return len(words) >= 2 and words[-1] == "key" and words[-2] not in STRUCTURAL_KEY_WORDS


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
        if _is_message(value):
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


_DEFAULT_POLICY: CapturePolicy | None = None


def default_policy() -> CapturePolicy:
    """The process's capture policy: the one ``configure()`` chose, else the environment's.

    ``spanpoint.configure`` sets it (:func:`set_default_policy`), so events and spans read
    their policy here without reaching the settings (and through them the stores).
    """
    global _DEFAULT_POLICY
    found = _DEFAULT_POLICY
    if found is None:
        found = _DEFAULT_POLICY = CapturePolicy.from_env()
    return found


def set_default_policy(policy: CapturePolicy | None) -> None:
    """Make ``policy`` the process default (None: read the environment again on next use)."""
    global _DEFAULT_POLICY
    _DEFAULT_POLICY = policy


def redact_text(text: str) -> str:
    """Redact credentials in free text: tokens become ``[REDACTED]``; the password of a DSN
    or URL and the value of a secret ``name=value`` become ``****``."""
    if not text:
        return text
    text = SECRET_VALUE.sub(_redact_token, text)
    if "://" in text:  # cheap pre-checks: most captured strings hold neither
        text = _URL_CREDENTIALS.sub(_mask_url_password, text)
    if "=" in text:
        text = _NAMED_VALUE.sub(_mask_named_value, text)
    return text


def _redact_token(match: re.Match[str]) -> str:
    start = match.start()
    if start and match[0][0] != "-":  # a token starts a word: "task-…" holds no "sk-…"
        before = match.string[start - 1]
        if before.isalnum() or before == "_":
            return match[0]
    return REDACTED


def _mask_url_password(match: re.Match[str]) -> str:
    return f"{match[1]}{MASK}{match[3]}"


def _mask_named_value(match: re.Match[str]) -> str:
    name, start = match[1], match.start()
    in_query = start > 0 and match.string[start - 1] in "?&"
    if match[3] in (MASK, REDACTED) or not (
        is_secret_key(name) or (in_query and name.lower() in _QUERY_SECRETS)
    ):
        return match[0]
    return f"{name}{match[2]}{MASK}"


def exception_text(exc: BaseException) -> str:
    """``"Type: message"`` of an exception with credentials redacted: the one form in which an
    exception message leaves the process (span status, journal, ``spanpoint show``)."""
    return f"{type(exc).__name__}: {redact_text(_safe_str(exc))}"


def record_failure(span: Any, exc: BaseException) -> None:
    """Record ``exc`` on ``span`` as OpenTelemetry does, with its message and stack trace
    redacted, and set the span's status to ERROR with the redacted ``"Type: message"``.

    Every span path that records an exception goes through here: the SDK's own
    ``record_exception`` would export ``str(exc)`` and the raw traceback.
    """
    from opentelemetry.trace import Status, StatusCode

    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    span.record_exception(
        exc,
        attributes={
            "exception.message": redact_text(_safe_str(exc)),
            "exception.stacktrace": redact_text(stack),
        },
    )
    span.set_status(Status(StatusCode.ERROR, exception_text(exc)))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not turn one failure into another
        return f"<unprintable {type(exc).__name__}>"


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
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a positive integer, not {raw!r}") from None
    if value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, not {raw!r}")
    return value
