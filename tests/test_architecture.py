"""The layout holds: one-way imports, no cycles, DESIGN.md's "never" rules, the public face.

Everything here reads ``src/spanpoint`` with ``ast`` (module-level, function-level and
``TYPE_CHECKING`` imports alike), so a change that breaks a rule fails here, not at run time
on the one code path that closes a cycle. The rules are DESIGN.md's ("Layout", "Never") and
the appendices of the architecture review (reviews/architecture-2026-12.md, issue 14).
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

MODULE, FUNCTION, TYPING = 0, 1, 2  # where an import stands (the review's appendix A kinds)


@dataclass(frozen=True)
class Import:
    """One ``from spanpoint... import`` edge: importer, imported module, the names, kind."""

    importer: str
    target: str
    source: str  # the module named after ``from`` (resolved when relative)
    names: tuple[str, ...]
    kind: int
    line: int
    path: Path


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    return {
        ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(src.rglob("*.py"))
    }


def _source(m: str, p: Path, node: ast.ImportFrom) -> str:
    # The review's appendix A: a relative import resolved against its package.
    base = node.module or ""
    if node.level:
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for _ in range(node.level - 1):
            pkg = pkg.rpartition(".")[0]
        base = f"{pkg}.{base}".strip(".")
    return base


def _targets(mods: dict[str, Path], base: str, node: ast.ImportFrom) -> list[str]:
    # ``from pkg import submodule`` is an edge to the submodule (appendix A).
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
    return subs if len(subs) == len(node.names) else [base]


def imports(src: Path = SRC) -> Iterator[Import]:
    """Every import of a spanpoint module by a spanpoint module, of every kind."""
    mods = modules(src)
    for m, p in mods.items():

        def walk(node: ast.AST, kind: int, m: str = m, p: Path = p) -> Iterator[Import]:
            for child in ast.iter_child_nodes(node):
                k = FUNCTION if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else kind
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    k = TYPING
                if isinstance(child, ast.ImportFrom) and (
                    (child.module or "").startswith("spanpoint") or child.level
                ):
                    source = _source(m, p, child)
                    for target in _targets(mods, source, child):
                        while target and target not in mods:
                            target = target.rpartition(".")[0]
                        if target and target != m:
                            names = tuple(a.name for a in child.names)
                            yield Import(m, target, source, names, k, child.lineno, p)
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        if alias.name.startswith("spanpoint") and alias.name != m:
                            yield Import(m, alias.name, alias.name, (), k, child.lineno, p)
                yield from walk(child, k)

        yield from walk(ast.parse(p.read_text()), MODULE)


def cycles(src: Path, max_kind: int) -> list[list[str]]:
    """The review's appendix-A computation: strongly connected groups of modules."""
    mods = modules(src)
    graph: dict[str, set[str]] = {}
    for edge in imports(src):
        if edge.kind <= max_kind:
            graph.setdefault(edge.importer, set()).add(edge.target)

    def reach(a: str) -> set[str]:
        seen, todo = set(), [a]
        while todo:
            for b in graph.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    r = {a: reach(a) for a in mods}
    comps = {frozenset({a} | {b for b in r[a] if a in r[b]}) for a in mods}
    return sorted(sorted(c) for c in comps if len(c) > 1)


@pytest.mark.parametrize(
    ("max_kind", "label"),
    [
        (MODULE, "module-level imports"),
        (FUNCTION, "+ imports inside functions"),
        (TYPING, "+ TYPE_CHECKING imports"),
    ],
)
def test_no_import_cycle_of_any_kind(max_kind: int, label: str) -> None:
    assert cycles(SRC, max_kind) == [], label


# --- one-way imports, in DESIGN.md's order ---------------------------------------------------

