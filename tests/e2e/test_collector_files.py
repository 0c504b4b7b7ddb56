"""collector/compose.yaml stays consistent with the rest of the repo (fast; no Docker needed)."""

from __future__ import annotations

import re

import yaml

from tests.e2e.stack import ROOT

COLLECTOR = ROOT / "collector"


def _compose() -> dict:
    return yaml.safe_load((COLLECTOR / "compose.yaml").read_text())


def test_compose_collector_image_is_the_release_builder_yaml_pins() -> None:
    manifest = (COLLECTOR / "builder.yaml").read_text()
    releases = set(re.findall(r"^\s+- gomod: \S+ v(0\.\d+\.\d+)$", manifest, re.MULTILINE))
    assert len(releases) == 1, releases  # one collector release for every component
    image = _compose()["services"]["collector"]["image"]
    assert image.endswith(f":{releases.pop()}"), image


def test_every_file_compose_mounts_exists() -> None:
    for name, service in _compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (COLLECTOR / source).exists(), (name, source)
