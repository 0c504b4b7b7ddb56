"""The guard's graph-state keys: what a graph running the guard carries, and nothing heavy.

The guard's state lives in LangGraph graph state (never in the checkpoint store) under
:data:`STATE_KEY`; run summaries read it to report the guard without importing the guard.
"""

from __future__ import annotations

from typing import Final

#: The graph-state key of the guard's JSON-safe state (one per thread, checkpointed with it).
STATE_KEY: Final = "spanpoint_guard"
#: The graph-state key that says the guard stopped the run.
TERMINATED_KEY: Final = "guard_terminated"
#: The graph-state key of the guard's reason for stopping.
REASON_KEY: Final = "guard_reason"
#: The key of the value a graph's input step writes to :data:`STATE_KEY` to open a new run
#: (see ``spanpoint.guard.engine.run_start`` and ``opened``).
RUN_START: Final = "spanpoint_guard.run_start"