#: DESIGN.md's import order, lowest first: a module may import its own layer and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "spanpoint.errors",
        "spanpoint.semconv",
        "spanpoint._version",
        "spanpoint._json",
        "spanpoint._hooks",
        "spanpoint._compat",
        "spanpoint._lazy",
        "spanpoint._terminal",
        "spanpoint._prices",
        "spanpoint._files",
        "spanpoint._patches",
    ),
    ("spanpoint.capture", "spanpoint.serde"),
    ("spanpoint.stores",),
    (
        "spanpoint.telemetry",
        "spanpoint.processor",
        "spanpoint.committer",  # issue 18 item 5: durability="async"'s background writer
        "spanpoint.events",
        "spanpoint.spans",
    ),
    ("spanpoint.config", "spanpoint.guard"),
    ("spanpoint.run",),
    ("spanpoint.boundary",),
    ("spanpoint.step", "spanpoint.waits"),
    ("spanpoint.calls",),
    # issue 16: a run whose store is a file; a run again with one output overridden.
    ("spanpoint.cassettes", "spanpoint.forks"),
    ("spanpoint.diffs",),  # issue 16: two runs compared; reads stores, serde and calls.cost
    ("spanpoint.graph",),
    ("spanpoint.instrumentation",),
    ("spanpoint",),
    ("spanpoint.demo", "spanpoint.cli", "spanpoint.pytest_plugin"),
)


def layer(module: str) -> int:
    """The layer of ``module`` (the longest matching place in :data:`LAYERS`)."""
    best, found = -1, None
    for index, places in enumerate(LAYERS):
        for place in places:
            if (module == place or module.startswith(place + ".")) and len(place) > best:
                best, found = len(place), index
    assert found is not None, f"{module} has no place in DESIGN.md's layout"
    return found


def test_every_module_has_a_place_in_the_layout() -> None:
    for module in modules():
        layer(module)


def upward_imports(src: Path = SRC) -> list[str]:
    """Imports that point up DESIGN.md's order (any kind of import)."""
    return sorted(
        f"{e.importer} -> {e.target} ({e.path.name}:{e.line})"
        for e in imports(src)
        if layer(e.target) > layer(e.importer)
    )


def test_imports_point_down_the_layers() -> None:
    assert upward_imports() == []


# --- private names stay private --------------------------------------------------------------


def private_imports(src: Path = SRC) -> list[str]:
    """Underscored names one spanpoint module imports from another.

    A package-private module of the lowest layer (``spanpoint._json``, ``spanpoint._hooks``)
    may be imported by name: that is what it is for. A name defined inside another module
    may not: what two modules share is public inside its subpackage.
    """
    mods = modules(src)
    found = []
    for e in imports(src):
        for name in e.names:
            private = name.startswith("_") and not name.startswith("__")
            if private and f"{e.source}.{name}" not in mods:
                found.append(f"{e.importer} imports {e.target}.{name} ({e.path.name}:{e.line})")
    return sorted(found)


def test_no_module_imports_an_underscored_name_from_another() -> None:
    assert private_imports() == []


def unexplained_function_imports(src: Path = SRC) -> list[str]:
    """spanpoint imports inside a function without a comment saying they save import time.

    The comment stands on the import's line or right above the run of imports it opens.
    """
    found = []
    for e in imports(src):
        if e.kind != FUNCTION:
            continue
        lines = e.path.read_text().splitlines()
        spans = sorted(
            (n.lineno, n.end_lineno or n.lineno)
            for n in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(n, ast.Import | ast.ImportFrom)
        )
        start, end = next(s for s in spans if s[0] == e.line)
        while (previous := [s for s in spans if s[1] == start - 1]) != []:
            start = previous[0][0]  # the run of imports this one belongs to
        first = start - 1  # 0-based: the comment lines right above the run
        while first > 0 and lines[first - 1].strip().startswith("#"):
            first -= 1
        said = "\n".join(lines[first:end]).lower()
        if "import time" not in said:
            found.append(f"{e.importer}:{e.line}: {lines[e.line - 1].strip()}")
    return sorted(set(found))


def test_an_import_inside_a_function_says_it_saves_import_time() -> None:
    assert unexplained_function_imports() == []


# --- DESIGN.md's "never" rules (the review's appendix B) --------------------------------------

PARTS: dict[str, tuple[str, ...]] = {
    "Names": ("spanpoint.semconv", "spanpoint.errors", "spanpoint._version", "spanpoint._json"),
    "Capture": ("spanpoint.capture", "spanpoint.serde"),
    "Stores": ("spanpoint.stores",),
    "Telemetry": ("spanpoint.telemetry",),
    "Processor": ("spanpoint.processor",),
    "Events": ("spanpoint.events", "spanpoint.spans"),
    "Config": ("spanpoint.config",),
    "Core": ("spanpoint.run", "spanpoint.boundary", "spanpoint.step", "spanpoint.waits"),
    "Calls": ("spanpoint.calls",),
    "Graph": ("spanpoint.graph",),
    "Guard": ("spanpoint.guard",),
    "Zero": ("spanpoint.instrumentation",),
    "Face": ("spanpoint.cli", "spanpoint.demo"),
}

