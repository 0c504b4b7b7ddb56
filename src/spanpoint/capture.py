"""What spanpoint captures from graphs, models and tools — metadata first, secrets never.

Defaults follow the GenAI conventions: message free text is *not* captured unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (or the policy) opts in; full graph
state values are off; config and context are captured with secret-looking keys redacted.
Every captured value is bounded (bytes, depth, items) and cycle-safe.

Keys are matched by normalized *words*, never by substring. A key is split at ``_``, ``-``,
``.``, spaces and camelCase humps and lower-cased (``Ocp-Apim-Subscription-Key`` → ocp, apim,
subscription, key); a plural names the same secret as its singular (``passwords``,
``api_keys``). It is secret when:

* a word is a secret word (:data:`SECRET_WORDS`: ``password``, ``secret``, ``jwt``, ``ssn``,
  ``webhook`` ...), or a run-together compound that ends in one (``dbpassword``,
  ``clientsecret``) or is a known qualifier + ``key`` (``privatekey``, ``openaikey``);
* two adjacent words written together are such a word (``passWord`` → ``password``);
* an adjacent pair is in :data:`SECRET_PAIRS` (``session_id``, ``connection_string``);
* the *last* word is ``key`` after another word (``openai_key``, ``x-functions-key``,
  ``*-subscription-key``), unless that word names a structural key
  (:data:`STRUCTURAL_KEY_WORDS`: ``primary_key``, ``sort_key``, ``cache_key``);
* ``token`` is a credential (``token``, ``authToken``, ``next_page_token``) unless the key
  counts model tokens: a plural ``tokens`` or a count word (:data:`COUNT_WORDS`) in the key
  makes it a number (``max_tokens``, ``token_usage``, ``input_token_details``,
  ``prompt_token_count``), except after a credential qualifier (:data:`TOKEN_QUALIFIERS`:
  ``access_tokens``, ``refresh_token``, ``hf_token``). A replayed ``usage_metadata`` must
  add up, so token counts are never masked.

So ``max_tokens``, ``author``, ``keyboard``, ``monkey``, ``primary_key_column`` and a bare
``key`` are kept: ``author``, ``keyboard`` and ``monkey`` are other words, and ``key`` alone
or in the middle of a name is a lookup key far more often than a credential.

Values are redacted by shape whatever their key (:func:`redact_text`): provider tokens
(:data:`SECRET_VALUE`: ``sk-…``, ``ghp_…``, ``glpat-…``, ``hf_…``, ``npm_…``, ``pypi-…``,
``xoxb-…``, ``SG.…``, ``shpat_…``, ``sk_live_…``, ``AKIA…``, ``AIza…``, JWTs, ``Bearer …``,
private key blocks, Slack and Discord webhook URLs), the password of a DSN or URL
(``postgresql://user:****@host``), and the value of every secret-named pair in free text:
``name=value`` in query and connection strings, ``name: value`` in headers, and the JSON or
repr of a mapping (``?token=****``, ``Password=****;``, ``{'api_key': '****'}``). Exception
messages and stack traces go through the same patterns before they leave the process
(:func:`exception_text`, :func:`record_failure`); so do spans, logs, the run journal,
``spanpoint show`` and cassettes, which all redact through this module.
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
#: Words that make ``token``/``tokens`` in the same key a *count* of model tokens, never a
#: credential (``token_usage``, ``input_token_details``, ``prompt_token_count``).
COUNT_WORDS: frozenset[str] = frozenset(
    {
        "usage",
        "count",
        "counts",
        "num",
        "number",
        "total",
        "max",
        "min",
        "limit",
        "limits",
        "budget",
        "details",
        "detail",
        "input",
        "output",
        "prompt",
        "completion",
        "completions",
        "cached",
        "cache",
        "reasoning",
        "audio",
        "remaining",
        "used",
        "rate",
        "left",
        "length",
        "len",
        "size",
        "candidates",
        "thoughts",
        "billed",
        "prediction",
        "accepted",
        "rejected",
        "estimated",
        "per",
        "creation",
        "read",
        "tool",
        "text",
        "image",
        "ephemeral",
    }
)
#: Words before ``token``/``tokens`` that make it a credential even among count words
#: (``access_tokens``, ``refresh_token``, ``hf_token``).
TOKEN_QUALIFIERS: frozenset[str] = frozenset(
    {
        "access",
        "refresh",
        "auth",
        "api",
        "bearer",
        "session",
        "csrf",
        "xsrf",
        "oauth",
        "id",
        "personal",
        "secret",
        "private",
        "service",
        "client",
        "device",
        "bot",
        "app",
        "hf",
        "npm",
        "pypi",
        "registry",
        "deploy",
        "webhook",
        "security",
        "sas",
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
#: Values that look like credentials whatever their key is called: the documented shapes of
#: provider tokens (OpenAI and Anthropic ``sk-``, GitHub, GitLab, Hugging Face, npm, PyPI,
#: Slack, SendGrid, Shopify, Stripe, AWS access key ids, Google), JWTs, ``Bearer``/``Basic``
#: credentials, private key blocks, and Slack/Discord webhook URLs (the URL is the secret).
#: No ``\b``: without it the engine skips ahead to a possible first character, several times
#: faster on the plain text most values are; :func:`redact_text` checks that a match starts
#: a word.
SECRET_VALUE = re.compile(
    r"(?:sk-[A-Za-z0-9_-]{16,}|Bearer\s+[A-Za-z0-9._~+/-]{8,}=*|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|[rs]k_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,}"
    r"|gl(?:pat|dt|rt|ptt|ft|soat|cbt|imt|agent)-[A-Za-z0-9_-]{20,}"
    r"|hf_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{40,}"
    r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}|shp(?:at|ss|ca|pa)_[A-Za-z0-9]{20,}"
    r"|AIza[0-9A-Za-z_-]{30,}|ya29\.[A-Za-z0-9_-]{20,}|xox[a-z]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9_])"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|Basic\s+(?=[A-Za-z0-9+/]+[A-Z0-9+/])[A-Za-z0-9+/]{12,}={0,2}"
    r"|https?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]+"
    r"|https?://(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]+"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)?)"
)
#: ``scheme://user:password@`` in a DSN or URL: the password is masked, the user kept.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\[\]]*:)([^\s@/]+)(@)")
#: ``name=value`` or ``name: value`` in a query string, a connection string, a header, or the
#: JSON or Python repr of a mapping in free text (``'api_key': 'X'``, ``"password": "a b"``).
#: The value is masked when ``name`` is secret by the key rule (or, in a query string, a
#: credential such as ``key``, ``sig``, ``code``). :func:`_mask_pairs` finds each separator
#: with ``str.find`` and reads the name back from it (:data:`_NAME_BEFORE`), so plain text
#: costs a scan for two characters, not a regex attempt at every letter.
_SEPARATOR = re.compile(r"[:=]")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
#: The name before a separator, optionally quoted, read *backwards* (matched on the reversed
#: text before the separator, so the match is anchored): groups quote, reversed name.
_NAME_BEFORE = re.compile(r"\s*([\"']?)([A-Za-z0-9_.-]{1,64})\1")
#: The value after a separator. Groups: an already masked value, a quote and the quoted
#: value, an unquoted value, the bracket that opens a list or mapping (masked whole).
_VALUE = re.compile(
    r"\s*(?:(\[REDACTED\]|\*\*\*\*)(?![^\s&;,#'\"}\]])"
    r"|([\"'])((?:\\.|(?!\2)[^\\\n])+)\2"
    r"|([^\s&;,#'\"}\]{\[(][^\s&;,#'\"}\]]*)|([\[{(]))"
)
_CLOSING = {"[": "]", "{": "}", "(": ")"}
#: Query-string parameters that carry a credential although their name is no secret word.
_QUERY_SECRETS = frozenset({"key", "sig", "code", "pass", "pw", "p"})
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\b|[^A-Za-z])|[A-Z]?[a-z]+|[0-9]+")

_TRUE = {"1", "true", "yes", "on"}
_SCALARS = frozenset({bool, int, float})

#: LangChain's BaseMessage once its module is loaded. For import time, capture does not import
#: LangChain (every spanpoint import reaches this module, the CLI's too): a value can
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


def _singular(word: str) -> str:
    """``passwords`` → ``password``, ``keys`` → ``key``: a plural names the same secret."""
    if len(word) > 2 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _token_is_secret(raw: list[str], index: int, extra: frozenset[str]) -> bool | None:
    """Whether the ``token`` in ``raw[index]`` names a credential: None when the word holds
    no ``token``, False when the key counts model tokens (``max_tokens``, ``token_usage``)."""
    word = raw[index]
    plural = word.endswith("tokens")
    base = word[:-1] if plural else word
    if not base.endswith("token"):
        return None
    qualifier = base[: -len("token")] or (raw[index - 1] if index else "")
    if (
        qualifier in TOKEN_QUALIFIERS
        or qualifier in KEY_QUALIFIERS
        or (qualifier and _secret_word(qualifier, extra))
    ):
        return True
    # A plural, or a count word anywhere in the key: a number of model tokens.
    return not (plural or qualifier in COUNT_WORDS or any(w in COUNT_WORDS for w in raw))


# The same few keys (argument and config names) come back on every call: split them once.
@functools.lru_cache(maxsize=4096)
def _is_secret_word_key(key: str, extra: frozenset[str]) -> bool:
    raw = key_words(key)
    if extra and any(w in extra for w in raw):
        return True
    words: list[str] = []
    for index, word in enumerate(raw):
        token = _token_is_secret(raw, index, extra)
        if token:
            return True
        # A token count joins no pair: "prompt" + "token" is no run-together secret.
        words.append("·" if token is False else _singular(word))
    if any(_secret_word(w, extra) for w in words):
        return True
    for pair in itertools.pairwise(words):
        if pair in SECRET_PAIRS or _secret_word(pair[0] + pair[1], extra):
            return True
    # A final "key" after a qualifier (openai_key, x-functions-key, *-subscription-key), but
    # not a structural one (primary_key, sort_key) and not a bare "key".
    return len(words) >= 2 and raw[-1] == "key" and words[-2] not in STRUCTURAL_KEY_WORDS


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
    if "=" in text or ":" in text:
        text = _mask_pairs(text)
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


def _mask_pairs(text: str) -> str:
    """Mask the value of each secret ``name=value`` / ``name: value`` pair in ``text``.

    Every separator is looked at, including those inside the value of a pair whose name is
    not secret: that value may hold a pair that is (``url=https://h/?api_key=X``,
    ``error: token=X``). A ``:`` after a plain word in the middle of prose is no pair
    (:func:`_keyed`)."""
    out: list[str] = []
    done = 0
    sep = _SEPARATOR.search(text)
    while sep is not None:
        at = sep.start()
        pos = at + 1
        named = _NAME_BEFORE.match(text[max(0, at - 72) : at][::-1])
        start = at - named.end() if named else 0
        if (
            named
            and named[2][-1].isalpha()
            and (start == 0 or text[start - 1] not in _NAME_CHARS)
            and start >= done
        ):
            in_query = start > 0 and text[start - 1] in "?&"
            name = named[2][::-1]
            if (text[at] == "=" or named[1] or _keyed(text, start, name)) and (
                is_secret_key(name) or (in_query and name.lower() in _QUERY_SECRETS)
            ):
                value = _VALUE.match(text, at + 1)
                if value is not None and value[1] is None:
                    group = next(g for g in (3, 4, 5) if value.start(g) >= 0)
                    end = _closing(text, value.start(5)) if group == 5 else value.end(group)
                    out += (text[done : value.start(group)], MASK)
                    done = pos = end
        sep = _SEPARATOR.search(text, pos)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _keyed(text: str, start: int, name: str) -> bool:
    """Whether an unquoted ``name:`` at ``start`` is a key, not a word of prose ("reset your
    password: go to settings"): a compound name (``api_key``, ``X-Api-Key``, ``apiKey``), or
    one that starts a line or follows an opening bracket, a comma or a semicolon."""
    if any(c in name for c in "_-.") or not name[1:].islower():
        return True
    before = text[:start].rstrip(" \t")
    return not before or before[-1] in "\n{[(,;"


def _closing(text: str, start: int) -> int:
    """The end of the bracketed value opening at ``start`` (quoted text skipped); the end of
    the line when it is not closed there."""
    stack: list[str] = []
    quote = ""
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in _CLOSING:
            stack.append(_CLOSING[ch])
        elif ch == "\n":
            break
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return i


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
