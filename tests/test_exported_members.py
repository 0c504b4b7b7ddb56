"""The public face: ``spanpoint.__all__`` is exactly the names docs/api.md documents, each
importable from ``spanpoint`` and documented by a docstring; every name that left the face
still imports, with a ``DeprecationWarning`` naming its home; ``spanpoint.run`` and
``spanpoint.step`` are their modules and call their namesakes."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import spanpoint

ROOT = Path(__file__).resolve().parents[1]
API = (ROOT / "docs" / "api.md").read_text()

#: The first column of docs/api.md's table: `name` in backticks.
DOCUMENTED = tuple(re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", API, re.M))
#: docs/api.md's "Moved names" table: old name -> the module it lives in now.
MOVED_DOCUMENTED = {
    old: new.rpartition(".")[0]
    for old, new in re.findall(r"^\| `spanpoint\.(\w+)` \| `([\w.]+)` \|", API, re.M)
    if new.endswith("." + old)
}
if "| `spanpoint.build_resume_request(result, value)` | `result.resume_request(value)`" in API:
    MOVED_DOCUMENTED["build_resume_request"] = "spanpoint.graph"
#: Every name ``spanpoint.__all__`` has offered (tests/public_names.txt).
EVER = tuple(
    line
    for line in (ROOT / "tests" / "public_names.txt").read_text().splitlines()
    if line and not line.startswith("#")
)
MOVED = sorted(set(EVER) - set(spanpoint.__all__))


def test_all_is_exactly_the_documented_names() -> None:
    assert len(DOCUMENTED) == len(set(DOCUMENTED)), "a name is documented twice"
    assert sorted(spanpoint.__all__) == sorted(DOCUMENTED)


def test_the_face_is_small() -> None:
    # About 35 names: the guard lives in spanpoint.guard, specific errors in spanpoint.errors.
    assert len(spanpoint.__all__) <= 35
    assert not [n for n in spanpoint.__all__ if n.startswith("Guard") or n == "guard_graph"]
    errors = [n for n in spanpoint.__all__ if n.endswith("Error")]
    assert sorted(errors) == ["ConfigurationError", "SpanpointError", "StoreError"]


def test_every_moved_name_is_documented_with_its_home() -> None:
    assert sorted(MOVED_DOCUMENTED) == MOVED
    for name, home in MOVED_DOCUMENTED.items():
        assert home != "spanpoint"
        assert getattr(importlib.import_module(home), name) is not None, (name, home)


@pytest.mark.parametrize("name", sorted(spanpoint.__all__))
def test_each_public_name_imports_and_has_a_docstring(name: str) -> None:
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the face itself never warns
        exec(f"from spanpoint import {name}", namespace)
    value = namespace[name]
    assert value is getattr(spanpoint, name)
    if name != "__version__":
        assert inspect.getdoc(value), f"spanpoint.{name} has no docstring"


@pytest.mark.parametrize("name", MOVED)
def test_a_moved_name_warns_once_and_is_the_same_object(name: str) -> None:
    home = MOVED_DOCUMENTED[name]
    expected = getattr(importlib.import_module(home), name)
    namespace: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(f"from spanpoint import {name}", namespace)
    found = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(found) == 1, [str(w.message) for w in found]
    assert f"{home}.{name}" in str(found[0].message)
    assert namespace[name] is expected
    with pytest.warns(DeprecationWarning, match=re.escape(f"spanpoint.{name} moved to {home}")):
        assert getattr(spanpoint, name) is expected
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        spanpoint.NoSuchName  # noqa: B018


def test_star_import_gives_the_face_without_warnings() -> None:
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec("from spanpoint import *", namespace)
    assert set(spanpoint.__all__) <= set(namespace)
    assert not set(MOVED) & set(namespace)


@pytest.mark.parametrize(("name", "namesake"), [("run", "run"), ("step", "step")])
def test_run_and_step_are_their_modules_and_call_their_namesakes(name: str, namesake: str) -> None:
    module = sys.modules[f"spanpoint.{name}"]
    assert getattr(spanpoint, name) is module
    namespace: dict[str, Any] = {}
    exec(f"import spanpoint.{name} as m", namespace)
    assert namespace["m"] is module
    assert callable(module) and callable(getattr(module, namesake))
    assert inspect.getdoc(module)


def test_calling_the_run_and_step_modules_runs_and_replays(configured: Any, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"

    @spanpoint.step
    def add(x: int) -> int:
        with effects.open("a") as fh:
            fh.write("add\n")
        return x + 1

    @spanpoint.step(name="double")
    def double(x: int) -> int:
        with effects.open("a") as fh:
            fh.write("double\n")
        return x * 2

    for _ in range(2):
        with spanpoint.run("face-1") as run:
            assert isinstance(run, spanpoint.run.run)
            assert double(add(1)) == 4
    assert effects.read_text().split() == ["add", "double"]  # the second run replayed both


def test_a_fresh_interpreter_sees_the_modules() -> None:
    # In a new process too (no test imported the modules first): the face makes them so.
    code = (
        "import spanpoint, spanpoint.run as r, spanpoint.step as s, types;"
        "assert isinstance(r, types.ModuleType) and isinstance(s, types.ModuleType);"
        "assert spanpoint.run is r and spanpoint.step is s;"
        "print(type(spanpoint.run('x')).__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "run"