NEVER: tuple[tuple[str, str, str], ...] = (
    ("Stores", "Core", "a store knows nothing of spans or runs"),
    ("Stores", "Graph", "a store knows nothing of LangGraph"),
    ("Stores", "Capture", "a store knows nothing of LangGraph's serializer"),
    ("Stores", "Events", "a store knows nothing of spans"),
    ("Telemetry", "Config", "plumbing knows nothing of settings"),
    ("Telemetry", "Core", "plumbing knows nothing of runs"),
    ("Events", "Stores", "events never touch the store"),
    ("Events", "Config", "events take their policy from capture"),
    ("Events", "Core", "events never create or satisfy a checkpoint"),
    ("Core", "Graph", "the engine is framework-neutral"),
    ("Core", "Calls", "the engine is framework-neutral"),
    ("Processor", "Graph", "the engine is framework-neutral"),
    ("Processor", "Calls", "the engine is framework-neutral"),
    ("Guard", "Core", "the guard knows nothing of runs or boundaries"),
    ("Guard", "Config", "the guard is configured by its own arguments"),
    ("Guard", "Stores", "guard state lives in graph state; only once-tokens (stores.once)"),
    ("Graph", "Zero", "the runner never depends on the patches"),
    ("Core", "Face", "nothing imports the CLI"),
    ("Graph", "Face", "nothing imports the CLI"),
    ("Calls", "Face", "nothing imports the CLI"),
    ("Zero", "Face", "nothing imports the CLI"),
)

#: What a "never" rule allows: the guard may take once-tokens from ``stores.once``.
ALLOWED = {("Guard", "spanpoint.stores.once")}

#: Edges that break a rule today, each to be removed by the change named beside it. Empty:
#: a new entry needs a comment naming the change that removes it.
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()


def part(module: str) -> str | None:
    """The part of the layout ``module`` belongs to (appendix B), if any."""
    for name, places in PARTS.items():
        if any(module == p or module.startswith(p + ".") for p in places):
            return name
    return None


def broken_rules(src: Path = SRC) -> list[str]:
    """Edges (of any kind of import) that one of the "never" rules forbids."""
    rules = {(a, b): why for a, b, why in NEVER}
    found = []
    for e in imports(src):
        key = (part(e.importer), part(e.target))
        forbidden = key in rules and (key[0], e.target) not in ALLOWED
        if forbidden and (e.importer, e.target) not in KNOWN_VIOLATIONS:
            where = f"{e.importer} -> {e.target} ({e.path.name}:{e.line})"
            found.append(f"{where}: {rules[key]}")  # type: ignore[index]
    return sorted(found)


def test_the_never_rules_hold() -> None:
    assert broken_rules() == []


def test_the_known_violations_are_still_real() -> None:
    # An entry that no longer breaks a rule must leave the set, or the set stops meaning much.
    edges = {(e.importer, e.target) for e in imports()}
    assert edges >= KNOWN_VIOLATIONS


def framework_imports(src: Path = SRC) -> list[str]:
    """LangGraph or LangChain imports in the engine (``run``, ``boundary``, ``step``,
    ``processor``) or in the stores and the telemetry plumbing, of any kind."""
    neutral = ("spanpoint.run", "spanpoint.boundary", "spanpoint.step", "spanpoint.processor")
    found = []
    for m, p in modules(src).items():
        if not (m in neutral or part(m) in ("Stores", "Telemetry")):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{m}:{node.lineno} imports {n}" for n in names if n.startswith("lang")]
    return sorted(found)


def test_the_engine_stores_and_plumbing_import_no_framework() -> None:
    assert framework_imports() == []


def test_only_the_cli_imports_the_demo() -> None:
    importers = {e.importer for e in imports() if part(e.target) == "Face"}
    assert importers <= {"spanpoint.cli"} | {m for m in modules() if m.startswith("spanpoint.demo")}


# --- the public face -------------------------------------------------------------------------

#: Every name ``spanpoint.__all__`` has offered: each stays importable (moved ones warn).
PUBLIC_BEFORE = tuple(
    line
    for line in (ROOT / "tests" / "public_names.txt").read_text().splitlines()
    if line and not line.startswith("#")
)


