"""A cassette file that is not what spanpoint wrote gives one clear ``CassetteError``.

Malformed files are generated (hypothesis, fixed seed) from a real recording: any node
replaced by any JSON value, any key deleted, the text cut anywhere, outputs nested past
the interpreter's limit, bytes that are not base64. Loading either works or raises a
``CassetteError`` that names the file (and the entry, when one is at fault); never a raw
``KeyError``, ``RecursionError`` or ``binascii.Error``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from fakes import ConversationModel
from spanpoint.cassettes import CassetteError


@tool
def lookup(ticket_id: int) -> str:
    """Look up a ticket."""
    return f"ticket {ticket_id}"


def _recorded(folder: Path) -> dict[str, Any]:
    plan = [
        [{"name": "lookup", "args": {"ticket_id": 7}}, {"name": "lookup", "args": {"ticket_id": 8}}]
    ]
    agent = create_agent(ConversationModel(plan=plan, final="Done."), [lookup])
    path = folder / "base.json"
    with spanpoint.cassette(path):
        agent.invoke({"messages": [{"role": "user", "content": "tickets 7 and 8"}]})
    return json.loads(path.read_text())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _nodes(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _nodes(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _nodes(v, (*at, i))
    return out


def _set(document: Any, at: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not at:
        return value
    parent = document
    for step in at[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[at[-1]]
    else:
        parent[at[-1]] = value
    return document


def _deep(document: dict[str, Any], index: int, depth: int = 5000) -> str:
    """``document`` with entry ``index``'s output nested ``depth`` lists deep (as text: the
    value itself is deeper than Python builds)."""
    document["calls"][index]["output"] = "DEEP"
    return json.dumps(document).replace('"DEEP"', "[" * depth + "]" * depth)


@st.composite
def malformed(draw: st.DrawFn, base: dict[str, Any]) -> str:
    document = json.loads(json.dumps(base))
    how = draw(st.sampled_from(["replace", "delete", "cut", "deep", "base64"]))
    if how == "cut":
        text = json.dumps(document)
        return text[: draw(st.integers(0, len(text) - 1))]
    if how == "deep":
        index = draw(st.integers(0, len(document["calls"]) - 1))
        return _deep(document, index, draw(st.sampled_from([300, 900, 5000])))
    if how == "base64":
        index = draw(st.integers(0, len(document["calls"]) - 1))
        document["calls"][index]["output"] = {"$bytes": draw(st.sampled_from(["@@", "a", "QQ="]))}
        return json.dumps(document)
    at = draw(st.sampled_from(_nodes(document)))
    return json.dumps(_set(document, at, draw(JSON), how == "delete"))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _recorded(tmp_path_factory.mktemp("base"))


@seed(20261205)
@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_malformed_cassette_gives_one_cassette_error_naming_file_and_entry(
    base: dict[str, Any], tmp_path: Path, data: st.DataObject
) -> None:
    text = data.draw(malformed(base))
    path = tmp_path / "cassette.json"
    path.write_text(text)
    try:
        with spanpoint.cassette(path, mode="none"):
            pass
    except CassetteError as exc:
        message = str(exc)
        assert str(path) in message
        assert "record" in message  # what to do
        if "malformed at entry" in message:
            assert "entry #" in message
    assert spanpoint.current_run() is None


def test_a_deeply_nested_output_names_its_entry(base: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(_deep(json.loads(json.dumps(base)), 1, depth=600))
    with pytest.raises(CassetteError, match=r"malformed at entry #2 .*field 'output'"):
        with spanpoint.cassette(path, mode="none"):
            pass
