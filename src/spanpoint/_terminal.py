"""Text from users and stores, made safe to print on a terminal through Rich.

A run id, a step name or an exception message is data: printed as Rich markup, ``[/]`` in it
raises ``MarkupError`` and ``[blink]`` restyles the output; printed raw, an ANSI or OSC escape
sequence (``\\x1b[2J``, ``\\x1b]0;title\\x07``) drives the reader's terminal. :func:`visible`
shows every control character as an escape and escapes the markup.
"""

from __future__ import annotations

import re

from rich.markup import escape

# C0 controls, DEL, C1 controls (U+009B is a one-character CSI), the line and paragraph
# separators, the bidirectional overrides and isolates (text that reads differently from what
# it is), and lone surrogates (a terminal cannot encode them).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: object) -> str:
    """``str(value)`` as Rich markup that prints it literally, control characters as escapes.

    ``visible("a[/]\\x1b[31m")`` prints ``a[/]\\x1b[31m`` (with a literal backslash).
    """
    return escape(_CONTROL.sub(_escape_char, str(value)))


def quoted(value: object) -> str:
    """:func:`visible` between single quotes, for a value inside a sentence."""
    return f"'{visible(value)}'"
