"""The walk of two runs, boundary by boundary: pairing, then inputs and outputs compared
(see :mod:`spanpoint.diffs` for the rules). Reads the store protocol only."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spanpoint import _json, semconv, serde
from spanpoint.calls.cost import run_cost
from spanpoint.capture import default_policy, redact_text, truncate
from spanpoint.diffs.types import (
    Change,
    Divergence,
    InputDiff,
    MessageChange,
    OutputDiff,
    Reason,
    RunDiff,
    RunSide,
    ValueChange,
)
from spanpoint.errors import SpanpointError, UnknownRunError
from spanpoint.forks import attempt_steps, chosen_attempt
from spanpoint.stores.base import BoundaryRecord, Checkpoint, CheckpointStore, RunRecord

TEXT_LIMIT = 2000  # bytes of one decoded output text kept in a diff


def run_boundaries(
    checkpoints: Sequence[Checkpoint], journal: Sequence[BoundaryRecord]
) -> list[tuple[str, Checkpoint]]:
    """A run's committed boundaries as its :func:`chosen_attempt` went through them,
    labelled as :func:`attempt_steps` labels them, in commit order.

    They are what that attempt executed and what it replayed (of a fork's copies, or of
    earlier attempts); a fork that no attempt ran yet is all its copies. Times are the
    attempt's own: a replayed boundary's come from the journal. One attempt, never a mix:
    a boundary replayed again by a later attempt keeps one place and one label.
    """
    steps = attempt_steps(checkpoints, journal, chosen_attempt(checkpoints, journal))
    committed = [s for s in steps if s.checkpoint is not None]
    committed.sort(key=lambda s: s.ended_at_ns)  # stable: ties keep start order
    return [(s.label, s.checkpoint) for s in committed if s.checkpoint is not None]


def diff_runs(store: CheckpointStore, run_a: str, run_b: str) -> RunDiff:
    """Compare runs ``run_a`` and ``run_b`` of ``store`` down to their first divergence.

    A run is one the store has a record or checkpoints of (a fork has checkpoints before it
    first runs). Raises :class:`spanpoint.errors.UnknownRunError` when it has neither.
    """
    sides, walks, notes = [], [], []
    for run_id in (run_a, run_b):
        record = store.get_run(run_id)
        checkpoints = store.list_checkpoints(run_id)
        if record is None and not checkpoints:
            raise UnknownRunError(
                f"no run {run_id!r} in {store.description}; list the runs with "
                "`spanpoint runs` (or pass --store for another store)"
            )
        journal = store.list_journal(run_id)
        walk = run_boundaries(checkpoints, journal)
        sides.append(_side(store, run_id, record, walk, journal))
        walks.append(walk)
        if any(cp.fingerprint is None for _, cp in walk):
            notes.append(
                f"input data is missing for boundaries of run {run_id!r} (committed before "
                "spanpoint kept it): they are compared by output only"
            )
    found, same = _first_divergences(walks[0], walks[1], notes)
    first, then = [*found, None, None][:2]
    return RunDiff(sides[0], sides[1], same, first, then, tuple(notes))


def _pairs(
    walk_a: Sequence[tuple[str, Checkpoint]], walk_b: Sequence[tuple[str, Checkpoint]]
) -> dict[int, int]:
    """Which boundary of run B each boundary of run A is (index to index).

    First the same call with the same input: equal identity path, ordinal and fingerprint,
    what entered the key but the run id (parallel calls match whatever order they started
    in). Then, of the rest, the same label: the Nth call of a path, whose input may differ.
    """
    exact: dict[tuple[str, int, str], int] = {}
    for j, (_, cp) in enumerate(walk_b):
        key = _call_key(cp)
        if key is not None:
            exact.setdefault(key, j)
    pairs: dict[int, int] = {}
    for i, (_, cp) in enumerate(walk_a):
        key = _call_key(cp)
        if key is not None and key in exact:
            pairs[i] = exact.pop(key)
    taken = set(pairs.values())
    by_label = {label: j for j, (label, _) in enumerate(walk_b) if j not in taken}
    for i, (label, _) in enumerate(walk_a):
        if i not in pairs and by_label.get(label) is not None:
            pairs[i] = by_label.pop(label)
    return pairs


def _call_key(cp: Checkpoint) -> tuple[str, int, str] | None:
    if cp.identity is None or cp.fingerprint is None:
        return None  # a row from before input data: paired by label only
    return (cp.identity, cp.ordinal, cp.fingerprint)


def _first_divergences(
    walk_a: Sequence[tuple[str, Checkpoint]],
    walk_b: Sequence[tuple[str, Checkpoint]],
    notes: list[str],
) -> tuple[list[Divergence], int]:
    """The first two divergent boundaries (ordered by their earlier position in either run,
    run A's first on a tie), and how many paired boundaries before the first are equal."""
    pairs = _pairs(walk_a, walk_b)
    # (position, 0 for a boundary of run A, label, its checkpoint in A, in B)
    candidates: list[tuple[int, int, str, Checkpoint | None, Checkpoint | None]] = []
    equal_at: list[int] = []
    for i, (label, cp_a) in enumerate(walk_a):
        j = pairs.get(i)
        if j is None:
            candidates.append((i, 0, label, cp_a, None))
            continue
        cp_b = walk_b[j][1]
        if _input_changed(cp_a, cp_b) or _output_changed(cp_a, cp_b, notes):
            candidates.append((min(i, j), 0, label, cp_a, cp_b))
        else:
            equal_at.append(min(i, j))
    paired_b = set(pairs.values())
    for j, (label, cp_b) in enumerate(walk_b):
        if j not in paired_b:
            candidates.append((j, 1, label, None, cp_b))
    candidates.sort(key=lambda c: (c[0], c[1]))
    if not candidates:
        return [], len(equal_at)
    same = sum(1 for p in equal_at if p < candidates[0][0])
    found = [_divergence(p + 1, label, a, b, notes) for p, _, label, a, b in candidates[:2]]
    return found, same


def _divergence(
    position: int,
    label: str,
    cp_a: Checkpoint | None,
    cp_b: Checkpoint | None,
    notes: list[str],
) -> Divergence:
    present = cp_a if cp_a is not None else cp_b
    assert present is not None
    output = _output_diff(cp_a, cp_b, notes)
    if cp_a is None or cp_b is None:
        reason: Reason = "only_in_b" if cp_a is None else "only_in_a"
        return Divergence(position, label, present.kind, reason, None, output)
    inputs = input_diff(cp_a, cp_b)
    reason = "input" if inputs.changed else "output"
    return Divergence(position, label, present.kind, reason, inputs, output)


def _side(
    store: CheckpointStore,
    run_id: str,
    record: RunRecord | None,
    walk: Sequence[tuple[str, Checkpoint]],
    journal: Sequence[BoundaryRecord],
) -> RunSide:
    spans: dict[int, list[int]] = {}
    for start, end, attempt in [
        *((cp.started_at_ns, cp.ended_at_ns, cp.attempt) for _, cp in walk),
        *((j.started_at_ns, j.ended_at_ns, j.attempt) for j in journal),
    ]:
        if start and end and attempt:  # attempt 0: a fork's copy, run by the original
            lo_hi = spans.setdefault(attempt, [start, end])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], start), max(lo_hi[1], end)
    duration_ms = sum(max(0, hi - lo) for lo, hi in spans.values()) / 1e6
    return RunSide(
        run_id=run_id,
        name=record.name if record else None,
        # A fork before its first run (recorded with no attempt, or by a store that records
        # no run before one).
        status=record.status if record and record.attempts else "not run yet",
        attempts=record.attempts if record else 0,
        boundaries=len(walk),
        duration_ms=duration_ms,
        # One totalling rule for show, runs and diff: the journal passed in, read once.
        cost=run_cost(store, run_id, journal=journal),
    )


