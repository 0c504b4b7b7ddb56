"""spanpoint.configure(): idempotent wiring into the OTel SDK, default outputs, bad settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint.processor import DurableSampler
from spanpoint.stores import MemoryStore
from tests.otlp_receiver import OtlpReceiver

APP = textwrap.dedent(
    """
    import spanpoint

    @spanpoint.step(name="work")
    def work(x):
        return x + 1

    with spanpoint.run("cfg-run", name="cfg"):
        work(1)
    print(spanpoint.settings().trace_destination)
    """
)


def processors(provider: TracerProvider) -> list[object]:
    return list(provider._active_span_processor._span_processors)


def test_with_an_application_provider_it_only_adds_the_processor_once() -> None:
    provider = TracerProvider()
    for _ in range(3):
        spanpoint.configure(tracer_provider=provider, store=MemoryStore())
    kinds = sorted(type(p).__name__ for p in processors(provider))
    # the checkpoint processor, and the one that turns GenAI spans into client metrics
    assert kinds == ["CheckpointSpanProcessor", "GenAIMetricsProcessor"]
    assert isinstance(provider.sampler, DurableSampler)
    assert not isinstance(provider.sampler.delegate, DurableSampler)
    assert spanpoint.settings().trace_destination == "application tracer provider"


def test_configure_keeps_earlier_choices_when_called_again() -> None:
    store = MemoryStore()
    spanpoint.configure(tracer_provider=TracerProvider(), store=store, strict=True)
    again = spanpoint.configure()
    assert again.store is store and again.strict is True


@pytest.mark.parametrize("field", ["lease_ttl_s", "lease_wait_timeout_s"])
def test_bad_durations_are_rejected(field: str) -> None:
    with pytest.raises(spanpoint.ConfigurationError, match=f"{field} must be a positive"):
        spanpoint.configure(**{field: 0})


def test_a_store_of_the_wrong_type_is_rejected() -> None:
    with pytest.raises(spanpoint.ConfigurationError, match="store must be a CheckpointStore"):
        spanpoint.configure(tracer_provider=TracerProvider(), store=42)  # type: ignore[arg-type]


def run_app(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    return subprocess.run(
        [sys.executable, "-c", APP],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_provider_traces_go_to_a_local_file(tmp_path: Path) -> None:
    done = run_app(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "file .spanpoint/traces.jsonl"
    lines = (tmp_path / ".spanpoint" / "traces.jsonl").read_text().splitlines()
    spans = {s["name"]: s for s in map(json.loads, lines)}
    assert spans["step work"]["attributes"]["spanpoint.run.id"] == "cfg-run"
    assert spans["step work"]["parent_span_id"] == spans["invoke_workflow cfg"]["span_id"]
    assert (tmp_path / ".spanpoint" / "checkpoints.db").stat().st_mode & 0o777 == 0o600


def test_with_an_otlp_endpoint_traces_are_exported_over_otlp(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        done = run_app(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_SERVICE_NAME="cfg-test",
        )
        assert done.returncode == 0, done.stderr
        names = sorted(span.name for span in receiver.spans())
    # The URL the exporter really posts to: the generic endpoint plus /v1/traces.
    assert done.stdout.strip() == f"OTLP {receiver.endpoint}/v1/traces"
    assert names == ["invoke_workflow cfg", "step work"]
    assert not (tmp_path / ".spanpoint" / "traces.jsonl").exists()
