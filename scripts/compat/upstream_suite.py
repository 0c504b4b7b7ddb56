#!/usr/bin/env python3
"""Run an upstream test suite twice — plain, then with spanpoint's auto-instrumentation — and
compare the sets of passing tests.

    python scripts/compat/upstream_suite.py langgraph    # LangGraph's own tests
    python scripts/compat/upstream_suite.py langchain    # create_agent and middleware tests
    python scripts/compat/upstream_suite.py langgraph --version 1.2.24 --json report.json
    python scripts/compat/upstream_suite.py langchain --config thread   # calls made durable

What it does (stdlib only, so any python3 ≥ 3.11 can run it):

1. ``pip download --no-binary :all: --no-deps <package>==X``: the sdist of the version
   installed next to spanpoint (its tests and its ``uv.lock`` ship in the sdist).
2. A separate virtualenv with the sdist, the test dependencies of its ``test`` group, and the
   versions its ``uv.lock`` pins for them (langchain-core above all) as pip constraints, plus
   the OpenTelemetry packages spanpoint needs at the versions of the calling interpreter.
   spanpoint itself is not installed there: ``PYTHONPATH`` points at this checkout's ``src``,
   so the cached environment stays valid while spanpoint's code changes.
3. ``pytest <tests> -q`` (LangGraph: ``NO_DOCKER=true``, no PostgreSQL/Redis fixtures), once
   plain and once with ``-p spanpoint.pytest_plugin`` in one of three configurations
   (``--config``): ``trace`` (zero-code tracing, the default), ``thread``
   (``SPANPOINT_STRATEGY=calls SPANPOINT_DURABLE=thread``: every model and tool call on a
   thread with a checkpointer is a boundary) and ``run`` (``calls``, and each test inside
   ``spanpoint.run(<test id>)``, by ``scripts/compat/run_each_test.py``). The plain result
   depends only on the package and its lock, so it is cached too. Tests that passed plain
   but not instrumented are run again, both ways, to tell a flaky test from a real
   difference.

Everything is cached under ``${SPANPOINT_CACHE:-~/.cache/spanpoint}/compat/``, keyed by the
package version, the Python version and the OpenTelemetry versions. Exit status 0 when every
test that passes plain also passes instrumented and the plugin recorded spans.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Profile:
    """How one upstream package's suite is installed and run."""

    tests: tuple[str, ...]
    # Its "test" dependency group minus tools that only profile, watch or measure coverage.
    skip_deps: frozenset[str]
    env: dict[str, str] = field(default_factory=dict)
    # Install LangGraph at the calling interpreter's versions rather than the suite's lock:
    # spanpoint instruments only the LangGraph versions it supports (a suite whose lock names
    # an older one would run uninstrumented and prove nothing).
    pins_langgraph: bool = False


PROFILES = {
    # LangGraph's whole unit suite; the CLI is a dev server the unit tests do not start.
    "langgraph": Profile(
        tests=("tests",),
        skip_deps=frozenset({"pytest-cov", "pytest-watcher", "pyperf", "py-spy", "langgraph-cli"}),
        env={"NO_DOCKER": "true"},
    ),
    # LangChain's agent tests: create_agent and every middleware (core and implementations).
    "langchain": Profile(
        tests=("tests/unit_tests/agents",),
        skip_deps=frozenset({"pytest-cov", "pytest-watcher", "pytest-benchmark", "fastmcp"}),
        pins_langgraph=True,
    ),
}
# What spanpoint imports, installed at the calling interpreter's versions (the exporters are
# imported only when an OTLP endpoint is set, which the plugin never does).
SPANPOINT_DEPS = (
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-semantic-conventions",
    "opentelemetry-instrumentation",
    "wrapt",
)
# What a suite with ``pins_langgraph`` gets at the calling interpreter's versions as well.
LANGGRAPH_DEPS = ("langgraph", "langgraph-checkpoint", "langgraph-prebuilt")
PLUGIN = "spanpoint.pytest_plugin"
# The configurations an instrumented run can take: environment, and extra pytest plugins
# (found on PYTHONPATH, which holds this folder).
CONFIGS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "trace": ({}, ()),
    "thread": ({"SPANPOINT_STRATEGY": "calls", "SPANPOINT_DURABLE": "thread"}, ()),
    "run": ({"SPANPOINT_STRATEGY": "calls"}, ("-p", "run_each_test")),
}


