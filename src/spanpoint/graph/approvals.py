"""Approval gates as tool-call decisions: LangChain's human-in-the-loop middleware.

``HumanInTheLoopMiddleware`` pauses an agent with a LangGraph interrupt whose value lists the
tool calls waiting for a person: ``{"action_requests": [{"name", "args", ...}],
"review_configs": [...]}`` for a model turn (``batched``), or ``{"type": "tool_approval",
"tool_call_id", "name", "args", ...}`` for one call (``per_call``). The run continues with
``Command(resume=...)`` carrying the person's decisions: ``{"decisions": [...]}`` matching
the batch by position, or one ``{"type": ...}`` per call, either keyed by interrupt id or,
with one interrupt pending, not.

The graph call's span that records the pause gets one ``gen_ai.tool.call.decision`` event per
gated call, outcome ``require_approval``; the span of the call that resumes gets one per
decided call: ``allow`` for ``approve`` and ``edit``, ``deny`` for ``reject``. A ``respond``
decision (the person answers in the tool's place) gets none: the call does not run, yet
nobody denied it, and the proposal has no outcome for it. Each event names the tool
(``gen_ai.tool.name``) and, when it is known for certain, the call (``gen_ai.tool.call.id``):
a per-call interrupt carries it; a batched request is matched to the pending model turn's
tool calls by name and arguments, and gets the id only when exactly one call there has both.

A gate is recognised by the shape of its interrupt value, so an interrupt of any other kind
costs one type check, and a resume without decisions costs two.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace

from spanpoint import semconv
from spanpoint.graph.results import resume_map

#: One gated tool call: its tool's name and its id (None when it cannot be known for certain).
GatedCall = tuple[str, str | None]

#: The gated calls of the pending interrupts that are approval gates, by interrupt id.
Gates = dict[str, list[GatedCall]]

#: The outcome of each decision type; a type not listed (``respond``) records no event.
_OUTCOMES = {
    "approve": semconv.DECISION_ALLOW,
    "edit": semconv.DECISION_ALLOW,
    "reject": semconv.DECISION_DENY,
}


def gates_of(interrupts: Iterable[tuple[Any, Any]], state: Any = None) -> Gates:
    """The approval gates among ``interrupts`` ((id, value) pairs), with their gated calls.

    ``state`` is what holds the thread's messages at the pause (a graph output, a v2
    ``GraphOutput`` or a state snapshot's values); the pending model turn is its last AI
    message. Without it a batched request's calls get no id.
    """
    gates: Gates = {}
    pending: list[Any] | None = None
    for interrupt_id, value in interrupts:
        if not isinstance(value, Mapping):
            continue
        if value.get("type") == "tool_approval" and "name" in value:
            call_id = value.get("tool_call_id")
            gates[str(interrupt_id)] = [(str(value["name"]), str(call_id) if call_id else None)]
            continue
        requests = value.get("action_requests")
        if not isinstance(requests, list) or "review_configs" not in value:
            continue
        if pending is None:
            pending = _pending_tool_calls(state)
        gates[str(interrupt_id)] = [
            (str(r.get("name") or ""), _matched_id(r, pending))
            for r in requests
            if isinstance(r, Mapping)
        ]
    return gates


def requested(span: trace.Span, gates: Gates, policy: Any = None) -> None:
    """One ``require_approval`` decision event on ``span`` per gated call of ``gates``."""
    for calls in gates.values():
        for name, call_id in calls:
            _decision(span, semconv.DECISION_REQUIRE_APPROVAL, name, call_id, policy)


def carries_decisions(resume: Any) -> bool:
    """Whether a resume value may answer an approval gate (cheap: no gate is looked up)."""
    if not isinstance(resume, Mapping):
        return False
    return _answer(resume) or any(_answer(v) for v in resume.values())


def _answer(value: Any) -> bool:
    return isinstance(value, Mapping) and ("decisions" in value or "type" in value)


def decided(span: trace.Span, resume: Any, gates: Gates, policy: Any = None) -> None:
    """One ``allow`` or ``deny`` decision event on ``span`` per gated call that ``resume``
    (a ``Command``'s resume value) decides, in the order of ``gates``."""
    if not gates or not isinstance(resume, Mapping):
        return
    mapped = resume_map(resume)
    if mapped is None:
        # Not keyed: LangGraph gives it to the one pending interrupt (it refuses it when
        # several are pending).
        if len(gates) != 1:
            return
        answers: Mapping[str, Any] = {next(iter(gates)): resume}
    else:
        answers = mapped
    for interrupt_id, calls in gates.items():
        answer = answers.get(interrupt_id)
        if not isinstance(answer, Mapping):
            continue
        decisions = answer.get("decisions") if "decisions" in answer else [answer]
        # Batched decisions match the calls by position; a count that differs is refused by
        # the middleware, and no pairing of them is certain.
        if not isinstance(decisions, list) or len(decisions) != len(calls):
            continue
        for (name, call_id), decision in zip(calls, decisions, strict=True):
            kind = decision.get("type") if isinstance(decision, Mapping) else None
            outcome = _OUTCOMES.get(kind) if isinstance(kind, str) else None
            if outcome is not None:
                _decision(span, outcome, name, call_id, policy)


def _decision(span: trace.Span, outcome: str, name: str, call_id: str | None, policy: Any) -> None:
    # For import time: the event machinery loads with the first gate.
    from spanpoint.events import add_bounded_event

    attributes = {
        semconv.GEN_AI_TOOL_CALL_DECISION_OUTCOME: outcome,
        semconv.GEN_AI_TOOL_NAME: name,
    }
    if call_id:
        attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id
    add_bounded_event(semconv.EVENT_TOOL_CALL_DECISION, attributes, span=span, policy=policy)


def _pending_tool_calls(state: Any) -> list[Any]:
    """The tool calls of the last AI message in ``state``'s messages (none when unknown)."""
    values = state if isinstance(state, Mapping) else getattr(state, "value", None)
    messages = values.get("messages") if isinstance(values, Mapping) else None
    if not isinstance(messages, Sequence):
        return []
    for message in reversed(messages):
        if isinstance(message, Mapping):  # a message read back as data
            kind, calls = message.get("type"), message.get("tool_calls")
        else:
            kind, calls = getattr(message, "type", None), getattr(message, "tool_calls", None)
        if kind == "ai":
            return list(calls) if isinstance(calls, list) else []
    return []


def _matched_id(request: Mapping[str, Any], pending: Sequence[Any]) -> str | None:
    """The id of the one pending tool call with ``request``'s name and arguments; None when
    none or several have them (never a guess)."""
    name, args = request.get("name"), _canonical(request.get("args"))
    found = [
        call
        for call in pending
        if isinstance(call, Mapping)
        and call.get("name") == name
        and _canonical(call.get("args")) == args
    ]
    if len(found) != 1 or not found[0].get("id"):
        return None
    return str(found[0]["id"])


def _canonical(value: Any) -> str:
    """Arguments as canonical JSON, so that arguments read back as JSON compare equal."""
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(value)
