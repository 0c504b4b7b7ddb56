"""The benchmark suite, one command: ``.venv/bin/python bench/run.py [--quick]`` (``make bench``).

For each workload every setup runs in its own worker process (``bench/worker.py``); the
orchestrator asks them for one batch each, round after round, in a rotating order, so machine
noise spreads evenly over the setups. It reports per setup the median and p95 wall time per
invoke, the median CPU time of the process per invoke (machine load does not inflate it), the
ratio of each to the uninstrumented setup, spans per invoke, the RSS growth over 10,000
invokes of the linear graph, and the import times. Then the core-engine step benchmark
(``bench/bench_step.py``). Output: Markdown tables on stdout, raw numbers in
``bench/results/latest.json``.

The official OpenTelemetry GenAI LangChain instrumentation registers the same entry point name
as the others, so it gets its own virtualenv under
``${SPANPOINT_CACHE:-~/.cache/spanpoint}/bench-venvs/otel-genai``: just its two packages,
installed without dependencies, on top of the project venv's site-packages (made on first use).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import setups  # noqa: E402

OTEL_GENAI_PACKAGES = ("opentelemetry-instrumentation-genai-langchain", "opentelemetry-util-genai")


# RSS growth is a spanpoint target (the uninstrumented process is the control); the
# competitors keep no state across invokes worth 10,000 more invokes of machine time.
RSS_SETUPS = (
    "none",
    "spanpoint_zero_code",
    "spanpoint_graph_call",
    "spanpoint_replay",
)


#: The suffix of a setup run on ``--baseline``'s spanpoint instead of this checkout's.
BASELINE = "@baseline"


class Plan:
    """How much to run: rounds × batch per workload, RSS invokes, import repetitions."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        # Many short rounds: each setup sees every phase of the machine's load.
        self.rounds = 8 if quick else 30
        self.batch = (
            {"linear": 10, "agent": 2, "agent_async": 2}
            if quick
            else {"linear": 20, "agent": 4, "agent_async": 4}
        )

        self.rss_invokes = 1_000 if quick else 10_000
        self.imports = 3 if quick else 5
        self.baseline: Path | None = None


# --- the official instrumentation's venv ---------------------------------------------------


def otel_genai_python() -> Path | None:
    """The interpreter of the official instrumentation's venv, made on first use."""
    cache = Path(os.environ.get("SPANPOINT_CACHE", Path.home() / ".cache" / "spanpoint"))
    venv = cache / "bench-venvs" / "otel-genai"
    python = venv / "bin" / "python"
    if (venv / ".ready").exists():
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    try:
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--pre",
                "--no-deps",
                "--target",
                str(_site(venv)),
                *OTEL_GENAI_PACKAGES,
            ],
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        print(f"[bench] official instrumentation not installable ({exc}); skipped", file=sys.stderr)
        return None
    project_site = _site(Path(sys.prefix))
    (_site(venv) / "zz_spanpoint_project.pth").write_text(
        f"import site; site.addsitedir({str(project_site)!r})\n"
    )
    (venv / ".ready").write_text("ok\n")
    return python


def _site(venv: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / version / "site-packages"


def python_for(setup: str) -> Path | None:
    """Which interpreter runs ``setup`` (None: not available here)."""
    if setup == "otel_genai":
        return otel_genai_python()
    return Path(sys.executable)


# --- workers --------------------------------------------------------------------------------


class Worker:
    """A running ``worker.py``: one setup around one workload."""

    def __init__(self, python: Path, setup: str, workload: str, src: Path | None = None) -> None:
        self.setup = setup
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        if src is not None:
            # Another checkout's spanpoint, ahead of the installed one, for a same-run baseline.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [str(python), str(HERE / "worker.py"), setup.removesuffix(BASELINE), workload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=HERE,
            # The same string hashes in every worker: dict layouts, and so the cost of the
            # same code, differ less between processes (none_again shows what remains).
            env=env,
        )
        self.ready = self._read()

    def ask(self, **command: Any) -> dict[str, Any]:
        """Send one command, return its answer."""
        stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"worker {self.setup} died (run it by hand to see why)")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Ask the worker to quit and wait for it."""
        if self.proc.poll() is None:
            self.ask_quietly()
            self.proc.wait(timeout=30)

    def ask_quietly(self) -> None:
        """Send quit without waiting for an answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write('{"op": "quit"}\n')
        self.proc.stdin.flush()