def log(message: str) -> None:
    """Progress on stderr, with the time since start."""
    print(f"[compat {time.monotonic() - START:6.1f}s] {message}", file=sys.stderr, flush=True)


START = time.monotonic()


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; raise with its output when it fails."""
    proc = subprocess.run(cmd, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SystemExit(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}"
            f"\n{proc.stderr[-4000:]}"
        )
    return proc


def cache_root() -> Path:
    """``$SPANPOINT_CACHE/compat``, default ``~/.cache/spanpoint/compat``."""
    base = os.environ.get("SPANPOINT_CACHE") or str(Path.home() / ".cache" / "spanpoint")
    return Path(base) / "compat"


def source_digest() -> str:
    """A digest of spanpoint's source files: what the instrumented run depends on."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "src" / "spanpoint").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def spanpoint_dep_pins(profile: Profile | None = None) -> list[str]:
    """``name==version`` for spanpoint's OpenTelemetry deps (and LangGraph, for a profile that
    pins it), as installed here."""
    pins = []
    names = SPANPOINT_DEPS + (LANGGRAPH_DEPS if profile and profile.pins_langgraph else ())
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def fetch_sdist(package: str, version: str, cache: Path) -> Path:
    """The extracted sdist of ``package==version`` (downloaded once)."""
    src = cache / f"{package}-{version}"
    if (src / "uv.lock").exists() and (src / "tests").is_dir():
        return src
    download = cache / "download"
    download.mkdir(parents=True, exist_ok=True)
    log(f"pip download --no-binary :all: --no-deps {package}=={version}")
    run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
         f"{package}=={version}", "-d", str(download)]
    )  # fmt: skip
    archive = next(download.glob(f"{package}-{version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return src


def lock_versions(src: Path, *, registry_only: bool = True) -> dict[str, str]:
    """The version ``uv.lock`` pins for each package (by default: each taken from PyPI).

    Names locked at several versions (per Python version) are left out, and so are the
    packages the monorepo builds from source (``editable``: often an unreleased version).
    """
    lock = tomllib.loads((src / "uv.lock").read_text())
    versions: dict[str, set[str]] = {}
    for pkg in lock["package"]:
        if pkg.get("version") and (not registry_only or "registry" in pkg.get("source", {})):
            versions.setdefault(pkg["name"], set()).add(pkg["version"])
    return {name: next(iter(v)) for name, v in versions.items() if len(v) == 1}


def requirement_name(req: str) -> str:
    """``pytest-xdist`` from ``pytest-xdist[psutil]>=3; python_version < '3.14'``."""
    name = req.split(";")[0]
    for sep in "[=<>!~ ":
        name = name.split(sep)[0]
    return name.strip().lower()


def test_requirements(src: Path, skip: frozenset[str]) -> list[str]:
    """The sdist's ``test`` dependency group, minus ``skip``."""
    project = tomllib.loads((src / "pyproject.toml").read_text())
    reqs = []
    for req in project["dependency-groups"]["test"]:
        if not isinstance(req, str):
            continue
        if requirement_name(req) not in skip:
            reqs.append(req)
    return reqs


def build_venv(src: Path, env_dir: Path, profile: Profile) -> Path:
    """A virtualenv with the sdist and its locked test dependencies (built once)."""
    python = env_dir / "bin" / "python"
    stamp = env_dir / ".complete"
    if stamp.exists():
        return python
    shutil.rmtree(env_dir, ignore_errors=True)
    log(f"building {env_dir}")
    run([sys.executable, "-m", "venv", str(env_dir)])
    # The lock's versions of the direct requirements (langchain-core above all) are pinned;
    # their own dependencies are left to pip: a universal lock may name a version of a
    # transitive package that this index or this Python cannot install.
    pinned = lock_versions(src)
    requirements = test_requirements(src, profile.skip_deps)
    names = {requirement_name(r) for r in requirements} | {"langchain-core"}
    project = tomllib.loads((src / "pyproject.toml").read_text())["project"]
    names |= {requirement_name(r) for r in project["dependencies"]}
    own = {requirement_name(p) for p in spanpoint_dep_pins(profile)}
    cfile = env_dir / "constraints.txt"
    cfile.write_text("".join(f"{n}=={pinned[n]}\n" for n in sorted(names - own) if n in pinned))
    # langchain-core at the lock's version even when the lock builds it from source (LangChain's
    # monorepo does): that version is released.
    core_version = lock_versions(src, registry_only=False)["langchain-core"]
    core = f"langchain-core=={core_version}"
    run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-c", str(cfile), core, *requirements, *spanpoint_dep_pins(profile), str(src)]
    )  # fmt: skip
    freeze = run([str(python), "-m", "pip", "freeze"]).stdout
    (env_dir / "freeze.txt").write_text(freeze)
    stamp.write_text(core + "\n")
    return python


def run_suite(
    python: Path,
    src: Path,
    out: Path,
    extra: list[str],
    tests: list[str],
    profile: Profile,
    config_env: dict[str, str] | None = None,
) -> tuple[set[str], set[str], float]:
    """Run the suite; return (passed, failed-or-errored) test ids and the wall time.
    ``config_env``: spanpoint's configuration (``CONFIGS``), set after every inherited
    ``SPANPOINT_*`` variable is removed."""
    env = dict(os.environ)
    span_report = out.with_suffix(".spans.jsonl")
    span_report.unlink(missing_ok=True)
    env.update(
        **profile.env,
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(Path(__file__).resolve().parent)]),
        PYTHONDONTWRITEBYTECODE="1",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
    )
    for var in [v for v in env if v.startswith(("OTEL_", "SPANPOINT_"))]:
        del env[var]  # the plugin configures spanpoint itself; nothing leaves the process
    env.update(config_env or {})
    env["SPANPOINT_PLUGIN_REPORT"] = str(span_report)
    cmd = [
        str(python), "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--junitxml", str(out), "-o", "junit_family=xunit1",
        "--durations=0", "--no-header", "-rN", *extra,
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=src, env=env, text=True, capture_output=True)
    elapsed = time.monotonic() - started
    (out.with_suffix(".log")).write_text(proc.stdout + proc.stderr)
    if not out.exists():
        raise SystemExit(f"pytest produced no report ({proc.returncode}):\n{proc.stdout[-4000:]}")
    passed, failed = parse_junit(out)
    return passed, failed, elapsed


