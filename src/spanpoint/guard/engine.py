"""The guard's decision engine: one step in, a decision and the next guard state out.

The engine holds no run data itself. Everything it knows about a run lives in a JSON-safe
dict (``state``) that the adapters keep in LangGraph graph state under :data:`STATE_KEY`:
one per thread, checkpointed with the thread, so concurrent threads never share counters
and a stopped run can be resumed by another process.

A step is seen twice: :meth:`GuardEngine.before_model` folds in the previous step's tool
results (error loop, no progress), enforces the step and time budgets and delivers a pending
reflection; :meth:`GuardEngine.after_model` adds the call's usage (tokens, cost) and analyses
every tool call the model asked for (tool repeat, cycle).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from spanpoint.guard import budgets, detectors, termination
from spanpoint.guard.config import CYCLE, TOOL_REPEAT, GuardConfig
from spanpoint.guard.detectors import Detection
from spanpoint.guard.reflection import guard_kind, reflection_message, reflection_text
from spanpoint.guard.state import REASON_KEY, RUN_START, STATE_KEY, TERMINATED_KEY
from spanpoint.guard.telemetry import GuardTelemetry

STATE_VERSION: Final = 1
DETECTIONS_KEPT: Final = 50


class Decision(NamedTuple):
    """What an adapter must do around one model call.

    ``state`` is the new guard state to write. ``messages`` are to be added to the history:
    before the model call (a reflection) when ``stop`` is false, or — when ``stop`` is true —
    instead of further work (skipped tool results and the explanation).
    """

    state: dict[str, Any]
    messages: list[BaseMessage]
    stop: bool = False

    def updates(self) -> dict[str, Any]:
        """The graph-state keys to write for this decision (messages excluded)."""
        return state_updates(self.state, flags=self.stop)


def state_updates(state: dict[str, Any], *, flags: bool = True) -> dict[str, Any]:
    """Guard state, plus (with ``flags``) the keys that say whether and why it stopped.

    The flags only change when a run starts, stops or resumes; leaving them out of the
    other steps' updates spares the checkpointer two channel versions per step.
    """
    if not flags:
        return {STATE_KEY: state}
    stop = state.get("termination")
    return {
        STATE_KEY: state,
        TERMINATED_KEY: stop is not None,
        REASON_KEY: stop["reason"] if stop else None,
    }


def run_start(mode: str, now: float | None = None) -> dict[str, Any]:
    """What a graph's input step writes to :data:`STATE_KEY`: "open a new run now".

    The state channel turns it into the new run's state with :func:`opened`, which numbers
    the run after the one it replaces. It is JSON-safe, as every pending write must be.
    """
    return {RUN_START: time.time() if now is None else now, "mode": mode}


def opened(previous: dict[str, Any] | None, start: dict[str, Any]) -> dict[str, Any]:
    """The state of a new run opened by the :func:`run_start` value ``start``."""
    state = new_state(run=(previous or {}).get("run", 0) + 1, now=start[RUN_START])
    state["mode"] = start["mode"]
    return state


def new_state(run: int = 1, now: float | None = None) -> dict[str, Any]:
    """The guard state at the start of a run."""
    return {
        "v": STATE_VERSION,
        "run": run,
        "status": "running",
        "breaker": "closed",
        "steps": 0,
        "tool_calls": 0,
        "tokens": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "tokens_estimated": False,
        "cost_usd": 0.0,
        "unpriced_calls": 0,
        "wall_before": 0.0,
        "segment_started_at": time.time() if now is None else now,
        "wall_seconds": 0.0,
        "recent_calls": [],
        "seen_results": "",
        "no_progress_steps": 0,
        "consecutive_errors": 0,
        "error_tools": [],
        "ingested": None,
        "episode": None,
        "pending_reflection": None,
        "reflections": 0,
        "detection_count": 0,
        "detections": [],
        "overruns": [],
        "termination": None,
        "resumes": [],
    }


class GuardEngine:
    """Applies one :class:`GuardConfig` to guard states; shared by every adapter."""

    __slots__ = ("_costs", "_keep", "config", "telemetry")

    def __init__(self, config: GuardConfig, telemetry: GuardTelemetry) -> None:
        self.config = config
        self.telemetry = telemetry
        # Invariant per config (frozen), read at every step.
        self._costs = config.costs_tracked
        self._keep = max(
            config.tool_repeat_window, (config.cycle_max_period or 0) * config.cycle_repeats
        )

    def start_run(self, previous: dict[str, Any] | None, now: float | None = None) -> dict:
        """A fresh state for a new run on a thread (new input), numbered after the last."""
        return opened(previous, run_start(self.config.mode, now))

    def before_model(
        self, state: dict[str, Any] | None, history: Sequence[BaseMessage], now: float | None = None
    ) -> Decision:
        """Ingest the last step's tool results, enforce step/time budgets, deliver reflections."""
        # Shallow copies: the lists and dicts inside a state are replaced, never mutated.
        s = dict(state) if state else new_state(now=now)
        if (started := s["segment_started_at"]) is not None:  # stopped: the clock is paused
            elapsed = (time.time() if now is None else now) - started
            s["wall_seconds"] = s["wall_before"] + max(elapsed, 0.0)
        found = self._ingest(s, history)
        overrun = budgets.overrun_before_model(s, self.config)
        if overrun is not None and self.config.enforcing:
            return self._stop_for_budget(s, overrun, history)
        if overrun is not None:
            self._observe_overrun(s, overrun)
        if found and (decision := self._on_detections(s, found, history, True)) is not None:
            return decision
        messages: list[BaseMessage] = []
        pending = s["pending_reflection"]
        if pending is not None:
            s["pending_reflection"] = None
            s["episode"] = {**s["episode"], "delivered": True}
            messages.append(reflection_message(pending["text"], pending["pattern"], s["steps"]))
        # The span attributes are set once per step, after the model call.
        return Decision(s, messages)

    def after_model(
        self,
        state: dict[str, Any] | None,
        response: AIMessage,
        prompt: Sequence[BaseMessage],
        now: float | None = None,
        *,
        owned: bool = False,
    ) -> Decision:
        """Count the call's usage and analyse every tool call it asked for.

        ``owned=True`` says that ``state`` is the state of this step's :meth:`before_model`
        decision, held by nobody else: it is then updated in place rather than copied.
        """
        s = state if owned and state else dict(state) if state else new_state(now=now)
        s["steps"] += 1
        if (started := s["segment_started_at"]) is not None:
            elapsed = (time.time() if now is None else now) - started
            s["wall_seconds"] = s["wall_before"] + (elapsed if elapsed > 0.0 else 0.0)
        reported = response.usage_metadata
        if reported and not self._costs:  # the common case: reported tokens, no pricing
            inp = int(reported.get("input_tokens") or 0)
            out = int(reported.get("output_tokens") or 0)
            s["input_tokens"] += inp
            s["output_tokens"] += out
            s["tokens"] += inp + out
        else:
            self._add_usage(s, response, prompt)
        calls = response.tool_calls
        found = self._analyse_calls(s, calls) if calls else None
        overrun = budgets.overrun_after_model(s, self.config)
        if overrun is not None:
            if self.config.enforcing:
                return self._stop_for_budget(s, overrun, [response])
            self._observe_overrun(s, overrun)
        if found and (decision := self._on_detections(s, found, [response], False)) is not None:
            return decision
        # A graph may loop back to the agent after an answer: the latest answer decides.
        s["status"] = "running" if calls else "completed"
        episode = s["episode"]
        if (
            episode is not None
            and episode.get("delivered")
            and (not calls or episode["pattern"] in (TOOL_REPEAT, CYCLE))
        ):
            self._recover(s)
        self.telemetry.check(s)
        return Decision(s, [])

    def resume(
        self, state: dict[str, Any], *, grant: int, author: str, now: float | None = None
    ) -> dict[str, Any]:
        """The state of a stopped run continued with a correction and ``grant`` reflections."""
        s = _working_copy(state, now)
        stop = s["termination"]
        s["termination"] = None
        s["status"] = "running"
        s["breaker"] = "half_open"
        s["segment_started_at"] = time.time() if now is None else now
        episode = s["episode"] or {"pattern": stop["reason"], "reflections": 0, "allowed": 0}
        s["episode"] = {**episode, "allowed": episode["allowed"] + grant, "delivered": True}
        s["resumes"] = [
            *s["resumes"],
            {"step": s["steps"], "reason": stop["reason"], "granted": grant, "author": author},
        ]
        self.telemetry.resumed(stop["reason"], s["steps"], grant, author)
        return s

    # --- internals ---------------------------------------------------------------------

    def _ingest(self, s: dict[str, Any], history: Sequence[BaseMessage]) -> list[Detection]:
        # The last AI message and the results of its tool calls that follow it, in order.
        # (Exact type checks first: isinstance on a message class is an ABC check.)
        answered: list[ToolMessage] = []
        at = len(history) - 1
        while at >= 0:
            message = history[at]
            kind = type(message)
            if kind is AIMessage or (kind is not ToolMessage and isinstance(message, AIMessage)):
                break
            if kind is ToolMessage or isinstance(message, ToolMessage):
                answered.append(message)
            at -= 1
        else:
            return []
        calls = message.tool_calls
        if not calls:
            return []
        marker = message.id or f"#{len(history)}"
        if marker == s["ingested"]:
            return []
        s["ingested"] = marker
        names = {call.get("id"): call["name"] for call in calls}
        results = []
        for tool_message in reversed(answered):
            call_id = tool_message.tool_call_id
            if call_id not in names or (
                tool_message.additional_kwargs and guard_kind(tool_message) == "skipped"
            ):
                continue
            content = tool_message.content
            results.append(
                (
                    tool_message.name or names[call_id],
                    content if type(content) is str else tool_message.text,
                    tool_message.status == "error",
                )
            )
        found = detectors.ingest_results(s, results, self.config)
        # An error-loop or no-progress episode ends when a step's results no longer show it.
        episode = s["episode"]
        if (
            episode is not None
            and episode.get("delivered")
            and results
            and episode["pattern"] not in (TOOL_REPEAT, CYCLE)
            and not any(d.pattern == episode["pattern"] for d in found)
        ):
            self._recover(s)
        return found

    def _add_usage(self, s: dict[str, Any], response: AIMessage, prompt: Sequence[BaseMessage]):
        # Priced, or estimated; reported tokens without pricing are added by after_model.
        usage = budgets.usage_of(response, prompt, self.config)
        s["input_tokens"] += usage.input_tokens
        s["output_tokens"] += usage.output_tokens
        s["tokens"] += usage.total
        s["tokens_estimated"] = s["tokens_estimated"] or usage.estimated
        if self.config.costs_tracked:
            cost = budgets.cost_of(usage, self.config)
            if cost is None:
                s["unpriced_calls"] += 1
            else:
                s["cost_usd"] += cost

    def _analyse_calls(
        self, s: dict[str, Any], calls: list[dict[str, Any]]
    ) -> list[Detection] | None:
        s["tool_calls"] += len(calls)
        policies = self.config.tool_policies
        if policies:
            keys = [
                detectors.call_key(call["name"], call.get("args"))
                for call in calls
                if not ((policy := policies.get(call["name"])) and policy.allow_repeat)
            ]
        else:
            keys = [detectors.call_key(call["name"], call.get("args")) for call in calls]
        recent = s["recent_calls"] + keys  # a new list: the previous state keeps its own
        if len(recent) > self._keep:
            del recent[: -self._keep]
        s["recent_calls"] = recent
        if not keys:
            return None
        repeat = detectors.detect_repeat(recent, keys, self.config)
        cycle = detectors.detect_cycle(recent, self.config)
        if repeat is None:
            return None if cycle is None else [cycle]
        return [repeat] if cycle is None else [repeat, cycle]

    def _on_detections(
        self,
        s: dict[str, Any],
        found: list[Detection],
        history: Sequence[BaseMessage],
        before_model: bool,
    ) -> Decision | None:
        for detection in found:
            self._record(s, detection)
        if not self.config.enforcing:
            return None
        if s["episode"] is not None and not s["episode"].get("delivered"):
            # The model has not seen the reflection for this episode yet: let it.
            return None
        # Within an episode, keep naming the pattern it is about (a cycle also repeats calls).
        current = s["episode"]["pattern"] if s["episode"] else None
        detection = next((d for d in found if d.pattern == current), found[0])
        episode = s["episode"] or {
            "pattern": detection.pattern,
            "reflections": 0,
            "allowed": self.config.max_reflections,
            "delivered": False,
        }
        if episode["reflections"] >= episode["allowed"]:
            s["episode"] = episode
            return self._stop_for_detection(s, detection, history)
        used = episode["reflections"] + 1
        s["episode"] = {**episode, "reflections": used, "delivered": before_model}
        s["breaker"] = "half_open"
        s["reflections"] += 1
        fields = {**detection.fields, "remaining": episode["allowed"] - used}
        text = reflection_text(detection.pattern, fields, self.config)
        self.telemetry.reflection(detection.pattern, s["steps"], used, episode["allowed"])
        self.telemetry.check(s)
        if before_model:
            return Decision(s, [reflection_message(text, detection.pattern, s["steps"])])
        s["pending_reflection"] = {"pattern": detection.pattern, "text": text}
        return Decision(s, [])

    def _record(self, s: dict[str, Any], detection: Detection) -> None:
        s["detection_count"] += 1
        s["detections"] = [*s["detections"], detection.to_dict(s["steps"])][-DETECTIONS_KEPT:]
        self.telemetry.detection(detection, s["steps"], self.config.mode)

    def _recover(self, s: dict[str, Any]) -> None:
        pattern = s["episode"]["pattern"]
        s["episode"] = None
        s["breaker"] = "closed"
        self.telemetry.recovered(pattern, s["steps"])

    def _observe_overrun(self, s: dict[str, Any], overrun: budgets.Overrun) -> None:
        if overrun.budget in s["overruns"]:
            return
        s["overruns"] = [*s["overruns"], overrun.budget]
        evidence = f"{overrun.budget}: used {overrun.used:g} of {overrun.limit:g}"
        self._record(s, Detection(overrun.budget, evidence, ()))

    def _stop_for_detection(
        self, s: dict[str, Any], detection: Detection, history: Sequence[BaseMessage]
    ) -> Decision:
        reflected = s["episode"]["reflections"] > 0 or bool(s["resumes"])
        return self._stop(
            s,
            detection.pattern,
            "detector",
            dict(detection.fields),
            history,
            reflected=reflected,
            evidence=detection.evidence,
        )

    def _stop_for_budget(
        self, s: dict[str, Any], overrun: budgets.Overrun, history: Sequence[BaseMessage]
    ) -> Decision:
        fields = termination.budget_fields(overrun, s["tokens_estimated"])
        evidence = f"{overrun.budget}: used {fields['used']} of {fields['limit']}"
        return self._stop(s, overrun.budget, "budget", fields, history, evidence=evidence)

    def _stop(
        self,
        s: dict[str, Any],
        reason: str,
        kind: str,
        fields: dict[str, Any],
        history: Sequence[BaseMessage],
        *,
        evidence: str,
        reflected: bool = False,
    ) -> Decision:
        _, pending = termination.unanswered_tool_calls(history)
        text = termination.explanation_text(
            reason, fields, self.config, reflected=reflected, skipped=len(pending)
        )
        # A detector stop can be resumed only while every budget still has room.
        spent = budgets.overrun_before_model(s, self.config) or budgets.overrun_after_model(
            s, self.config
        )
        s["wall_before"] = s["wall_seconds"]
        s["segment_started_at"] = None
        s["status"] = "terminated"
        s["breaker"] = "open"
        s["pending_reflection"] = None
        s["termination"] = stop = {
            "reason": reason,
            "kind": kind,
            "pattern": reason if kind == "detector" else None,
            "evidence": evidence,
            "step": s["steps"],
            "resumable": kind == "detector" and spent is None,
            "budget_spent": None if spent is None else spent.budget,
            "skipped": len(pending),
            "message": text,
        }
        self.telemetry.terminated(stop)
        self.telemetry.denied(pending)
        self.telemetry.check(s)
        messages: list[BaseMessage] = [*termination.skipped_tool_messages(pending, reason)]
        messages.append(termination.explanation_message(text, reason, kind, s["steps"]))
        return Decision(s, messages, stop=True)


def _working_copy(state: dict[str, Any] | None, now: float | None) -> dict[str, Any]:
    # Shallow copy: the lists and dicts inside are replaced, never mutated.
    if not state:
        return new_state(now=now)
    return dict(state)
