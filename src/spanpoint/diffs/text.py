"""A run diff as lines of Rich markup for a terminal: every value that came from a run goes
through :func:`spanpoint._terminal.visible` (markup printed literally, control characters as
escapes)."""

from __future__ import annotations

from typing import Any

from spanpoint import _json
from spanpoint._terminal import quoted, visible
from spanpoint.capture import truncate
from spanpoint.diffs.types import Divergence, InputDiff, MessageChange, OutputDiff, RunDiff, RunSide


def render(diff: RunDiff) -> list[str]:
    """The diff as lines of Rich markup, every value from a store escaped (``visible``)."""
    lines = [f"diff of run {quoted(diff.a.run_id)} (A) and run {quoted(diff.b.run_id)} (B)"]
    for tag, side in (("A", diff.a), ("B", diff.b)):
        lines.append(f"  {tag}: {_side_text(side)}")
    for note in diff.notes:
        lines.append(f"  [yellow]note:[/] {visible(note)}")
    div = diff.divergence
    if div is None:
        lines.append(
            f"[green]no divergence:[/] the runs are equal ({diff.same} boundaries, same inputs "
            "and outputs)"
        )
        return lines
    before = f"; the {diff.same} boundaries before it are equal"
    lines.extend(_divergence_lines("[bold red]first divergence[/]", div, before))
    if diff.then is not None:
        lines.extend(_divergence_lines("[bold]then[/]", diff.then))
    return lines


_WHY = {
    "input": "its input changed",
    "output": "its output differs (same input)",
    "only_in_a": "it is in run A only",
    "only_in_b": "it is in run B only",
}


def _divergence_lines(title: str, div: Divergence, suffix: str = "") -> list[str]:
    lines = [
        f"{title} at boundary {div.position} [bold]{visible(div.boundary)}[/] "
        f"({visible(div.kind)}): {_WHY[div.reason]}{suffix}"
    ]
    if div.input is not None:
        lines.extend(_input_lines(div.input))
    lines.extend(_output_lines(div.output))
    return lines


def _side_text(side: RunSide) -> str:
    cost = side.cost
    return (
        f"{visible(side.name or 'unnamed')}, {visible(side.status)}, {side.attempts} "
        f"attempt(s), {side.boundaries} boundaries, {_ms(side.duration_ms)}; model calls "
        f"executed: {cost.executed.summary()}; replayed: {cost.replayed.summary()}"
    )


def _ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else _json.stable_json(value)
    return visible(repr(truncate(text, 400)))


def _input_lines(diff: InputDiff) -> list[str]:
    if diff.changed is None:
        return ["  input: [yellow]input data is missing[/] for this boundary in a run"]
    if not diff.changed:
        return [f"  input: same (fingerprint {visible((diff.fingerprint_a or '')[:12])}…)"]
    if not diff.viewed:
        return [
            "  input differs: its fingerprint (no input view was kept for it: a graph call "
            "keeps only the fingerprint of its input, thread id and config)"
        ]
    lines = ["  input differs:"]
    lines.extend(f"    message {m.index} {_message_line(m)}" for m in diff.messages)
    if any(None in (m.text_a, m.text_b) and m.change == "changed" for m in diff.messages):
        lines.append(
            "    (message text is kept when a run captures content: "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY)"
        )
    for t in diff.tools:
        lines.append(f"    tool definition {quoted(t.name)} {t.change}")
    for label, items in (("model setting", diff.settings), ("input", diff.fields)):
        for s in items:
            lines.append(f"    {label} {quoted(s.name)} {s.change}: {_short(s.a)} -> {_short(s.b)}")
    if len(lines) == 1:
        lines.append(
            "    (the input views are equal: the difference is outside what they show, such "
            "as which tool result answers which call)"
        )
    return lines


def _text_of(text: str | None, chars: int | None) -> str:
    if text is not None:
        return _short(text)
    return f"<{'?' if chars is None else chars} characters, text not captured>"


def _message_line(m: MessageChange) -> str:
    if m.change == "added":
        return f"({visible(m.role_b)}) added: {_text_of(m.text_b, m.chars_b)}"
    if m.change == "removed":
        return f"({visible(m.role_a)}) removed: {_text_of(m.text_a, m.chars_a)}"
    role = m.role_a if m.role_a == m.role_b else f"{m.role_a} -> {m.role_b}"
    if m.text_a != m.text_b or m.text_a is None:
        what = f"{_text_of(m.text_a, m.chars_a)} -> {_text_of(m.text_b, m.chars_b)}"
    elif m.tool_calls_a != m.tool_calls_b:
        what = f"tool calls {_short(m.tool_calls_a)} -> {_short(m.tool_calls_b)}"
    else:
        what = "same text shown; it differs past the cut, or in its name or status"
    return f"({visible(role)}) changed: {what}"


def _output_lines(diff: OutputDiff) -> list[str]:
    lines = [f"  output {'differs' if diff.changed else 'is the same'}:"]
    for tag, type_tag, view, texts in (
        ("A", diff.type_a, diff.view_a, diff.text_a),
        ("B", diff.type_b, diff.view_b, diff.text_b),
    ):
        if type_tag is None:
            lines.append(f"    {tag}: (no such boundary)")
            continue
        lines.append(f"    {tag}: {visible(type_tag)} {visible(_json.stable_json(view))}")
        lines.extend(f"       {visible(text)}" for text in texts or ())
    if diff.error:
        lines.append(f"    [yellow]not decoded:[/] {visible(diff.error)}")
    return lines
