"""How the SQLite store reads the JSON texts of a checkpoint row (issue 18 item 4).

The store parses a row's ``view`` and ``input_view`` with the C scanner directly (the path
a replay takes on every boundary); every text must read exactly as ``json.loads`` reads it,
and a text ``json.loads`` refuses must fail the same way, so a damaged row is still
reported as corrupted and executed again.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from spanpoint.stores.base import Checkpoint
from spanpoint.stores.sqlite import SqliteStore, _json_value

TEXTS = [
    '{"step": "lookup"}',
    '{"args": {"i": 1, "note": "\\u00e9\\ud800"}}',
    "{}",
    "[1, 2.5, NaN, -Infinity, null, true]",
    '"text"',
    ' {"a": 1} ',  # whitespace around the value
    b'{"a": 2}',
]
BAD = ['{"a": 1} trailing', "", "\ufeff{}", '{"a": 1', "nul", None]


@pytest.mark.parametrize("text", TEXTS)
def test_a_json_text_reads_as_json_loads_reads_it(text: str | bytes) -> None:
    assert repr(_json_value(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", BAD)
def test_a_text_json_loads_refuses_fails_the_same_way(text: str | None) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        json.loads(text)  # type: ignore[arg-type]
    with pytest.raises(type(expected.value)):
        _json_value(text)


def test_a_row_whose_view_is_not_json_is_corrupted_and_executes_again(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "checkpoints.db")
    store.put(
        Checkpoint(
            "k1", "R", "charge", "charge", "step", 0, "msgpack", b"\x81\xa1a\x01", "1" * 32,
            "2" * 16, view={"step": "charge"}, input_view={"args": {"amount": 1}},
        )
    )  # fmt: skip
    assert store.claim("k1", "me", 30.0).state == "committed"
    with sqlite3.connect(tmp_path / "checkpoints.db") as db:
        db.execute("UPDATE checkpoints SET view = ?", ('{"step": "charge"} and more',))
    claim = store.claim("k1", "me", 30.0)
    assert claim.state == "acquired" and claim.checkpoint is None