# --- inputs ---------------------------------------------------------------------------------


def _input_changed(cp_a: Checkpoint, cp_b: Checkpoint) -> bool:
    if cp_a.fingerprint is None or cp_b.fingerprint is None:
        return False  # unknown: compared by output only (a note says so)
    return cp_a.fingerprint != cp_b.fingerprint


def input_diff(cp_a: Checkpoint, cp_b: Checkpoint) -> InputDiff:
    """How ``cp_b``'s input differs from ``cp_a``'s, part by part, from their input views."""
    if cp_a.fingerprint is None or cp_b.fingerprint is None:
        return InputDiff(None, cp_a.fingerprint, cp_b.fingerprint)
    changed = cp_a.fingerprint != cp_b.fingerprint
    if cp_a.input_view is None or cp_b.input_view is None:
        return InputDiff(changed, cp_a.fingerprint, cp_b.fingerprint, viewed=False)
    view_a, view_b = cp_a.input_view, cp_b.input_view
    if not changed or view_a == view_b:
        return InputDiff(changed, cp_a.fingerprint, cp_b.fingerprint)
    other = sorted((set(view_a) | set(view_b)) - {"messages", "tools", "settings", *_OMITTED})
    return InputDiff(
        changed,
        cp_a.fingerprint,
        cp_b.fingerprint,
        messages=message_changes(
            view_a.get("messages") or [],
            view_b.get("messages") or [],
            positions=(_positions(view_a), _positions(view_b)),
        ),
        tools=_named_changes(view_a.get("tools") or [], view_b.get("tools") or []),
        settings=_mapping_changes(view_a.get("settings") or {}, view_b.get("settings") or {}),
        fields=_mapping_changes(
            {k: view_a[k] for k in other if k in view_a},
            {k: view_b[k] for k in other if k in view_b},
        ),
    )