def p95(values: list[int]) -> float:
    """The 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))])


def bench_workload(workload: str, names: list[str], plan: Plan) -> dict[str, dict[str, Any]]:
    """Interleaved rounds over every setup of ``workload``; RSS growth on ``linear``."""
    workers: dict[str, Worker] = {}
    for setup in names:
        python = python_for(setup.removesuffix(BASELINE))
        if python is None:
            continue
        src = plan.baseline if setup.endswith(BASELINE) else None
        try:
            workers[setup] = Worker(python, setup, workload, src)
        except RuntimeError as exc:
            print(f"[bench] {workload}/{setup}: {exc}", file=sys.stderr)
    samples: dict[str, dict[str, Any]] = {
        s: {"wall": [], "cpu": [], "spans": 0, "round_wall": [], "round_cpu": []} for s in workers
    }
    order = list(workers)
    try:
        for r in range(plan.rounds):
            rotated = order[r % len(order) :] + order[: r % len(order)]
            for setup in rotated:
                got = workers[setup].ask(op="batch", n=plan.batch[workload])
                samples[setup]["wall"] += got["wall_ns"]
                samples[setup]["cpu"] += got["cpu_ns"]
                samples[setup]["spans"] += got["spans"]
                samples[setup]["round_wall"].append(statistics.median(got["wall_ns"]))
                samples[setup]["round_cpu"].append(statistics.median(got["cpu_ns"]))
            print(f"[bench] {workload}: round {r + 1}/{plan.rounds}", file=sys.stderr)
        rss = {}
        if workload == "linear" and plan.rss_invokes:
            for setup, worker in workers.items():
                if setup not in RSS_SETUPS:
                    continue
                rss[setup] = worker.ask(op="rss", n=plan.rss_invokes)
                print(f"[bench] {workload}: rss of {setup} done", file=sys.stderr)
    finally:
        for worker in workers.values():
            worker.close()
    results = {}
    for setup, data in samples.items():
        n = len(data["wall"])
        results[setup] = {
            "n": n,
            "paired_wall_ratio": _paired(data["round_wall"], samples.get("none", {})),
            "paired_cpu_ratio": _paired(data["round_cpu"], samples.get("none", {}), "round_cpu"),
            "wall_median_us": statistics.median(data["wall"]) / 1e3,
            "wall_p95_us": p95(data["wall"]) / 1e3,
            "cpu_median_us": statistics.median(data["cpu"]) / 1e3,
            "spans_per_invoke": data["spans"] / n,
        }
        twin = samples.get(setup + BASELINE)
        if twin:
            # This checkout against the baseline's spanpoint, round by round.
            results[setup]["paired_cpu_vs_baseline"] = _paired(data["round_cpu"], twin, "round_cpu")
            results[setup]["paired_wall_vs_baseline"] = _paired(data["round_wall"], twin)
        if setup in rss:
            growth = rss[setup]["rss_after"] - rss[setup]["rss_before"]
            results[setup]["rss_growth_mb"] = growth / 2**20
    return results


def _paired(rounds: list[float], base: dict[str, Any], key: str = "round_wall") -> float:
    """Median over rounds of this round's median / the uninstrumented one's in that round.

    Rounds are adjacent in time, so a ratio within a round cancels the load drift that
    separate medians of a busy machine keep.
    """
    if not base:
        return float("nan")
    return statistics.median(a / b for a, b in zip(rounds, base[key], strict=True))


# --- import time ----------------------------------------------------------------------------

IMPORT_PROBE = """
import sys, time
w0, c0 = time.perf_counter(), time.process_time()
import langgraph.graph, langchain_core.runnables
w1, c1 = time.perf_counter(), time.process_time()
for name in sys.argv[1:]:
    __import__(name)
w2, c2 = time.perf_counter(), time.process_time()
print((w1 - w0) * 1e3, (w2 - w1) * 1e3, (c2 - c1) * 1e3)
"""

IMPORTS = {
    "spanpoint": (None, ["spanpoint"]),
    # spanpoint.graph is a lazy face: the runner's module is what `from spanpoint.graph import
    # GraphRunner` loads.
    "spanpoint + GraphRunner": (None, ["spanpoint", "spanpoint.graph.runner"]),
    "spanpoint.instrumentation (zero-code)": (None, ["spanpoint.instrumentation"]),
    "openinference": (None, ["openinference.instrumentation.langchain"]),
    "openllmetry": (None, ["opentelemetry.instrumentation.langchain"]),
    "otel_genai": ("otel_genai", ["opentelemetry.instrumentation.genai.langchain"]),
}


def bench_imports(plan: Plan) -> dict[str, dict[str, float]]:
    """Median ms to import each package in a fresh process after langgraph's own import."""
    imports = dict(IMPORTS)
    if plan.baseline is not None:
        imports.update(
            {label + BASELINE: spec for label, spec in IMPORTS.items() if "spanpoint" in label}
        )
    results = {}
    for label, (setup, modules) in imports.items():
        python = python_for(setup) if setup else Path(sys.executable)
        if python is None:
            continue
        env = {**os.environ}
        if label.endswith(BASELINE):
            env["PYTHONPATH"] = str(plan.baseline)
        base, extra, cpu = [], [], []
        for _ in range(plan.imports):
            out = subprocess.run(
                [str(python), "-c", IMPORT_PROBE, *modules],
                capture_output=True,
                text=True,
                check=True,
                cwd="/",
                env=env,
            ).stdout.split()
            base.append(float(out[0]))
            extra.append(float(out[1]))
            cpu.append(float(out[2]))
        results[label] = {
            "langgraph_ms": statistics.median(base),
            "beyond_langgraph_ms": statistics.median(extra),
            "beyond_langgraph_cpu_ms": statistics.median(cpu),
        }
    return results


