"""``Guard``: the same detectors, budgets and reflections for agent loops outside LangGraph.

One ``Guard`` follows one run. After each model answer, call :meth:`Guard.check` with the
tool calls it asks for, its usage and the results of the previous step's tool calls; the
decision says whether to go on, to add a reflection to the next prompt, or to stop (with the
explanation to show and the calls not to run). ``Guard.state`` is JSON-safe: store it with
the conversation to continue the run elsewhere (``Guard(config, state=...)``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from opentelemetry.metrics import MeterProvider

from spanpoint.errors import GuardNotResumableError, GuardRunNotStoppedError
from spanpoint.guard.config import GuardConfig
from spanpoint.guard.detectors import ToolResult
from spanpoint.guard.engine import GuardEngine
from spanpoint.guard.report import GuardReport
from spanpoint.guard.state import STATE_KEY
from spanpoint.guard.telemetry import GuardTelemetry


@dataclass(frozen=True, slots=True)
class GuardStep:
    """One model answer of a custom loop, as the guard needs to see it.

    ``tool_calls``: ``{"name": ..., "args": {...}}`` mappings the model asked for.
    ``tool_results``: the outcomes of the *previous* step's calls, in the same order.
    ``usage``: ``{"input_tokens": ..., "output_tokens": ...}`` as reported (``None`` =
    not reported: estimated from ``text`` and the calls). ``model``: the model name, for
    pricing. ``text``: the answer's text.
    """

    tool_calls: Sequence[Mapping[str, Any]] = ()
    tool_results: Sequence[ToolResult] = ()
    usage: Mapping[str, int] | None = None
    model: str | None = None
    provider: str | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """What a custom loop should do after a step.

    ``action`` is ``"continue"``, ``"reflect"`` (run the tools, then add ``reflection`` to
    the next prompt as a user message) or ``"stop"`` (run no tools; show ``explanation``).
    """

    action: Literal["continue", "reflect", "stop"]
    reflection: str | None = None
    explanation: str | None = None
    reason: str | None = None
    detections: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def stop(self) -> bool:
        """True when the loop must stop now."""
        return self.action == "stop"


class Guard:
    """The guard for one run of a custom agent loop: ``check(step) -> GuardDecision``."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.config = config or GuardConfig()
        self._engine = GuardEngine(self.config, GuardTelemetry(meter_provider))
        self._state: dict[str, Any] = dict(state) if state else self._engine.start_run(None)
        self._previous: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        s = self._state
        return f"Guard(status={s['status']!r}, steps={s['steps']}, breaker={s['breaker']!r})"

    @property
    def state(self) -> dict[str, Any]:
        """The run's guard state (JSON-safe)."""
        return self._state

    def check(self, step: GuardStep) -> GuardDecision:
        """Fold in one model answer and the previous step's tool results; decide."""
        detections_before = self._state["detection_count"]
        before = self._engine.before_model(self._state, self._history(step.tool_results))
        if before.stop:
            return self._stopped(before.state, detections_before)
        calls = [
            {"name": c["name"], "args": dict(c.get("args") or {}), "id": f"g{uuid.uuid4().hex[:8]}"}
            for c in step.tool_calls
        ]
        answer = AIMessage(
            content=step.text,
            tool_calls=calls,
            usage_metadata=_usage(step.usage),
            response_metadata={"model_name": step.model, "model_provider": step.provider},
        )
        after = self._engine.after_model(before.state, answer, (), owned=True)
        if after.stop:
            return self._stopped(after.state, detections_before)
        state = after.state
        reflection = before.messages[0].text if before.messages else None
        if state["pending_reflection"] is not None:
            reflection = state["pending_reflection"]["text"]
            state["pending_reflection"] = None
            state["episode"] = {**state["episode"], "delivered": True}
        self._state = state
        self._previous = calls
        return GuardDecision(
            "reflect" if reflection else "continue",
            reflection=reflection,
            detections=self._new_detections(detections_before),
        )

    def resume(self, *, additional_reflections: int = 1, author: str = "operator") -> None:
        """Continue after a detector stop; add your correction to the next prompt yourself."""
        stop = self._state["termination"]
        if stop is None:
            raise GuardRunNotStoppedError("this guard's run was not stopped; keep calling check()")
        if not stop["resumable"]:
            spent = stop["reason"] if stop["kind"] == "budget" else stop.get("budget_spent")
            raise GuardNotResumableError(f"the run's {spent} budget is spent; the stop is final")
        self._state = self._engine.resume(self._state, grant=additional_reflections, author=author)
        self._previous = []

    def report(self) -> GuardReport:
        """The guard's report for this run."""
        report = GuardReport.from_state({STATE_KEY: self._state})
        assert report is not None
        return report

    def _history(self, results: Sequence[ToolResult]) -> list[BaseMessage]:
        if not self._previous:
            return []
        ai = AIMessage(content="", tool_calls=self._previous, id=self._previous[0]["id"])
        messages: list[BaseMessage] = [ai]
        for call, result in zip(self._previous, results, strict=False):
            tool, content, is_error = result
            messages.append(
                ToolMessage(
                    content=content,
                    tool_call_id=call["id"],
                    name=tool,
                    status="error" if is_error else "success",
                )
            )
        return messages

    def _stopped(self, state: dict[str, Any], detections_before: int) -> GuardDecision:
        self._state = state
        self._previous = []
        stop = state["termination"]
        return GuardDecision(
            "stop",
            explanation=stop["message"],
            reason=stop["reason"],
            detections=self._new_detections(detections_before),
        )

    def _new_detections(self, before: int) -> tuple[dict[str, Any], ...]:
        new = self._state["detection_count"] - before
        return tuple(self._state["detections"][-new:]) if new > 0 else ()


def _usage(usage: Mapping[str, int] | None) -> Any:
    if usage is None:
        return None
    i, o = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}
