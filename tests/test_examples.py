"""Every ``examples/*.py`` runs offline, in its own process (a fork of tests/spawn.py's
pre-imported servers), and exits 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spawn import run_python

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))
OTEL_ENDPOINT_VARS = [v for v in os.environ if v.startswith("OTEL_EXPORTER_OTLP")]


def test_there_are_examples() -> None:
    assert EXAMPLES, "examples/ holds no *.py file"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_offline(example: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in OTEL_ENDPOINT_VARS}
    env.update(
        SPANPOINT_STORE=str(tmp_path / "checkpoints.db"),
        SPANPOINT_TRACE_FILE=str(tmp_path / "traces.jsonl"),
        # No network: any accidental remote call fails fast instead of hanging.
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
    )
    done = run_python([str(example)], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, f"{example.name} failed:\n{done.stdout}\n{done.stderr}"
