"""The public face: ``spanpoint.__all__`` is exactly the names docs/api.md documents, each
importable from ``spanpoint`` and documented by a docstring."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import spanpoint

ROOT = Path(__file__).resolve().parents[1]

#: The first column of docs/api.md's table: `name` in backticks.
DOCUMENTED = tuple(
    re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", (ROOT / "docs" / "api.md").read_text(), re.M)
)


def test_all_is_exactly_the_documented_names() -> None:
    assert len(DOCUMENTED) == len(set(DOCUMENTED)), "a name is documented twice"
    assert sorted(spanpoint.__all__) == sorted(DOCUMENTED)


@pytest.mark.parametrize(
    "name",
    ["MissingCheckpointerError", "NotInterruptedError", "WaitInsideBoundaryError", "CapturePolicy"],
)
def test_errors_users_receive_and_the_capture_policy_are_exported(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from spanpoint import {name}", namespace)
    assert name in spanpoint.__all__
    assert inspect.getdoc(namespace[name])


@pytest.mark.parametrize("name", sorted(spanpoint.__all__))
def test_each_public_name_imports_and_has_a_docstring(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from spanpoint import {name}", namespace)
    value = namespace[name]
    assert value is getattr(spanpoint, name)
    if name != "__version__":
        assert inspect.getdoc(value), f"spanpoint.{name} has no docstring"
