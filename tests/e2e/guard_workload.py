"""Real create_agent agents that go wrong: one stuck on a failing tool and stopped by
spanpoint's guard, one whose tool raises and fails the run.

The e2e workload beside ``spanpoint demo`` and ``examples/calls_agent.py``: it is what makes
the dashboards' *guard terminations* and *most failing tools* panels show real data. The fake
models (the suite's ``fakes.ScriptedModel``) answer from the conversation: always the same
tool call. Telemetry goes where the standard ``OTEL_EXPORTER_OTLP_*`` variables say.

    python tests/e2e/guard_workload.py RUN_ID
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes.py

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage
from langchain_core.tools import ToolException, tool
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

import spanpoint
from fakes import ScriptedModel
from spanpoint.guard import GuardConfig, GuardMiddleware


def stuck(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Asks for the same search every turn, whatever the tool answered."""
    return [{"name": "search", "args": {"query": "order 7"}}]


def refunding(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Asks for a refund."""
    return [{"name": "refund", "args": {"order": "7"}}]


def usage(messages: Sequence[BaseMessage]) -> tuple[int, int]:
    """Input tokens grow with the conversation, as a real provider's do."""
    return 30 * len(messages), 9


@tool
def search(query: str) -> str:
    """Search the order system (down in this scenario)."""
    raise ToolException(f"order search is unavailable (query {query!r})")


@tool
def refund(order: str) -> str:
    """Refund an order (its payment provider is down in this scenario)."""
    raise RuntimeError(f"payment provider timed out refunding {order}")


def main(run_id: str) -> int:
    """Run the stuck agent once under ``run_id``; 0 when the guard stopped it."""
    meters = MeterProvider(
        resource=Resource.create(),
        metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())],
    )
    spanpoint.configure()
    search.handle_tool_error = True
    agent = create_agent(
        ScriptedModel(script=stuck, usage=usage, model_name="StuckModel"),
        [search],
        middleware=[
            spanpoint.CheckpointMiddleware(),
            GuardMiddleware(GuardConfig(), meter_provider=meters),
        ],
    )
    failing = create_agent(
        ScriptedModel(script=refunding, usage=None, model_name="RefundModel"),
        [refund],
        middleware=[spanpoint.CheckpointMiddleware()],
    )
    try:
        with spanpoint.run(run_id, name="stuck-search"):
            out = agent.invoke({"messages": [("user", "where is order 7?")]})
        try:
            with spanpoint.run(f"{run_id}-refund", name="refund"):
                failing.invoke({"messages": [("user", "refund order 7")]})
        except RuntimeError as exc:
            print(f"refund run failed as intended: {exc}")
        else:
            print("the refund run should have failed")
            return 1
    finally:
        meters.shutdown()
    print(f"guard_terminated={out.get('guard_terminated')} reason={out.get('guard_reason')}")
    return 0 if out.get("guard_terminated") else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else f"stuck-{uuid.uuid4().hex[:6]}"))
