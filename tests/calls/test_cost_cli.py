"""``spanpoint show`` and ``spanpoint runs`` print executed and replayed totals (issue 16)."""

from __future__ import annotations

from typing import Any

import pytest
from test_cost import REQUEST, make_runner
from typer.testing import CliRunner

import spanpoint
from spanpoint import semconv
from spanpoint.calls.cost import run_cost


def test_show_and_runs_print_both_totals(
    configured_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanpoint.cli import app, console

    telemetry = configured_sqlite
    runner = make_runner("gpt-4o")
    with spanpoint.run("cost-cli"):
        runner.invoke(REQUEST, thread_id="t-cli")
    original = sum(s.attributes[semconv.GEN_AI_USAGE_COST_AMOUNT] for s in telemetry.spans("chat"))
    with spanpoint.run("cost-cli"):
        runner.invoke(REQUEST, thread_id="t-cli")
    totals = run_cost(telemetry.store, "cost-cli")
    address = str(telemetry.store.path)
    monkeypatch.setattr(console, "width", 300)  # lines and the runs table, unwrapped
    shown = CliRunner().invoke(app, ["show", "cost-cli", "--store", address])
    assert shown.exit_code == 0, shown.output
    assert f"saved by replay: ${original:.6f} USD" in shown.output
    assert f"executed: 2 calls, {totals.executed.tokens:,} tok, ${original:.6f}" in shown.output
    assert f"replayed: 2 calls, {totals.replayed.tokens:,} tok, ${original:.6f}" in shown.output
    listed = CliRunner().invoke(app, ["runs", "--store", address])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count(f"${original:.6f}") == 2  # executed, and replayed (saved)


def test_show_and_runs_total_a_run_without_importing_langchain(configured_sqlite: Any) -> None:
    import subprocess
    import sys

    runner = make_runner("gpt-4o")
    with spanpoint.run("cost-light"):
        runner.invoke(REQUEST, thread_id="t-light")
    address = str(configured_sqlite.store.path)
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from spanpoint.cli import app\n"
        "for args in (['show', 'cost-light'], ['runs']):\n"
        f"    out = CliRunner().invoke(app, [*args, '--store', {address!r}])\n"
        "    assert out.exit_code == 0, out.output\n"
        "    assert '2 calls' in out.output, out.output\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('langchain', 'langgraph')))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
