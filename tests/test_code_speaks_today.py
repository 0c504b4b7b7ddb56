"""Comments and docstrings in ``src/spanpoint`` speak to today's reader.

No issue numbers (``issue 16``, ``issues 15 and 16``, a bare ``#15``) and no measured time
figures (``30 µs``, ``~2 ms``): they belong in commit messages, design notes by topic and
``bench/README.md``, where they do not rot beside the code they once described.

Only what a reader reads as prose is checked: comments and docstrings (a string that is a
statement of its own: module, class, function and attribute docstrings), found with
:mod:`tokenize`. A string the code uses as a value (an error message, a metric description,
``"lookup_ticket#2"``) is the program's output and not checked here. An upstream reference
names its repository (``semantic-conventions-genai #445``) and is allowed.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

SRC = Path(__file__).resolve().parents[1] / "src" / "spanpoint"

_ISSUE_WORD = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
_HASH_NUMBER = re.compile(r"(?<![\w#])#\d+\b")
# The word right before ``#N`` names a repository (``owner/name`` or ``name-with-dashes``).
_REPOSITORY_BEFORE = re.compile(r"[\w.]+(?:[/-][\w.]+)+\s*$")
_TIME_FIGURE = re.compile(r"(?<![\d.,])\d[\d.,]*\s*(?:µs|μs|us|ms|ns)\b")

_STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
_SKIPPED = {tokenize.NL, tokenize.COMMENT}


def problems_in_text(text: str) -> list[str]:
    """What in one line of prose carries history: issue references and measured times."""
    issues = list(_ISSUE_WORD.finditer(text))
    found = [m.group(0) for m in issues]
    found += [
        m.group(0)
        for m in _HASH_NUMBER.finditer(text)
        if not _REPOSITORY_BEFORE.search(text[: m.start()])
        and not any(i.start() <= m.start() < i.end() for i in issues)
    ]
    found += [m.group(0) for m in _TIME_FIGURE.finditer(text)]
    return found


def _prose(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment line and docstring line of ``source``."""
    tokens = [
        t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.NL
    ]
    lines: list[tuple[int, str]] = []
    significant = [t for t in tokens if t.type not in _SKIPPED]
    for t in tokens:
        if t.type == tokenize.COMMENT:
            lines.append((t.start[0], t.string.lstrip("#:")))
    for i, t in enumerate(significant):
        if t.type != tokenize.STRING:
            continue
        before = significant[i - 1].type if i else tokenize.NEWLINE
        after = significant[i + 1].type if i + 1 < len(significant) else tokenize.ENDMARKER
        if before in _STATEMENT_START and after in (tokenize.NEWLINE, tokenize.ENDMARKER):
            for offset, text in enumerate(t.string.splitlines()):
                lines.append((t.start[0] + offset, text))
    return sorted(lines)


def violations(source: str) -> list[tuple[int, str]]:
    """``(line, found)`` for each issue reference or time figure in a comment or docstring."""
    return [(line, hit) for line, text in _prose(source) for hit in problems_in_text(text)]


# --- the checker itself ---------------------------------------------------------------------

_SAMPLE = '''"""Module docstring, issue 16 item 2."""
import time

LABEL = "issue 16"  # a value: not checked
WAIT = "took 30 µs"
PATH = "lookup_ticket#2"


def f(x):
    """Does x.

    Costs about 20–30 µs per call.
    """
    # why: see #15
    y = x  # upstream: semantic-conventions-genai #445 names it
    #: Proposed in open-telemetry/semantic-conventions #2912.
    z = {"key": "issues 3"}
    raise ValueError(f"was {y}, issue {z}")


class C:
    """A class."""

    limit = 3
    """Attribute docstring: ~2 ms at most."""
'''


def test_the_checker_finds_each_kind_in_comments_and_docstrings_only() -> None:
    assert violations(_SAMPLE) == [
        (1, "issue 16"),
        (12, "30 µs"),
        (14, "#15"),
        (25, "2 ms"),
    ]


_PLACES = ("comment", "docstring", "attribute docstring", "value", "f-string value")


def _source(place: str, text: str) -> tuple[str, int]:
    """A module holding ``text`` in ``place``, and the line ``text`` is on."""
    if place == "comment":
        return f"x = 1\n# {text}\ny = 2\n", 2
    if place == "docstring":
        return f'def f():\n    """First line.\n\n    {text}\n    """\n    return 1\n', 4
    if place == "attribute docstring":
        return f'LIMIT = 3\n"""{text}"""\n', 2
    if place == "value":
        return f'MESSAGE = "{text}"\nprint("{text}")\n', 1
    return f'name = "x"\nMESSAGE = f"{{name}}: {text}"\n', 2


_history = st.one_of(
    st.builds(
        lambda word, n, hash_: f"{word} {hash_}{n}",
        st.sampled_from(["issue", "Issue", "issues", "ISSUE"]),
        st.integers(0, 10_000),
        st.sampled_from(["", "#"]),
    ),
    st.builds(lambda n: f"see #{n}", st.integers(0, 10_000)),
    st.builds(
        lambda n, space, unit: f"about {n}{space}{unit} per call",
        st.integers(0, 100_000).map(lambda n: f"{n / 100:g}"),
        st.sampled_from(["", " "]),
        st.sampled_from(["µs", "μs", "us", "ms", "ns"]),
    ),
)


@given(place=st.sampled_from(_PLACES), text=_history)
def test_history_is_found_in_prose_and_never_in_values(place: str, text: str) -> None:
    source, line = _source(place, text)
    found = violations(source)
    if place in ("value", "f-string value"):
        assert found == []
    else:
        assert [at for at, _ in found] == [line]


_today = st.sampled_from(
    [
        "semantic-conventions-genai #445 calls it human_input",
        "open-telemetry/semantic-conventions #2912",
        "a path such as lookup_ticket#2",
        "the run's 3 steps, 10 issues in total",
        "2 seconds of lease, in bench/README.md",
        "msgpack is several times faster than JSON",
        "a CRC collision (about 3e-8 per result)",
    ]
)


@given(place=st.sampled_from(_PLACES), text=_today)
def test_prose_for_todays_reader_passes(place: str, text: str) -> None:
    source, _ = _source(place, text)
    assert violations(source) == []


# --- the package ----------------------------------------------------------------------------


def _package_violations() -> list[str]:
    return [
        f"{path.relative_to(SRC.parents[1])}:{line}: {hit}"
        for path in sorted(SRC.rglob("*.py"))
        for line, hit in violations(path.read_text(encoding="utf-8"))
    ]


def test_no_issue_numbers_or_time_figures_in_comments_and_docstrings() -> None:
    found = _package_violations()
    assert not found, (
        "comments and docstrings speak to today's reader: say why, move issue numbers to "
        "commit messages and figures to bench/README.md:\n" + "\n".join(found)
    )