def test_the_public_face_keeps_every_name() -> None:
    import warnings

    import spanpoint

    moved = set(PUBLIC_BEFORE) - set(spanpoint.__all__)
    namespace: dict[str, object] = {}
    exec("from spanpoint import *", namespace)
    for name in PUBLIC_BEFORE:
        with warnings.catch_warnings():
            # A moved name warns: tests/test_exported_members.py checks that.
            warnings.simplefilter("ignore", DeprecationWarning)
            value = getattr(spanpoint, name)
        if name not in moved:
            assert namespace[name] is value, name
        if name == "__version__":
            project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
            assert value == project["version"]
        else:
            assert inspect.getdoc(value), f"spanpoint.{name} has no docstring"


@pytest.mark.parametrize(
    "name",
    [
        "DurabilityPolicy",
        "GraphRunner",
        "InterruptInfo",
        "RunRequest",
        "RunResult",
        "build_resume_request",
        "wait_for_interrupt",
    ],
)
def test_the_graph_face_keeps_its_names(name: str) -> None:
    import spanpoint

    namespace: dict[str, object] = {}
    exec(f"from spanpoint.graph import {name}", namespace)
    assert namespace[name] is getattr(spanpoint, name)


def test_opentelemetry_instrument_finds_the_instrumentor() -> None:
    from spanpoint.instrumentation import SpanpointInstrumentor

    group = entry_points(group="opentelemetry_instrumentor")
    found = [e for e in group if e.name == "spanpoint_langgraph"]
    assert [e.value for e in found] == ["spanpoint.instrumentation:SpanpointInstrumentor"]
    assert found[0].load() is SpanpointInstrumentor


def test_the_guard_state_key_is_written_once() -> None:
    # Run summaries read the guard's state key from guard/state.py, never a copy of it.
    from spanpoint.guard.state import STATE_KEY

    found = []
    for m, p in modules().items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and node.value == STATE_KEY:
                found.append(f"{m}:{node.lineno}")
    assert [f for f in found if not f.startswith("spanpoint.guard.")] == []


def test_a_step_result_stored_before_the_move_still_replays() -> None:
    # A checkpoint written before issue 14's layout names spanpoint.graph_results; the type
    # now lives in spanpoint.graph.results. Reading the old name gives the same value, rather
    # than refusing the checkpoint and executing the step again.
    from spanpoint import serde
    from spanpoint.graph.results import InterruptInfo, RunResult

    value = RunResult(
        "interrupted", {"a": 1}, "t-1", interrupts=(InterruptInfo(0, "i-1", {"q": "ok?"}),)
    )
    tag, data = serde.dumps(value)
    old = data.replace(b"spanpoint.graph.results", b"spanpoint.graph_results")
    assert old != data and b"spanpoint.graph.results" not in old
    restored = serde.loads(tag, old)
    assert type(restored) is RunResult and restored == serde.loads(tag, data)
    assert restored.interrupts[0].id == "i-1" and restored.output == {"a": 1}


def test_the_invariant_map_names_real_tests() -> None:
    # tests/README.md maps DESIGN.md's nine invariants to tests: every name it gives exists.
    import re

    text = (ROOT / "tests" / "README.md").read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| [1-9] \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == [str(i) for i in range(1, 10)]
    for row in rows:
        current = None
        for ref in re.findall(r"`([\w/]+\.py)?((?:::\w+)?)`", row):
            path, name = ref
            if path:
                current = ROOT / "tests" / path
                assert current.exists(), path
            if name:
                assert current is not None and f"def {name[2:]}(" in current.read_text(), name


#: Upstream paths that are public though underscored: OpenTelemetry's logs API, SDK and OTLP
#: log exporters live under ``_logs`` / ``_log_exporter`` while they are experimental.
PUBLIC_UNDERSCORED = (
    "opentelemetry._logs",
    "opentelemetry.sdk._logs",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
)


def private_upstream_imports(src: Path = SRC) -> list[str]:
    """Imports of upstream private modules or names outside ``spanpoint._compat``."""
    found = []
    for m, p in modules(src).items():
        if m == "spanpoint._compat":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith(("spanpoint", "__future__")) or name.startswith(
                    PUBLIC_UNDERSCORED
                ):
                    continue
                if any(part.startswith("_") for part in name.split(".")):
                    found.append(f"{m}:{node.lineno} imports {name}")
    return sorted(found)


