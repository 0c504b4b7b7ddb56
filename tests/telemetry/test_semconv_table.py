"""docs/semconv.md lists every name spanpoint emits (each a constant in spanpoint.semconv)."""

from __future__ import annotations

import re
from pathlib import Path

from spanpoint import semconv

TABLE = Path(__file__).resolve().parents[2] / "docs" / "semconv.md"


def emitted_names() -> set[str]:
    """Every dotted name in ``spanpoint.semconv`` (attributes, events, metrics, spans)."""
    return {
        value
        for key, value in vars(semconv).items()
        if key.isupper()
        and isinstance(value, str)
        and re.fullmatch(r"[a-z_]+(\.[a-z_0-9]+)+", value)
    }


def test_every_emitted_name_has_a_row_with_its_source_and_status() -> None:
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    missing = sorted(emitted_names() - rows.keys())
    assert missing == [], f"add these names to docs/semconv.md: {missing}"
    for name in emitted_names():
        _, kind, source, status = rows[name]
        assert kind and source and status, f"docs/semconv.md: {name} needs a source and status"
