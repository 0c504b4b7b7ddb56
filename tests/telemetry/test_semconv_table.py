"""docs/semconv.md lists every name spanpoint emits (each a constant in spanpoint.semconv),
and its table of names renamed upstream is the one ``OTEL_SEMCONV_STABILITY_OPT_IN`` switches."""

from __future__ import annotations

import re
from pathlib import Path

from spanpoint import semconv

TABLE = Path(__file__).resolve().parents[2] / "docs" / "semconv.md"

#: The statuses a row may have (docs/semconv.md explains each).
STATUSES = ("stable", "development (upstream)", "renamed upstream", "proposal", "spanpoint's own")


def emitted_names() -> set[str]:
    """Every dotted name in ``spanpoint.semconv`` (attributes, events, metrics, spans)."""
    return {
        value
        for key, value in vars(semconv).items()
        if key.isupper()
        and isinstance(value, str)
        and re.fullmatch(r"[a-z_]+(\.[a-z_0-9]+)+", value)
    }


def section_rows(heading: str, columns: int) -> list[list[str]]:
    """The body rows of the tables under ``## {heading}`` (up to the next section)."""
    text = TABLE.read_text()
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start : end if end != -1 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == columns and cells[0].startswith("`"):
            rows.append(cells)
    return rows


def name_rows() -> dict[str, list[str]]:
    return {cells[0].strip("`"): cells for cells in section_rows("Every name", 4)}


def test_every_emitted_name_has_a_row_with_its_source_and_status() -> None:
    rows = name_rows()
    missing = sorted(emitted_names() - rows.keys())
    assert missing == [], f"add these names to docs/semconv.md: {missing}"
    for name in emitted_names():
        _, kind, source, status = rows[name]
        assert kind and source and status, f"docs/semconv.md: {name} needs a source and status"


def test_every_row_is_a_name_spanpoint_emits() -> None:
    stale = sorted(name_rows().keys() - emitted_names())
    assert stale == [], f"docs/semconv.md lists names semconv.py does not have: {stale}"


def test_each_status_is_one_of_the_list_and_a_proposal_names_its_pull_request() -> None:
    for name, (_, _, source, status) in name_rows().items():
        assert status.startswith(STATUSES), f"{name}: unknown status {status!r}"
        if status.startswith("proposal"):
            assert re.search(r"#\d+", source), f"{name}: a proposal cites its pull request"
        if status.startswith(("development", "renamed")):
            # where it was checked: a package version, a commit or a pull request
            assert re.search(r"\d+\.\d+|`[0-9a-f]{7}`|#\d+", source), f"{name}: {source!r}"


def test_the_renamed_names_are_the_ones_the_switch_covers() -> None:
    documented = {
        previous.strip("`"): newest.strip("`")
        for previous, newest, _ in section_rows("Names as of today", 3)
        if newest.startswith("`")
    }
    assert documented == semconv.GEN_AI_RENAMED
    rows = name_rows()
    for previous, newest in semconv.GEN_AI_RENAMED.items():
        assert rows[previous][3].startswith("renamed upstream"), previous
        assert "OTEL_SEMCONV_STABILITY_OPT_IN" in rows[newest][3], newest
