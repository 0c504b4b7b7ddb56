"""``spanpoint demo``: offline, two attempts, the replay marked, telemetry destinations named."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from spawn import run_python


def run_demo(tmp_path: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env.update(COLUMNS="200", **extra_env)
    return run_python(
        ["-c", "from spanpoint.cli import main; main()", "demo", *args],
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip


def test_demo_crashes_once_then_replays(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--run-id", "demo-test")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    first, second = out.split("attempt 1 — ", 1)[1].split("attempt 2 — ", 1)
    assert first.startswith("run failed") and "ReportStoreDown" in first
    assert first.count("invoke_agent triage  ✓ executed") == 2
    assert second.startswith("run completed")
    assert second.count("invoke_agent triage  ↺ replayed from the store") == 2
    assert "step load_ticket  ↺ replayed" in second
    assert "step write_report  ✓ executed" in second
    assert "model calls          2" in out and "Slack posts          1" in out
    assert "✗" not in out.split("side effects over both attempts", 1)[1]  # every check holds
    # Embedded defaults: everything under .spanpoint/, traces to the local file.
    assert "traces: file .spanpoint/traces.jsonl" in out
    assert "run summaries (log records): file .spanpoint/logs.jsonl" in out
    spanpoint_dir = tmp_path / ".spanpoint"
    assert (spanpoint_dir / "checkpoints.db").exists()
    traces = (spanpoint_dir / "traces.jsonl").read_text()
    assert '"spanpoint.replayed":true' in traces
    assert "spanpoint.run_summary" in (spanpoint_dir / "logs.jsonl").read_text()


def test_demo_names_the_otlp_endpoint_when_set(tmp_path: Path) -> None:
    # Nothing listens there: the demo still completes, and says the export failed and why
    # instead of naming the endpoint as where the telemetry went.
    done = run_demo(
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "traces: export FAILED — OTLP http://127.0.0.1:9/v1/traces accepted none" in done.stdout
    why = done.stdout.split("traces: export FAILED", 1)[1].splitlines()[0].split(" spans: ")[1]
    # With a 1 s timeout the exporter may give up before it logs the refused connection.
    gave_up = "gave up: no success within the export timeout and its retries"
    assert why in ("connection refused (nothing listens there)", gave_up)
    assert (
        "run summaries (log records): export FAILED — OTLP http://127.0.0.1:9/v1/logs"
        in done.stdout
    )


def test_demo_traces_model_and_tool_calls_and_warns_about_nothing(tmp_path: Path) -> None:
    """The demo applies the instrumentation it showcases (chat spans with token usage,
    execute_tool spans) on a durable LangGraph checkpointer, so nothing warns about it."""
    import json

    done = run_demo(tmp_path, "--run-id", "demo-spans")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warn" not in (done.stdout + done.stderr).lower()
    spans = [json.loads(line) for line in (tmp_path / ".spanpoint" / "traces.jsonl").open()]
    chats = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    tools = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert len(chats) == 2 and len(tools) == 2  # attempt 1 only: attempt 2 replays the agent
    for chat in chats:
        assert chat["name"] == "chat triage-fake-1"
        assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
        assert chat["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert {t["name"] for t in tools} == {"execute_tool escalate_ticket"}
    assert [s["name"] for s in spans if "spanpoint.warnings" in s["attributes"]] == []
    assert (tmp_path / ".spanpoint" / "demo-langgraph.db").exists()