# --- report ---------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """Versions of the packages the numbers depend on."""
    from importlib import metadata

    names = [
        "spanpoint",
        "langgraph",
        "langchain",
        "langchain-core",
        "opentelemetry-sdk",
        "openinference-instrumentation-langchain",
        "opentelemetry-instrumentation-langchain",
    ]
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    venv = otel_genai_python()
    if venv is not None:
        for name in OTEL_GENAI_PACKAGES:
            probe = f"from importlib import metadata; print(metadata.version({name!r}))"
            out = subprocess.run([str(venv), "-c", probe], capture_output=True, text=True)
            found[name] = out.stdout.strip() or "not installed"
    return found


def machine() -> dict[str, Any]:
    """Where the numbers were taken."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def table(workload: str, results: dict[str, dict[str, Any]]) -> str:
    """A Markdown table for one workload."""
    base = results.get("none")
    rows = [
        f"### {workload}\n",
        "| setup | median µs | ratio | paired ratio | p95 µs | CPU median µs | CPU ratio "
        "| paired CPU ratio | spans/invoke | RSS growth MB | paired CPU vs baseline |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for setup, r in results.items():
        ratio = r["wall_median_us"] / base["wall_median_us"] if base else float("nan")
        cpu_ratio = r["cpu_median_us"] / base["cpu_median_us"] if base else float("nan")
        rss = f"{r['rss_growth_mb']:.2f}" if "rss_growth_mb" in r else "–"
        vs = r.get("paired_cpu_vs_baseline")
        vs_text = f"{vs:.3f}" if vs is not None else "–"
        rows.append(
            f"| {setup} | {r['wall_median_us']:.0f} | {ratio:.3f} | {r['paired_wall_ratio']:.3f} "
            f"| {r['wall_p95_us']:.0f} | {r['cpu_median_us']:.0f} | {cpu_ratio:.3f} "
            f"| {r['paired_cpu_ratio']:.3f} | {r['spans_per_invoke']:.1f} | {rss} | {vs_text} |"
        )
    return "\n".join(rows)


def main() -> None:
    """Run the suite and print Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (about 3 minutes)")
    parser.add_argument("--workloads", default=",".join(setups.workloads.WORKLOADS))
    parser.add_argument("--setups", default=",".join(setups.SETUPS))
    parser.add_argument("--rss-invokes", type=int, help="invokes for the RSS growth (0: skip)")
    parser.add_argument("--no-steps", action="store_true", help="skip bench_step.py")
    parser.add_argument("--no-imports", action="store_true", help="skip import times")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="the src/ folder of another checkout (e.g. a `git worktree` of main): every "
        f"spanpoint setup also runs on it as SETUP{BASELINE} in the same rounds, and the "
        "tables add this checkout's paired ratio against it",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="run the scale benchmarks instead (bench/scale.py: big stores, long runs, many "
        "workers, the CLI); the options after it are its own, see `--scale --help`",
    )
    if "--scale" in sys.argv[1:]:
        import scale

        scale.main([arg for arg in sys.argv[1:] if arg != "--scale"])
        return
    args = parser.parse_args()
    plan = Plan(args.quick)
    if args.rss_invokes is not None:
        plan.rss_invokes = args.rss_invokes
    chosen = args.setups.split(",")
    if args.baseline is not None:
        if not (args.baseline / "spanpoint" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline}: no spanpoint package there; give a src/")
        plan.baseline = args.baseline.resolve()
        chosen += [s + BASELINE for s in chosen if s.startswith("spanpoint")]
    started = time.monotonic()
    report: dict[str, Any] = {"machine": machine(), "versions": versions(), "workloads": {}}
    for workload in args.workloads.split(","):
        names = [s for s in chosen if workload in setups.SETUPS[s.removesuffix(BASELINE)][1]]
        report["workloads"][workload] = bench_workload(workload, names, plan)
        print(table(workload, report["workloads"][workload]) + "\n", flush=True)
    if not args.no_imports:
        report["imports"] = bench_imports(plan)
        print("### import time (ms, median of fresh processes)\n")
        print(
            "| package | langgraph + langchain-core | beyond that | beyond that, CPU |\n"
            "| --- | ---: | ---: | ---: |"
        )
        for label, r in report["imports"].items():
            print(
                f"| {label} | {r['langgraph_ms']:.0f} | {r['beyond_langgraph_ms']:.0f} "
                f"| {r['beyond_langgraph_cpu_ms']:.0f} |"
            )
        print()
    if not args.no_steps:
        import bench_step

        report["steps"] = bench_step.run(quick=args.quick)
        print(bench_step.table(report["steps"]) + "\n")
    report["machine"]["load_average_end"] = os.getloadavg()
    report["machine"]["commit_end"] = machine()["commit"]  # others may commit during a run
    report["machine"]["duration_s"] = round(time.monotonic() - started)
    out = HERE / "results" / ("quick.json" if args.quick else "latest.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"machine: {json.dumps(report['machine'])}\nversions: {json.dumps(report['versions'])}")
    print(f"raw numbers: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
