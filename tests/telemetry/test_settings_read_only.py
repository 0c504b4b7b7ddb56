"""Reading spanpoint.settings() has no process-wide side effect: only configure() with a
provider, or the first span spanpoint starts, installs a tracer provider. Each case runs in a
fresh interpreter, whose global tracer provider nobody has set yet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
import spanpoint

cfg = spanpoint.settings()
cfg.capture, cfg.strict, cfg.lease_ttl_s, cfg.store
print("after read:", isinstance(trace.get_tracer_provider(), TracerProvider))
if sys.argv[1] == "boundary":
    @spanpoint.step
    def one() -> int:
        return 1
    with spanpoint.run("R-1"):
        one()
    print("after boundary:", isinstance(trace.get_tracer_provider(), TracerProvider))
    print("same:", spanpoint.settings().tracer_provider is trace.get_tracer_provider())
"""


def probe(tmp_path: Path, mode: str) -> list[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "SPANPOINT_STORE": str(tmp_path / "store.db"),
        "SPANPOINT_TRACE_FILE": str(tmp_path / "traces.jsonl"),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_reading_settings_installs_no_global_tracer_provider(tmp_path: Path) -> None:
    assert probe(tmp_path, "read") == ["after read: False"]


def test_the_first_boundary_wires_the_provider(tmp_path: Path) -> None:
    assert probe(tmp_path, "boundary") == [
        "after read: False",
        "after boundary: True",
        "same: True",
    ]
