"""Every metric instrument spanpoint makes comes from one place: spanpoint.telemetry.metrics."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "spanpoint"
FACTORIES = {
    "create_counter",
    "create_up_down_counter",
    "create_histogram",
    "create_gauge",
    "create_observable_counter",
    "create_observable_gauge",
    "create_observable_up_down_counter",
}


def instrument_makers() -> set[str]:
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in FACTORIES
            ):
                found.add(str(path.relative_to(SRC)))
    return found


def test_only_telemetry_metrics_creates_instruments() -> None:
    # exporters.py's is `spanpoint doctor`'s one-off probe of the metric exporter (its own
    # provider and scope), not a metric spanpoint records.
    assert instrument_makers() == {"telemetry/metrics.py", "telemetry/exporters.py"}


def test_the_saved_cost_unit_is_the_pricing_currency() -> None:
    from spanpoint.calls.cost import CURRENCY
    from spanpoint.telemetry.metrics import SAVED_COST_CURRENCY

    assert SAVED_COST_CURRENCY == CURRENCY