def test_private_upstream_names_are_imported_only_in_compat() -> None:
    assert private_upstream_imports() == []


#: Modules that write checkpoints a boundary did not just execute, and why: they copy rows
#: that were committed already (the durability rule does not apply to them). Every boundary
#: commit goes through spanpoint.processor.
COPIES_COMMITTED_ROWS = {
    "spanpoint.cassettes": "loads a cassette's recorded calls into its in-memory store",
    "spanpoint.forks": "copies a run's committed checkpoints to the fork's new run id",
}


#: The processor's entry point for a boundary span that no span processor saw: it applies the
#: commit rule itself, so the boundary may hand it the ended span.
APPLIES_THE_RULE = {"commit_unseen"}


def processor_writers(src: Path = SRC) -> set[str]:
    """The processor's functions that reach the store's put, directly or through another,
    except those that apply the commit rule themselves (``APPLIES_THE_RULE``)."""
    tree = ast.parse((src / "spanpoint" / "processor.py").read_text())
    calls: dict[str, set[str]] = {}
    writes: set[str] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.col_offset == 0:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    if node.func.attr == "put":
                        writes.add(fn.name)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    calls.setdefault(fn.name, set()).add(node.func.id)
    while True:
        more = {name for name, callees in calls.items() if callees & writes} - writes
        if not more:
            return writes - APPLIES_THE_RULE
        writes |= more


def commits_outside_the_processor(src: Path = SRC) -> list[str]:
    """Every call of a store's ``put``, or of a processor function that reaches it, made
    outside spanpoint.processor (and the row-copying modules named above)."""
    writers = processor_writers(src)
    found = []
    for module, path in modules(src).items():
        if module == "spanpoint.processor" or module in COPIES_COMMITTED_ROWS:
            continue
        tree = ast.parse(path.read_text())
        from_processor = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "spanpoint.processor"
            for alias in node.names
            if alias.name in writers
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and (
                func.attr == "put"
                or (
                    func.attr in writers
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "processor"
                )
            ):
                found.append(f"{module}:{node.lineno} calls {ast.unparse(func)}")
            elif isinstance(func, ast.Name) and func.id in from_processor:
                found.append(f"{module}:{node.lineno} calls {func.id}")
    return found


def test_checkpoints_are_committed_only_by_the_processor() -> None:
    """The durability rule (commit iff the span ended OK and the lease is still held) lives
    in one file: no other module calls a store's put or the processor's writers."""
    assert {"write", "commit"} <= processor_writers()
    assert commits_outside_the_processor() == []
    for module in COPIES_COMMITTED_ROWS:  # each exception is still real, or it goes
        assert any(m == module for m in modules()), (
            f"{module} is gone: drop it from COPIES_COMMITTED_ROWS"
        )


# --- one patch registry ------------------------------------------------------------------------

#: Framework packages whose classes and functions only ``spanpoint._patches`` may replace.
FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "langsmith", "pydantic")

#: Patching outside the registry today, each with the change that removes it. Empty is the
#: goal; a new entry needs a reason here.
KNOWN_PATCHERS = {
    # The zero-code instrumentor wraps Pregel and create_agent with wrapt, as OpenTelemetry
    # instrumentations do (_instrument/_uninstrument); moves onto spanpoint._patches with the
    # instrumentation port (design notes, "One patch registry").
    "spanpoint.instrumentation": "wrap_function_wrapper",
    # The BaseMessage edit hook of the model-call fingerprint (design notes, "One patch
    # registry": kept, installed once); moves onto spanpoint._patches with the identity change.
    "spanpoint.calls.identity": "BaseMessage.__",
}