def span_counts(out: Path) -> dict[str, int]:
    """Spans recorded by the plugin in every process of the run at ``out`` (xdist workers)."""
    totals: dict[str, int] = {}
    path = out.with_suffix(".spans.jsonl")
    for line in path.read_text().splitlines() if path.exists() else ():
        for key, count in json.loads(line)["spans"].items():
            totals[key] = totals.get(key, 0) + count
    return totals


def replay_counts(out: Path) -> dict[str, int]:
    """Replayed boundaries per test id in the run at ``out`` (every process of it)."""
    totals: dict[str, int] = {}
    path = out.with_suffix(".spans.jsonl")
    for line in path.read_text().splitlines() if path.exists() else ():
        for test, count in json.loads(line).get("replays", {}).items():
            totals[test] = totals.get(test, 0) + count
    return totals


def case_path(case: ET.Element) -> str:
    """``tests/test_x.py`` or ``tests/test_x.py::TestClass`` for a JUnit (xunit1) test case."""
    classname = case.get("classname") or ""
    file = case.get("file")
    if not file:
        return classname.replace(".", "/") + ".py"
    module = file.removesuffix(".py").replace("/", ".")
    if classname.startswith(module + "."):
        return f"{file}::{classname[len(module) + 1 :].replace('.', '::')}"
    return file


