"""The OTel SDK's exporter environment contract, checked against a real OTLP receiver.

``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` and the per-signal endpoint/protocol/timeout variables,
with the SDK's precedence; what the demo reports when a destination rejects everything; the
local telemetry files' permissions; malformed values as clear errors.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spanpoint.errors import ConfigurationError
from spanpoint.telemetry.exporters import resolve
from tests.otlp_receiver import OtlpReceiver

# A run with a step and one graph call: spans, a run-summary log record and its metrics.
APP = textwrap.dedent(
    """
    import json
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    import spanpoint
    from spanpoint.graph import GraphRunner, RunRequest

    class State(TypedDict):
        n: int

    def inc(state):
        return {"n": state["n"] + 1}

    graph = StateGraph(State)
    graph.add_node("inc", inc)
    graph.add_edge(START, "inc")
    graph.add_edge("inc", END)
    runner = GraphRunner(graph.compile(checkpointer=InMemorySaver()), name="env")

    @spanpoint.step(name="work")
    def work(x):
        return x + 1

    with spanpoint.run("env-run", name="env"):
        work(1)
        runner.invoke(RunRequest.start({"n": 1}, thread_id="env-thread"))
    cfg = spanpoint.settings()
    print(json.dumps({"traces": cfg.trace_destination, "logs": cfg.log_destination,
                      "metrics": cfg.metric_destination}))
    """
)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env.update(OTEL_EXPORTER_OTLP_TIMEOUT="5", COLUMNS="200", **extra)
    return env


def run_app(tmp_path: Path, **env: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", APP],
        cwd=tmp_path,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from spanpoint.cli import main; main()", "demo"],
        cwd=tmp_path,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def closing_lines(out: str) -> str:
    return out.rsplit("report written once", 1)[1]


def test_logs_exporter_none_sends_no_log_records(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        where = run_app(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_LOGS_EXPORTER="none",
        )
    assert "/v1/logs" not in receiver.hits
    assert where["logs"] == "none (OTEL_LOGS_EXPORTER=none)"
    # The other signals still go: the variable turns off one signal, not OTLP.
    assert any(span.name == "step work" for span in receiver.spans())
    assert "spanpoint.graph.calls" in receiver.metric_names()
    assert not (tmp_path / ".spanpoint" / "logs.jsonl").exists()


def test_metrics_exporter_none_sends_no_metrics(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        where = run_app(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="none",
        )
    assert "/v1/metrics" not in receiver.hits
    assert where["metrics"] == "none (OTEL_METRICS_EXPORTER=none)"
    assert [r.event_name for r in receiver.log_records()] == ["spanpoint.run_summary"]
    assert not (tmp_path / ".spanpoint" / "metrics.jsonl").exists()


def test_a_traces_endpoint_alone_sends_only_traces_there(tmp_path: Path) -> None:
    # Used as is (no /v1/traces appended); logs and metrics have no endpoint: local files,
    # and the destinations printed say so (not the traces URL, not localhost:4318).
    with OtlpReceiver() as receiver:
        traces_url = f"{receiver.endpoint}/v1/traces"
        where = run_app(
            tmp_path,
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=traces_url,
            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
        )
    assert set(receiver.hits) == {"/v1/traces"}
    assert where == {
        "traces": f"OTLP {traces_url}",
        "logs": "file .spanpoint/logs.jsonl",
        "metrics": "file .spanpoint/metrics.jsonl",
    }
    assert "spanpoint.run_summary" in (tmp_path / ".spanpoint" / "logs.jsonl").read_text()
    assert "spanpoint.graph.calls" in (tmp_path / ".spanpoint" / "metrics.jsonl").read_text()


def test_a_per_signal_endpoint_wins_over_the_generic_one(tmp_path: Path) -> None:
    with OtlpReceiver() as generic, OtlpReceiver() as logs:
        where = run_app(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=generic.endpoint,
            OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=f"{logs.endpoint}/v1/logs",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
    assert set(logs.hits) == {"/v1/logs"}
    assert [r.event_name for r in logs.log_records()] == ["spanpoint.run_summary"]
    assert set(generic.hits) == {"/v1/traces", "/v1/metrics"}
    assert where["logs"] == f"OTLP {logs.endpoint}/v1/logs"
    assert where["metrics"] == f"OTLP {generic.endpoint}/v1/metrics"


def test_console_exporter_prints_spans_and_sends_none(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        done = subprocess.run(
            [sys.executable, "-c", APP],
            cwd=tmp_path,
            env=clean_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                OTEL_TRACES_EXPORTER="console",
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert '"name": "step work"' in done.stdout
    assert "/v1/traces" not in receiver.hits and "/v1/logs" in receiver.hits


def test_the_precedence_is_the_sdks() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://metrics:9090/otlp",
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "7",
    }
    traces, metrics, logs = (resolve(s, env) for s in ("traces", "metrics", "logs"))  # type: ignore[arg-type]
    assert (traces.endpoint, traces.protocol, traces.timeout_s) == (
        "http://collector:4318/v1/traces",
        "http/protobuf",
        3.0,
    )
    assert metrics.endpoint == "http://metrics:9090/otlp"  # per-signal: used as is
    # gRPC takes the generic endpoint as is, and the logs' own timeout wins.
    assert (logs.endpoint, logs.protocol, logs.timeout_s) == ("http://collector:4318/", "grpc", 7.0)
    assert resolve("traces", {}).kinds == ("file",)
    assert resolve("traces", {"OTEL_TRACES_EXPORTER": "otlp"}).endpoint == "http://localhost:4317"


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector:4318"),
        ("OTEL_TRACES_EXPORTER", "zipkin"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
    ],
)
def test_a_malformed_value_names_the_variable(var: str, value: str) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318", var: value}
    with pytest.raises(ConfigurationError, match=rf"{var}=.*for example {var}="):
        resolve("traces", env)


def test_a_malformed_endpoint_is_a_configuration_error_from_run(tmp_path: Path) -> None:
    app = (
        "import spanpoint\n"
        "try:\n"
        "    with spanpoint.run('bad-endpoint'):\n"
        "        pass\n"
        "except spanpoint.ConfigurationError as exc:\n"
        "    print('ConfigurationError:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", app],
        cwd=tmp_path,
        env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://[::1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ConfigurationError: OTEL_EXPORTER_OTLP_ENDPOINT='http://[::1'" in done.stdout
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317" in done.stdout


def test_the_demo_says_an_export_failed_and_why(tmp_path: Path) -> None:
    # A traces-only backend: it answers 405 to everything here.
    with OtlpReceiver(status=405) as receiver:
        done = run_demo(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
    assert done.returncode == 0, done.stdout + done.stderr
    tail = closing_lines(done.stdout)
    for label, path, items in (
        ("traces", "traces", "spans"),
        ("run summaries (log records)", "logs", "log records"),
        ("metrics", "metrics", "metric points"),
    ):
        assert (
            f"{label}: export FAILED — OTLP {receiver.endpoint}/v1/{path} accepted none of"
        ) in tail
        line = tail.split(f"{label}: export FAILED", 1)[1].splitlines()[0]
        assert f" {items}: HTTP 405 Method Not Allowed" in line
    assert f"traces: OTLP {receiver.endpoint}" not in tail


def test_the_demo_counts_what_was_exported(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        done = run_demo(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="none",
        )
        received = len(list(receiver.spans()))
    assert done.returncode == 0, done.stdout + done.stderr
    tail = closing_lines(done.stdout)
    assert f"traces: OTLP {receiver.endpoint}/v1/traces — {received} spans exported" in tail
    assert "metrics: none (OTEL_METRICS_EXPORTER=none)" in tail
    assert "FAILED" not in tail


def test_a_protocol_mismatch_gets_a_one_line_hint(tmp_path: Path) -> None:
    # The default protocol (gRPC) against an OTLP/HTTP-only endpoint.
    with OtlpReceiver() as receiver:
        done = run_demo(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    assert done.returncode == 0, done.stdout + done.stderr
    tail = closing_lines(done.stdout)
    assert "traces: export FAILED" in tail
    assert "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in tail


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_local_telemetry_files_are_private(tmp_path: Path) -> None:
    run_app(tmp_path)
    folder = tmp_path / ".spanpoint"
    assert mode(folder) == 0o700
    for name in ("traces.jsonl", "logs.jsonl", "metrics.jsonl"):
        assert mode(folder / name) == 0o600, name


def test_a_readable_spanpoint_folder_and_files_are_tightened(tmp_path: Path) -> None:
    folder = tmp_path / ".spanpoint"
    folder.mkdir()
    os.chmod(folder, 0o755)
    for name in ("traces.jsonl", "logs.jsonl", "metrics.jsonl"):
        (folder / name).write_text("")
        os.chmod(folder / name, 0o644)
    run_app(tmp_path)
    assert mode(folder) == 0o700
    for name in ("traces.jsonl", "logs.jsonl", "metrics.jsonl"):
        assert mode(folder / name) == 0o600, name
        assert (folder / name).read_text(), name  # and written to


def run_doctor(tmp_path: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "from spanpoint.cli import main; main()", "doctor"],
        cwd=tmp_path,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_doctor_sends_a_probe_and_says_what_arrived(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        out = run_doctor(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="none",
        )
    assert [span.name for span in receiver.spans()] == ["spanpoint.doctor"]
    assert [r.event_name for r in receiver.log_records()] == ["spanpoint.doctor"]
    assert "/v1/metrics" not in receiver.hits
    assert f"traces: OTLP {receiver.endpoint}/v1/traces — 1 spans exported" in out
    assert f"logs: OTLP {receiver.endpoint}/v1/logs — 1 log records exported" in out
    assert "metrics: none (OTEL_METRICS_EXPORTER=none)" in out


def test_doctor_reports_a_rejecting_endpoint_as_a_failure(tmp_path: Path) -> None:
    with OtlpReceiver(status=500) as receiver:
        out = run_doctor(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        ).replace("\n", " ")
    for signal in ("traces", "logs", "metrics"):
        assert f"{signal}: export FAILED — OTLP {receiver.endpoint}/v1/{signal}" in out
    assert "HTTP 500 Internal Server Error" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_as_the_trace_file_keeps_its_mode(tmp_path: Path) -> None:
    """SPANPOINT_TRACE_FILE=/dev/null is how benchmarks and users silence the local file.
    Tightening it to 0600 as root locked every other user (PostgreSQL's server among them)
    out of /dev/null. A private copy of /dev/null's node stands in for it here."""
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(node, 0o666)
    from spanpoint.telemetry.files import PrivateAppender

    assert PrivateAppender(node).append(["{}"])
    assert mode(node) == 0o666