def _message_key(message: Any) -> Any:
    if isinstance(message, Mapping):
        return message.get("digest") or _json.stable_json(dict(message))
    return _json.stable_json(message)


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, Mapping) else None


#: What an input view says of the messages it left out (calls.inputs.model_input_view).
_OMITTED = ("omitted", "omitted_at")


def _positions(view: Mapping[str, Any]) -> tuple[int, int]:
    """(list position where messages were left out, how many): a view's list position ``p``
    is conversation index ``p`` before the cut and ``p + count`` after it."""
    return int(view.get("omitted_at") or 0), int(view.get("omitted") or 0)


def message_changes(
    a: Sequence[Any],
    b: Sequence[Any],
    *,
    positions: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0)),
) -> tuple[MessageChange, ...]:
    """Messages changed, added or removed from conversation ``a`` to ``b``, matched by digest
    (a longest-common-subsequence match, so one inserted message is one addition). With
    ``positions`` (see :func:`_positions`), views that left their older messages out still
    name each change by its index in the whole conversation."""
    (at_a, gone_a), (at_b, gone_b) = positions
    # Compare from the same conversation index on: the view that left out fewer messages
    # drops its extra older ones (the other view cannot say whether they differ).
    if gone_a < gone_b:
        a = [*a[:at_a], *a[at_a + gone_b - gone_a :]]
        gone_a = gone_b
    elif gone_b < gone_a:
        b = [*b[:at_b], *b[at_b + gone_a - gone_b :]]
        gone_b = gone_a

    def index_a(p: int) -> int:
        return p if p < at_a else p + gone_a

    def index_b(p: int) -> int:
        return p if p < at_b else p + gone_b

    matcher = difflib.SequenceMatcher(
        None, [_message_key(m) for m in a], [_message_key(m) for m in b], autojunk=False
    )
    out: list[MessageChange] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1) if op == "replace" else 0
        for k in range(pairs):
            out.append(_message_change(index_a(i1 + k), "changed", a[i1 + k], b[j1 + k]))
        out.extend(
            _message_change(index_a(i), "removed", a[i], None) for i in range(i1 + pairs, i2)
        )
        out.extend(_message_change(index_b(j), "added", None, b[j]) for j in range(j1 + pairs, j2))
    return tuple(out)


def _message_change(index: int, change: Change, x: Any, y: Any) -> MessageChange:
    return MessageChange(
        index,
        change,
        *(_field(x, "role"), _field(y, "role")),
        *(_field(x, "text"), _field(y, "text")),
        *(_field(x, "chars"), _field(y, "chars")),
        *(_field(x, "tool_calls"), _field(y, "tool_calls")),
    )


def _named_changes(a: Sequence[Any], b: Sequence[Any]) -> tuple[ValueChange, ...]:
    def by_name(items: Sequence[Any]) -> dict[str, Any]:
        return {str(_field(t, "name") or t): t for t in items}

    return _mapping_changes(by_name(a), by_name(b), values=False)


def _mapping_changes(
    a: Mapping[str, Any], b: Mapping[str, Any], *, values: bool = True
) -> tuple[ValueChange, ...]:
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if key not in b:
            out.append(ValueChange(key, "removed", x if values else None))
        elif key not in a:
            out.append(ValueChange(key, "added", None, y if values else None))
        elif x != y:
            out.append(ValueChange(key, "changed", *((x, y) if values else (None, None))))
    return tuple(out)


# --- outputs --------------------------------------------------------------------------------


def _output_changed(cp_a: Checkpoint, cp_b: Checkpoint, notes: list[str]) -> bool:
    if cp_a.output_type != cp_b.output_type:
        return True
    if cp_a.output == cp_b.output:
        return False
    content_a, content_b = _content(cp_a, notes), _content(cp_b, notes)
    if content_a is None or content_b is None:
        return True  # not decodable here: the bytes differ, so the outputs do
    return content_a != content_b


def _decoded(cp: Checkpoint) -> Any:
    """The output through the allow list; :class:`SpanpointError` when it cannot be read."""
    return serde.loads(cp.output_type, cp.output)