def _framework_names(tree: ast.AST) -> set[str]:
    """Names a module binds to framework imports (at any depth)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FRAMEWORKS:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in FRAMEWORKS:
                    names.add(a.asname or a.name.split(".")[0])
    return names


def patchers(src: Path = SRC) -> dict[str, list[str]]:
    """Where a module replaces a framework attribute itself: ``setattr`` on (or assignment to
    an attribute of) a framework name, any ``setattr`` of a class attribute by name, and
    wrapt's ``wrap_function_wrapper``."""
    found: dict[str, list[str]] = {}
    for m, p in modules(src).items():
        if m == "spanpoint._patches":
            continue
        tree = ast.parse(p.read_text())
        framework = _framework_names(tree)
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
                func = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                target = node.args[0] if node.args else None
                if func == "wrap_function_wrapper":
                    hit = "wrap_function_wrapper"
                elif (
                    func == "setattr"
                    and isinstance(target, ast.Name)
                    # An instance of our own (a middleware's bound hooks) is not a class.
                    and (target.id in framework or target.id in ("owner", "cls", "klass", "kind"))
                ):
                    hit = f"setattr({target.id}, ...)"
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    for leaf in t.elts if isinstance(t, ast.Tuple) else [t]:
                        if (
                            isinstance(leaf, ast.Attribute)
                            and isinstance(leaf.value, ast.Name)
                            and leaf.value.id in framework
                        ):
                            hit = f"{leaf.value.id}.{leaf.attr}"
            if hit:
                found.setdefault(m, []).append(f"{hit} (line {node.lineno})")
    return found


def test_only_the_patch_registry_replaces_framework_attributes() -> None:
    found = patchers()
    unexplained = {
        m: hits
        for m, hits in found.items()
        if m not in KNOWN_PATCHERS or not all(KNOWN_PATCHERS[m] in h for h in hits)
    }
    assert unexplained == {}, "patch framework classes through spanpoint._patches"
    assert set(KNOWN_PATCHERS) <= set(found), "an entry no longer patches: remove it"


def test_the_patcher_check_sees_a_patch(tmp_path: Path) -> None:
    # The check above can fail: a module that patches the old way is found, each form of it.
    pkg = tmp_path / "spanpoint"
    pkg.mkdir()
    (pkg / "sneaky.py").write_text(
        "from langgraph.pregel import Pregel\n"
        "from wrapt import wrap_function_wrapper\n"
        "def install(owner, wrapper):\n"
        "    Pregel.invoke = wrapper\n"
        "    setattr(owner, 'run', wrapper)\n"
        "    wrap_function_wrapper('m', 'f', wrapper)\n"
    )
    (pkg / "fine.py").write_text(
        "def sign(middleware, hook):\n    setattr(middleware, 'h', hook)\n"
    )
    hits = patchers(tmp_path)
    assert sorted(hits) == ["spanpoint.sneaky"]
    assert len(hits["spanpoint.sneaky"]) == 3


def test_the_registry_applies_once_and_a_runner_call_replaces_nothing(
    configured: object,
) -> None:
    """At run time, generated over every loaded framework class: after the first runner call
    every attribute that is spanpoint's is one the registry lists, and a later call, seen
    from inside one of its nodes and after it, replaces no class attribute at all."""
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph

    import spanpoint
    from fakes import ScriptedModel
    from spanpoint import _patches

    model = ScriptedModel(script=lambda turn, messages: f"turns: {len(messages)}")

    @tool
    def lookup(ticket: int) -> str:
        """Look a ticket up."""
        return f"ticket {ticket}"

    def classes() -> dict[tuple[type, str], object]:
        found = {}
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] not in FRAMEWORKS or module is None:
                continue
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == name:
                    found.update({(value, k): v for k, v in list(vars(value).items())})
        return found

    seen: list[set[tuple[type, str]]] = []

    def node(state: MessagesState) -> dict[str, object]:
        reply = model.invoke(state["messages"])
        lookup.invoke({"ticket": 7})
        if before:
            now = classes()
            seen.append({k for k, v in now.items() if k in before and before[k] is not v})
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("n", node)
    builder.add_edge(START, "n")
    runner = spanpoint.GraphRunner(builder.compile(), name="patched", strategy="calls")
    before: dict[tuple[type, str], object] = {}
    with spanpoint.run("patches-1"):
        runner.invoke({"messages": [("user", "hi")]}, thread_id="t-1")
    ours = {
        k
        for k, v in classes().items()
        if str(getattr(v, "__module__", "")).startswith("spanpoint")
        # The identity hook (KNOWN_PATCHERS) is the one replacement outside the registry.
        and k[1] not in ("__setattr__", "__delattr__")
    }
    registry = {key for keys in _patches.patched().values() for key in keys}
    assert ours, "the runner's seams should be applied by its first call"
    assert ours <= registry, ours - registry
    before = classes()
    with spanpoint.run("patches-2"):
        runner.invoke({"messages": [("user", "hi")]}, thread_id="t-2")
    after = classes()
    assert seen == [set()]  # inside the node: nothing replaced for this call
    assert {k for k, v in after.items() if k in before and before[k] is not v} == set()


