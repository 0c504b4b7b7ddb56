"""One spec builder: no module but ``spanpoint.calls.spec`` builds a model or tool call's
boundary spec or has a "not cacheable" rule of its own, so a key rule fixed there is fixed
for the middleware, the seams and zero-code at once."""

from __future__ import annotations

import ast
from pathlib import Path

import spanpoint

SRC = Path(spanpoint.__file__).resolve().parent
CALL_KINDS = {"KIND_MODEL_CALL", "KIND_TOOL_CALL"}


def call_spec_builders() -> set[str]:
    """Modules that construct a ``BoundarySpec`` of a model or tool call."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or getattr(node.func, "id", None) != "BoundarySpec":
                continue
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg == "kind" and getattr(value, "attr", None) in CALL_KINDS:
                    found.add(str(path.relative_to(SRC)))
    return found


def not_cacheable_rules() -> set[str]:
    """Modules of the calls strategy with a "not cacheable" rule (steps have their own)."""
    found = set()
    for path in (SRC / "calls").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and "not_cacheable" in node.name:
                found.add(str(path.relative_to(SRC)))
    return found


def test_only_the_spec_builder_builds_a_call_spec() -> None:
    assert call_spec_builders() == {"calls/spec.py"}


def test_the_not_cacheable_rule_exists_once() -> None:
    assert not_cacheable_rules() == {"calls/spec.py"}