def _content(cp: Checkpoint, notes: list[str]) -> str | None:
    """A content-only text of the output (see the module docstring), None if undecodable."""
    try:
        return _json.stable_json(_without_ids(serde.canonical(_outcome(cp, _decoded(cp)))))
    except SpanpointError as exc:
        note = f"output of {cp.path!r} in run {cp.run_id!r} compared by bytes: {exc}"
        if note not in notes:
            notes.append(note)
        return None


def _outcome(cp: Checkpoint, value: Any) -> Any:
    """What a graph call's stored result says happened: its status, output, next nodes and
    interrupts. The rest are identifiers of where it ran (LangGraph's thread, checkpoint and
    task ids, its span), its usage and its warnings."""
    if not (
        cp.kind == semconv.KIND_GRAPH_CALL
        and isinstance(value, Mapping)
        and {"v", "status", "output", "interrupts"} <= value.keys()
    ):
        return value
    interrupts = [
        {k: v for k, v in item.items() if k not in ("id", "task_id")}
        if isinstance(item, Mapping)
        else item
        for item in value["interrupts"] or ()
    ]
    return {
        "status": value["status"],
        "output": value["output"],
        "next_nodes": value.get("next_nodes"),
        "interrupts": interrupts,
    }


#: The one field of an ``Interrupt`` minted per run: its id (from LangGraph's task id).
_INTERRUPT = "langgraph.types.Interrupt"


def _without_ids(value: Any) -> Any:
    """A canonical view without the ids minted per run that it still holds: the tool-call id
    a ToolMessage answers and an ``Interrupt``'s id (the canonical view already leaves out
    message ids, AI tool-call ids, metadata and usage)."""
    if isinstance(value, dict):
        message = value.get("__message__")
        if isinstance(message, dict) and "tool_call_id" in message:
            return {
                "__message__": {
                    k: _without_ids(v) for k, v in message.items() if k != "tool_call_id"
                }
            }
        typed = value.get("__dataclass__")
        if isinstance(typed, list) and len(typed) == 2 and typed[0] == _INTERRUPT:
            fields = typed[1].get("__map__", {}) if isinstance(typed[1], dict) else {}
            kept = {k: _without_ids(v) for k, v in fields.items() if k != "id"}
            return {"__dataclass__": [_INTERRUPT, {"__map__": kept}]}
        return {k: _without_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def _output_diff(cp_a: Checkpoint | None, cp_b: Checkpoint | None, notes: list[str]) -> OutputDiff:
    texts, errors = [], []
    for cp in (cp_a, cp_b):
        if cp is None:
            texts.append(None)
            continue
        try:
            texts.append(output_texts(_outcome(cp, _decoded(cp))))
        except SpanpointError as exc:
            texts.append(None)
            errors.append(f"run {cp.run_id!r}: {exc}")
    changed = cp_a is None or cp_b is None or _output_changed(cp_a, cp_b, notes)
    return OutputDiff(
        changed,
        None if cp_a is None else cp_a.output_type,
        None if cp_b is None else cp_b.output_type,
        None if cp_a is None else cp_a.view,
        None if cp_b is None else cp_b.view,
        texts[0],
        texts[1],
        "; ".join(errors) or None,
    )


def output_texts(value: Any) -> tuple[str, ...] | None:
    """``role: text`` of each message in a decoded output (tool calls as ``→ name(args)``);
    for an output that holds no message, ``value: <JSON>`` after the capture policy's
    redaction; credentials redacted, each bounded. None for an output of None."""
    found = [_message_text(m) for m in _messages(value, 0)]
    if found:
        return tuple(found)
    if value is None:
        return None
    text = _json.stable_json(default_policy().redact(value))
    return (f"value: {truncate(redact_text(text), TEXT_LIMIT)}",)


def _messages(value: Any, depth: int) -> Iterable[Any]:
    if depth > 8:
        return
    if isinstance(getattr(value, "type", None), str) and hasattr(value, "content"):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _messages(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _messages(item, depth + 1)
    else:
        update = getattr(value, "update", None)  # a Command's state update
        if isinstance(update, Mapping | list | tuple):
            yield from _messages(update, depth + 1)


def _message_text(message: Any) -> str:
    content = message.content
    text = content if isinstance(content, str) else _json.stable_json(content)
    calls = getattr(message, "tool_calls", None) or ()
    for call in calls:
        text += f" → {call.get('name')}({_json.stable_json(call.get('args'))})"
    return f"{message.type}: {truncate(redact_text(text), TEXT_LIMIT)}"
