"""The guard: an OpenTelemetry-native circuit breaker for looping agents.

It notices an agent repeating a tool call, cycling through the same calls, making no
progress or failing again and again, and enforces step, token, cost and time budgets. On a
detection the next model call gets a reflection note; if that does not help (or a budget is
hit) the run stops cleanly — every requested tool call answered, one truthful explanation,
``guard_terminated`` / ``guard_reason`` in state — and a detector stop can be resumed with a
correction. Every check, detection and decision is OpenTelemetry (span attributes, span
events, metrics).

* :class:`GuardMiddleware` for ``create_agent`` agents;
* :func:`guard_graph` for hand-built agent ⇄ tools ``StateGraph``s;
* :func:`compile_guarded_graph` / :class:`GuardedGraph` for explicit, checked resume;
* :class:`Guard` for agent loops outside LangGraph.

Guard state lives in graph state under ``spanpoint_guard``: per thread, checkpointed, never
on these objects. :meth:`GuardReport.from_state` reads it back.
"""

from typing import TYPE_CHECKING

from spanpoint._lazy import lazy_getattr
from spanpoint.guard.state import REASON_KEY, STATE_KEY, TERMINATED_KEY

if TYPE_CHECKING:
    from spanpoint.guard.config import GuardConfig, TokenPrice, ToolPolicy
    from spanpoint.guard.detectors import Detection, ToolResult
    from spanpoint.guard.graph import guard_graph
    from spanpoint.guard.loop import Guard, GuardDecision, GuardStep
    from spanpoint.guard.middleware import GuardAgentState, GuardMiddleware
    from spanpoint.guard.report import GuardReport
    from spanpoint.guard.runner import GuardedGraph, compile_guarded_graph

__all__ = [
    "REASON_KEY",
    "STATE_KEY",
    "TERMINATED_KEY",
    "Detection",
    "Guard",
    "GuardAgentState",
    "GuardConfig",
    "GuardDecision",
    "GuardMiddleware",
    "GuardReport",
    "GuardStep",
    "GuardedGraph",
    "TokenPrice",
    "ToolPolicy",
    "ToolResult",
    "compile_guarded_graph",
    "guard_graph",
]

# The adapters import LangGraph and langchain.agents (over a second): load a name on first use,
# so reading the state keys (spanpoint.guard.state, run summaries) costs nothing.
_LAZY = {
    "GuardConfig": "spanpoint.guard.config",
    "TokenPrice": "spanpoint.guard.config",
    "ToolPolicy": "spanpoint.guard.config",
    "Detection": "spanpoint.guard.detectors",
    "ToolResult": "spanpoint.guard.detectors",
    "guard_graph": "spanpoint.guard.graph",
    "Guard": "spanpoint.guard.loop",
    "GuardDecision": "spanpoint.guard.loop",
    "GuardStep": "spanpoint.guard.loop",
    "GuardAgentState": "spanpoint.guard.middleware",
    "GuardMiddleware": "spanpoint.guard.middleware",
    "GuardReport": "spanpoint.guard.report",
    "GuardedGraph": "spanpoint.guard.runner",
    "compile_guarded_graph": "spanpoint.guard.runner",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