# --- no dead code ------------------------------------------------------------------------------


def test_no_dead_code_in_the_package() -> None:
    # The check `make lint` runs (vulture, configured in pyproject.toml); what it cannot see
    # being used is listed, with who uses it, in scripts/vulture_whitelist.py.
    done = subprocess.run(
        [sys.executable, "-m", "vulture"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dead_code_check_finds_dead_code(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(
        "def used():\n    return 1\n\n\ndef unused():\n    return used()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "vulture", str(tmp_path), "--min-confidence", "60"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "unused function 'unused'" in done.stdout


def test_test_modules_live_in_the_folder_of_their_surface() -> None:
    # tests/README.md: only the checks of the whole package stay at the top level.
    top = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert top == [
        "test_architecture.py",
        "test_code_speaks_today.py",
        "test_examples.py",
        "test_exported_members.py",
    ]


# --- one family of fake models -----------------------------------------------------------------

TESTS = ROOT / "tests"


def _imported(tree: ast.AST) -> dict[str, str]:
    """What each name a module binds to a LangChain import stands for, as ``module:attr``
    (``module:`` for a module itself)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("langchain"):
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}:{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("langchain"):
                    # ``import a.b as x`` binds x to a.b; ``import a.b`` binds a.
                    module = a.name if a.asname else a.name.split(".")[0]
                    bound[a.asname or module] = f"{module}:"
    return bound


def _language_model(ref: str) -> bool:
    """Whether ``module:attr`` (``attr`` may be dotted) names a LangChain language model class."""
    import importlib

    from langchain_core.language_models import BaseLanguageModel

    module, _, attr = ref.partition(":")
    try:
        value: object = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        submodule, _, rest = attr.partition(".")
        return bool(rest) and _language_model(f"{module}.{submodule}:{rest}")
    return isinstance(value, type) and issubclass(value, BaseLanguageModel)


def fake_models_outside_the_family(tests: Path = TESTS) -> list[str]:
    """Classes under ``tests`` outside ``fakes.py`` built directly on a LangChain language
    model (``BaseChatModel``, its fakes, a provider's model), and imports of LangChain's own
    fakes, which answer from a counter."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        if path == tests / "fakes.py":
            continue
        tree = ast.parse(path.read_text())
        bound = _imported(tree)
        where = path.relative_to(tests)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names]
                if any(n.startswith("langchain") and ".fake" in n for n in names):
                    found.append(f"{where}:{node.lineno} imports LangChain's fakes")
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                dotted = ast.unparse(base)
                head, _, rest = dotted.partition(".")
                ref = bound.get(head)
                if ref is not None and _language_model(f"{ref}{'.' if rest else ''}{rest}"):
                    found.append(f"{where}:{node.lineno} class {node.name}({dotted})")
    return found


def test_every_fake_model_is_of_the_one_family() -> None:
    # Fake models answer from the conversation they are given, never from a counter: replay
    # skips calls, so a counting fake answers differently on replay and the test proves
    # nothing. tests/fakes.py holds the family (ConversationModel, ScriptedModel); a test's
    # fake is one of them or a subclass adding what that test needs.
    assert fake_models_outside_the_family() == [], "build fake models on tests/fakes.py's"


def test_the_fake_model_check_sees_a_stray_fake(tmp_path: Path) -> None:
    (tmp_path / "fakes.py").write_text(
        "from langchain_core.language_models import BaseChatModel\n"
        "class ConversationModel(BaseChatModel): ...\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_stray.py").write_text(
        "import langchain_core.language_models as lm\n"
        "from langchain_core.language_models import BaseChatModel as Base\n"
        "from langchain_core.language_models.fake_chat_models import GenericFakeChatModel\n"
        "from langchain_core.messages import AIMessage\n"
        "from fakes import ConversationModel\n"
        "class A(Base): ...\n"
        "class B(GenericFakeChatModel): ...\n"
        "class C(lm.chat_models.BaseChatModel): ...\n"
        "class Fine(ConversationModel): ...\n"
        "class Message(AIMessage): ...\n"
    )
    found = fake_models_outside_the_family(tmp_path)
    assert [f.split(" ", 1)[1] for f in found] == [
        "imports LangChain's fakes",
        "class A(Base)",
        "class B(GenericFakeChatModel)",
        "class C(lm.chat_models.BaseChatModel)",
    ], found
