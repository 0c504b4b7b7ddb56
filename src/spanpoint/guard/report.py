"""``GuardReport``: what the guard saw and decided in one run, JSON-safe for the run summary.

The report is read from graph state (key ``spanpoint_guard``), so it is available wherever
the thread's state is: ``GuardReport.from_state(graph.get_state(config).values)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from spanpoint.guard.state import STATE_KEY


@dataclass(frozen=True, slots=True)
class GuardReport:
    """The guard's record of a run on one thread.

    ``mode`` is the config's ``"enforce"`` or ``"observe"``. ``status`` is ``"running"``,
    ``"completed"`` (the model gave a final answer) or ``"terminated"`` (then
    ``termination`` says why: ``reason``, ``kind`` — ``"detector"`` or ``"budget"`` —,
    ``evidence``, ``step``, ``resumable``, ``budget_spent``, ``skipped`` tool calls and the
    explanation ``message``). ``tokens_estimated`` is true when some model reported no
    usage and its tokens were estimated from text length.
    """

    status: str
    mode: str
    breaker: str
    run: int
    steps: int
    tool_calls: int
    tokens: int
    input_tokens: int
    output_tokens: int
    tokens_estimated: bool
    cost_usd: float
    unpriced_calls: int
    wall_seconds: float
    reflections: int
    detection_count: int
    detections: tuple[dict[str, Any], ...] = ()
    overruns: tuple[str, ...] = ()
    termination: dict[str, Any] | None = None
    resumes: tuple[dict[str, Any], ...] = ()
    thread_id: str | None = None
    checkpoint_id: str | None = None

    @property
    def terminated(self) -> bool:
        """True when the guard stopped the run."""
        return self.termination is not None

    @property
    def resumable(self) -> bool:
        """True when the run was stopped by a detector and can be resumed with a correction."""
        return bool(self.termination and self.termination.get("resumable"))

    @classmethod
    def from_state(
        cls,
        values: Mapping[str, Any],
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> GuardReport | None:
        """The report in a thread's state values, or ``None`` if the guard never ran there."""
        state = values.get(STATE_KEY) if isinstance(values, Mapping) else None
        if not isinstance(state, Mapping):
            return None
        return cls(
            status=state["status"],
            mode=state.get("mode", "enforce"),
            breaker=state["breaker"],
            run=state["run"],
            steps=state["steps"],
            tool_calls=state["tool_calls"],
            tokens=state["tokens"],
            input_tokens=state["input_tokens"],
            output_tokens=state["output_tokens"],
            tokens_estimated=state["tokens_estimated"],
            cost_usd=round(state["cost_usd"], 8),
            unpriced_calls=state["unpriced_calls"],
            wall_seconds=round(state["wall_seconds"], 3),
            reflections=state["reflections"],
            detection_count=state["detection_count"],
            detections=tuple(dict(d) for d in state["detections"]),
            overruns=tuple(state["overruns"]),
            termination=dict(state["termination"]) if state["termination"] else None,
            resumes=tuple(dict(r) for r in state["resumes"]),
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (strings, numbers, booleans, lists, dicts, ``None``)."""
        data = asdict(self)
        data["detections"] = [dict(d) for d in self.detections]
        data["overruns"] = list(self.overruns)
        data["resumes"] = [dict(r) for r in self.resumes]
        return data
