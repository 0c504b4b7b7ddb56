"""Two cassette files compared call by call: what ``spanpoint diff A.json B.json`` prints.

A cassette's entries are keyed by content and position, so the same call with the same input
has the same key in both files: such pairs compare their outputs (content, as texts and tool
calls, not bytes). An entry whose key is in one file only is paired with the most alike
entry of the other file of the same kind and path (the call whose input changed), and the
difference of their requests is named as a replay miss names it: which message, tool
definition, model setting or tool argument. What remains is in one file only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Status = Literal["output_changed", "input_changed", "only_in_a", "only_in_b"]


@dataclass(frozen=True)
class CallChange:
    """One call that differs between the two cassettes."""

    status: Status
    kind: str
    path: str
    details: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (``spanpoint diff --json``)."""
        return {"status": self.status, "kind": self.kind, "path": self.path,
                "details": list(self.details)}  # fmt: skip


@dataclass(frozen=True)
class CassetteDiff:
    """The difference of cassettes ``a`` and ``b``: the calls that differ, and how many agree."""

    a: str
    b: str
    same: int
    changes: tuple[CallChange, ...]

    @property
    def equal(self) -> bool:
        """Whether every call of each file is in the other with the same output."""
        return not self.changes

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (``spanpoint diff --json``)."""
        return {"a": self.a, "b": self.b, "equal": self.equal, "same": self.same,
                "changes": [c.to_dict() for c in self.changes]}  # fmt: skip


def diff_cassettes(a: str | Path, b: str | Path) -> CassetteDiff:
    """Compare the cassette files ``a`` and ``b`` (:class:`~spanpoint.cassettes.CassetteError`
    when one is not a cassette)."""
    # For import time: the cassette module loads LangChain, paid only by a cassette diff.
    from spanpoint.cassettes import read_calls, request_changes

    calls_a, calls_b = read_calls(a), read_calls(b)
    by_key_b = {c["key"]: c for c in calls_b}
    same, changes = 0, []
    only_a, matched = [], set()
    for call in calls_a:
        other = by_key_b.get(call["key"])
        if other is None:
            only_a.append(call)
            continue
        matched.add(call["key"])
        was, now = _texts(call["output"]), _texts(other["output"])
        if was == now:
            same += 1
        else:
            changes.append(CallChange("output_changed", call["kind"], call["path"],
                                      _text_changes(was, now)))  # fmt: skip
    only_b = [c for c in calls_b if c["key"] not in matched]
    for call in only_a:
        twin = _nearest(call, only_b)
        if twin is None:
            changes.append(CallChange("only_in_a", call["kind"], call["path"]))
            continue
        only_b.remove(twin)
        old = (call.get("request") or {}).get("detail") or {}
        new = (twin.get("request") or {}).get("detail") or {}
        details = request_changes(call["kind"], old, new) or ["its position among equal calls"]
        changes.append(CallChange("input_changed", call["kind"], call["path"], tuple(details)))
    changes += [CallChange("only_in_b", c["kind"], c["path"]) for c in only_b]
    changes.sort(key=lambda c: (c.path, c.kind, c.status))
    return CassetteDiff(str(a), str(b), same, tuple(changes))


def _nearest(call: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any] | None:
    from spanpoint.cassettes import request_likeness  # for import time (see diff_cassettes)

    candidates = [o for o in others if o["kind"] == call["kind"] and o["path"] == call["path"]]
    if not candidates:
        return None
    old = (call.get("request") or {}).get("detail") or {}
    return max(
        candidates,
        key=lambda o: request_likeness(
            call["kind"], old, (o.get("request") or {}).get("detail") or {}
        ),
    )


def _texts(output: Any) -> list[str]:
    """What a reader compares of an output: its texts and tool calls (name and arguments),
    not the ids a provider mints or the usage it reports."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("content"), str) and value["content"]:
                out.append(value["content"])
            for call in value.get("tool_calls") or []:
                if isinstance(call, dict):
                    args = json.dumps(call.get("args"), sort_keys=True)
                    out.append(f"tool call {call.get('name')}({args})")
            for key, item in value.items():
                if key not in ("content", "tool_calls"):
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(output)
    return out


def _text_changes(was: list[str], now: list[str]) -> tuple[str, ...]:
    from spanpoint.cassettes import short_value  # for import time (see diff_cassettes)

    for i in range(max(len(was), len(now))):
        x = was[i] if i < len(was) else None
        y = now[i] if i < len(now) else None
        if x != y:
            return (f"output {short_value(x)} -> {short_value(y)}",)
    return ("output changed",)


def render_cassette_diff(result: CassetteDiff) -> list[str]:
    """The lines ``spanpoint diff`` prints for two cassettes (plain text, no markup)."""
    head = f"cassettes {result.a!r} and {result.b!r}: {result.same} call(s) the same"
    if result.equal:
        return [head + ", no difference"]
    lines = [head + f", {len(result.changes)} differ:"]
    for change in result.changes:
        lines.append(f"  {change.status:<15} {change.kind} {change.path!r}")
        lines += [f"      {detail}" for detail in change.details]
    return lines