def parse_junit(path: Path) -> tuple[set[str], set[str]]:
    """(passed, failed or errored) test ids from a JUnit XML report; skips are neither."""
    passed: set[str] = set()
    failed: set[str] = set()
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case_path(case)}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed.add(test_id)
        elif "skipped" not in kinds:
            passed.add(test_id)
    return passed, failed


def compare(args: argparse.Namespace) -> dict[str, object]:
    """Build (or reuse) the environment, run both ways, and return the comparison."""
    package, profile = args.package, PROFILES[args.package]
    version = args.version or metadata.version(package)
    tests = args.tests or list(profile.tests)
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    key = hashlib.sha256("\n".join(spanpoint_dep_pins(profile)).encode()).hexdigest()[:10]
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    src = fetch_sdist(package, version, cache)
    env_dir = cache / f"venv-{package}-{version}-{py}-{key}"
    python = build_venv(src, env_dir, profile)
    extra = ["-n", args.workers] if args.workers else []
    # Test ids are "file[::Class]::name"; the scope names the ids' format too.
    scope = hashlib.sha256(" ".join(["ids-v2", *tests, *extra]).encode()).hexdigest()[:8]
    baseline = env_dir / f"plain-{scope}.json"
    timings: dict[str, float] = {}
    if baseline.exists() and not args.fresh_baseline:
        data = json.loads(baseline.read_text())
        plain_pass, plain_fail = set(data["passed"]), set(data["failed"])
        log(f"plain run cached: {len(plain_pass)} passed ({baseline})")
    else:
        log(f"plain run of {package} {version} tests")
        plain_pass, plain_fail, timings["plain_s"] = run_suite(
            python, src, env_dir / "plain.xml", extra, tests, profile
        )
        baseline.write_text(
            json.dumps({"passed": sorted(plain_pass), "failed": sorted(plain_fail)})
        )
        took = timings["plain_s"]
        log(f"plain: {len(plain_pass)} passed, {len(plain_fail)} failed in {took:.0f}s")
    # The instrumented result depends on nothing but the environment (keyed above), the tests
    # selected and spanpoint's source: with all three unchanged it is reused, unless asked.
    config_env, config_plugins = CONFIGS[args.config]
    plugins = ["-p", PLUGIN, *config_plugins]
    result = env_dir / f"instrumented-{args.config}-{scope}-{source_digest()}.json"
    store = env_dir / f"sessions-{args.config}.db"
    replays: dict[str, int] = {}
    if args.second_session:
        # Both sessions keep their checkpoints in one SQLite file, new for the first.
        for leftover in env_dir.glob(f"{store.name}*"):
            leftover.unlink()
        config_env = {**config_env, "SPANPOINT_PLUGIN_STORE": str(store)}
    if result.exists() and not args.rerun and not args.second_session:
        data = json.loads(result.read_text())
        inst_pass, spans = set(data["passed"]), data["spans"]
        log(f"instrumented run cached for this spanpoint source ({result.name}); --rerun to redo")
    else:
        log(f"instrumented run ({args.config}: {' '.join(plugins)} {config_env})")
        xml = env_dir / f"instrumented-{args.config}.xml"
        inst_pass, _, timings["instrumented_s"] = run_suite(
            python, src, xml, [*plugins, *extra], tests, profile, config_env
        )
        spans = span_counts(xml)
        replays = replay_counts(xml)
        if inst_pass >= plain_pass and spans and not args.second_session:
            result.write_text(json.dumps({"passed": sorted(inst_pass), "spans": spans}))
    log(f"instrumented: {len(inst_pass)} passed; spans {spans}")
    lost = plain_pass - inst_pass
    flaky: set[str] = set()
    if lost:
        log(f"{len(lost)} tests passed plain but not instrumented; running them again both ways")
        ids = sorted(lost)
        again_inst, _, _ = run_suite(
            python, src, env_dir / f"again-{args.config}.xml", plugins, ids, profile, config_env
        )
        # Flaky only when it passes instrumented on its own; a test the re-run did not even
        # collect stays a difference.
        flaky = lost & again_inst
        lost -= flaky
    sessions: dict[str, object] = {}
    if args.second_session:
        log("second session on the first one's store")
        xml = env_dir / f"second-{args.config}.xml"
        second_env = {**config_env, "SPANPOINT_COMPAT_SESSION": "second"}
        second_pass, _, timings["second_s"] = run_suite(
            python, src, xml, [*plugins, *extra], tests, profile, second_env
        )
        second_replays = replay_counts(xml)
        # As above: a test the second session lost is run again (in it) before it counts.
        lost_second = inst_pass - second_pass
        flaky_second: set[str] = set()
        if lost_second:
            again, _, _ = run_suite(
                python, src, env_dir / f"again-second-{args.config}.xml", plugins,
                sorted(lost_second), profile, second_env,
            )  # fmt: skip
            flaky_second = lost_second & again
        # A test that replays more in the second session found a checkpoint of the first.
        grew = {
            t: (replays.get(t, 0), n) for t, n in second_replays.items() if n > replays.get(t, 0)
        }
        sessions = {
            "store": str(store),
            "first_passed": len(inst_pass),
            "second_passed": len(second_pass),
            "same_pass_set": not lost_second - flaky_second,
            "only_first": sorted(lost_second - flaky_second),
            "flaky": sorted(flaky_second),
            "only_second": sorted(second_pass - inst_pass),
            "replays_first": sum(replays.values()),
            "replays_second": sum(second_replays.values()),
            "tests_replaying_more_in_second": grew,
        }
        log(f"second session: {len(second_pass)} passed; replays {sessions['replays_second']}")
    return {
        "package": package,
        "version": version,
        "config": args.config,
        "environment": str(env_dir),
        "plain_passed": len(plain_pass),
        "plain_failed": len(plain_fail),
        "instrumented_passed": len(inst_pass),
        "only_plain": sorted(lost),
        "only_instrumented": sorted(inst_pass - plain_pass),
        "flaky": sorted(flaky),
        "spans_recorded": spans,
        "timings": timings,
        "second_session": sessions,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("package", choices=sorted(PROFILES), help="whose test suite to run")
    parser.add_argument("--version", default=None, help="package version (default: installed)")
    parser.add_argument("--json", type=Path, default=None, help="write the comparison here")
    parser.add_argument("--workers", default=None, help="pytest-xdist -n value (e.g. 2)")
    parser.add_argument(
        "--config",
        choices=sorted(CONFIGS),
        default="trace",
        help="spanpoint's configuration: trace (zero-code tracing), thread (calls durable on "
        "checkpointed threads), run (calls durable, each test inside spanpoint.run)",
    )
    parser.add_argument("--fresh-baseline", action="store_true", help="rerun the plain suite")
    parser.add_argument(
        "--rerun", action="store_true", help="rerun the instrumented suite even if cached"
    )
    parser.add_argument(
        "--second-session",
        action="store_true",
        help="run the instrumented suite twice on one SQLite store; the second must pass the "
        "same tests and no test may replay more than it did in the first",
    )
    parser.add_argument("tests", nargs="*", help="test paths (default: the profile's)")
    # Test paths may follow the options (``langchain --config run tests/x.py``).
    args = parser.parse_intermixed_args(argv)
    report = compare(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    # No spans would mean the plugin never instrumented anything: a comparison proving nothing.
    sessions = report["second_session"]
    second_differs = bool(sessions) and not (
        sessions["same_pass_set"] and not sessions["tests_replaying_more_in_second"]
    )
    return (
        1
        if report["only_plain"]
        or not report["instrumented_passed"]
        or not report["spans_recorded"]
        or second_differs
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
