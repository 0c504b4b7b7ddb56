"""Render the "Latest results" of bench/README.md from ``bench/results/latest.json``.

Run after ``bench/run.py``: ``.venv/bin/python bench/report.py > /tmp/results.md`` and paste the
output between the README's results heading and "Where the time goes".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LATEST = Path(__file__).resolve().parent / "results" / "latest.json"
COMPARED = ("spanpoint_zero_code", "spanpoint_graph_call", "spanpoint_calls", "otel_genai",
            "openllmetry", "openinference")  # fmt: skip


def _holds(value: float, target: float, floor: float | None = None) -> str:
    if value <= target:
        return "yes"
    if floor is not None and floor > target:
        return "no: its floor is above the target"
    return "no"


# The floor setup of each target: the same workload with only what the target's setup cannot
# avoid (a bare span, the store's lease and commit), done by hand (bench/setups.py).
FLOORS = {
    "spanpoint_zero_code": "floor_span",
    "spanpoint_graph_call": "floor_graph_call_1w",
    "spanpoint_calls": "floor_calls_1w",
}
# The same with the lease single-flight adds before each body (issue 7).
LEASED_FLOORS = {"spanpoint_graph_call": "floor_graph_call", "spanpoint_calls": "floor_calls"}


def _until(m: dict[str, Any]) -> str:
    end = m.get("commit_end")
    return f" (`{end}` when it ended)" if end and end != m.get("commit") else ""


def header(d: dict[str, Any]) -> str:
    """Where and when the numbers were taken."""
    m, v = d["machine"], d["versions"]
    return (
        f"{m['date']}, code at `{m.get('commit', '?')}`{_until(m)}, Python {m['python']}, "
        f"{m['cpu']}, "
        f"**{m['cores']} cores shared with other jobs: load average "
        f"{m['load_average'][0]:.0f} at the start, {m['load_average_end'][0]:.0f} at the end**, "
        f"{m['duration_s'] // 60} minutes. langgraph {v['langgraph']}, langchain "
        f"{v['langchain']}, langchain-core {v['langchain-core']}, opentelemetry-sdk "
        f"{v['opentelemetry-sdk']}. Ratios are medians relative to `none`; the paired CPU ratio "
        "is the steadiest number on a shared machine, the wall ratio the one the targets are "
        "written in.\n"
    )


def targets(d: dict[str, Any]) -> str:
    """The issue's targets, each with its measurement and whether it holds."""
    w, st, imp = d["workloads"], d["steps"], d["imports"]["spanpoint"]
    rows = [
        "| target (issue 9) | spanpoint | paired CPU ratio | paired wall ratio "
        "| issue 9's floor (span + one write), paired CPU | with the lease | holds? |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, workload, setup, limit in (
        ("linear, zero-code spans ≤ 1.03", "linear", "spanpoint_zero_code", 1.03),
        ("linear, graph_call boundary + SQLite commit ≤ 1.05", "linear", "spanpoint_graph_call",
         1.05),
        ("agent, calls strategy, every call committed ≤ 1.08", "agent", "spanpoint_calls", 1.08),
        ("(agent, graph_call boundary ≤ 1.08)", "agent", "spanpoint_graph_call", 1.08),
    ):  # fmt: skip
        r = w[workload][setup]
        worst = max(r["paired_cpu_ratio"], r["paired_wall_ratio"])
        floor = w[workload].get(FLOORS[setup], {}).get("paired_cpu_ratio")
        floor_cell = f"{floor:.3f} (`{FLOORS[setup]}`)" if floor is not None else "–"
        leased = w[workload].get(LEASED_FLOORS.get(setup, ""), {}).get("paired_cpu_ratio")
        leased_cell = f"{leased:.3f}" if leased is not None else "–"
        rows.append(
            f"| {label} | `{setup}` | {r['paired_cpu_ratio']:.3f} | "
            f"{r['paired_wall_ratio']:.3f} | {floor_cell} | {leased_cell} "
            f"| {_holds(worst, limit, floor)} |"
        )
    rep, orig = w["agent"]["spanpoint_replay"], w["agent"]["spanpoint_graph_call_run"]
    cpu = rep["cpu_median_us"] / orig["cpu_median_us"]
    wall = rep["wall_median_us"] / orig["wall_median_us"]
    rows.append(
        "| replay of a completed agent run ≤ 0.10 of the original | `spanpoint_replay` / "
        f"`spanpoint_graph_call_run` | {cpu:.3f} ({rep['cpu_median_us'] / 1e3:.2f} / "
        f"{orig['cpu_median_us'] / 1e3:.1f} ms) | {wall:.3f} | | | {_holds(max(cpu, wall), 0.10)} |"
    )
    rss = {s: r.get("rss_growth_mb", 0.0) for s, r in w["linear"].items()}
    worst_rss = max(rss[s] for s in ("spanpoint_graph_call", "spanpoint_replay",
                                     "spanpoint_zero_code"))  # fmt: skip
    rows.append(
        f"| RSS growth over 10,000 invokes < 5 MB | graph_call {rss['spanpoint_graph_call']:.2f}, "
        f"replay {rss['spanpoint_replay']:.2f}, zero-code {rss['spanpoint_zero_code']:.2f} MB "
        f"(none {rss['none']:.2f}) | | | | | {_holds(worst_rss, 5)} |"
    )
    rows.append(
        f"| `import spanpoint` beyond langgraph < 100 ms | {imp['beyond_langgraph_cpu_ms']:.0f} ms "
        f"CPU, {imp['beyond_langgraph_ms']:.0f} ms wall | | | | | CPU "
        f"{_holds(imp['beyond_langgraph_cpu_ms'], 100)}, wall "
        f"{_holds(imp['beyond_langgraph_ms'], 100)} |"
    )
    times = st["executed_steps"] / st["floor_executed"]
    protocol = st.get("protocol_steps", float("nan")) / st["floor_executed"]
    rows.append(
        f"| `@step` ≤ 2× (bare span + one SQLite commit) | {st['executed_steps']:.0f} µs vs "
        f"{st['floor_executed']:.1f} µs floor | {times:.2f}× | | | {protocol:.2f}× (span, lease "
        f"and commit by hand) | {_holds(times, 2, protocol)} |"
    )
    spread = [
        abs(results["none_again"]["paired_cpu_ratio"] - 1)
        for results in w.values()
        if "none_again" in results
    ]
    if spread:
        rows.append(
            f"\nTwo identical uninstrumented processes (`none_again` against `none`) differ by up "
            f"to {max(spread) * 100:.1f} % in this run: smaller differences are noise."
        )
    return "\n".join(rows)


def competitors(d: dict[str, Any]) -> str:
    """Paired CPU ratio and spans per invoke of spanpoint and the others, per workload."""
    rows = [
        "Against the others (paired CPU ratio; spans per invoke):\n",
        "| workload | spanpoint zero-code | graph_call (commits) | calls (commits) "
        "| official GenAI | OpenLLMetry | OpenInference |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for workload, results in d["workloads"].items():
        cells = [
            f"{results[s]['paired_cpu_ratio']:.3f} ({results[s]['spans_per_invoke']:.1f})"
            if s in results
            else "–"
            for s in COMPARED
        ]
        rows.append(f"| {workload} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def full_tables(d: dict[str, Any]) -> str:
    """Every setup of every workload."""
    rows = ["Full tables (µs per invoke):\n"]
    for workload, results in d["workloads"].items():
        base = results["none"]
        rows += [
            f"| {workload} | median | ratio | paired | p95 | CPU median | CPU ratio "
            "| paired CPU | spans | RSS MB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for setup, r in results.items():
            rss = f"{r['rss_growth_mb']:.2f}" if "rss_growth_mb" in r else "–"
            rows.append(
                f"| {setup} | {r['wall_median_us']:.0f} "
                f"| {r['wall_median_us'] / base['wall_median_us']:.3f} "
                f"| {r['paired_wall_ratio']:.3f} | {r['wall_p95_us']:.0f} "
                f"| {r['cpu_median_us']:.0f} | {r['cpu_median_us'] / base['cpu_median_us']:.3f} "
                f"| {r['paired_cpu_ratio']:.3f} | {r['spans_per_invoke']:.1f} | {rss} |"
            )
        rows.append("")
    return "\n".join(rows)


def imports(d: dict[str, Any]) -> str:
    """Import times beyond LangGraph's own."""
    parts = [
        f"`{label}` {r['beyond_langgraph_ms']:.0f} / {r['beyond_langgraph_cpu_ms']:.0f}"
        for label, r in d["imports"].items()
    ]
    return (
        "Import time beyond `langgraph.graph` + `langchain_core.runnables` (ms wall / CPU, "
        "median of 5 fresh processes): " + "; ".join(parts) + ".\n"
    )


def steps(d: dict[str, Any]) -> str:
    """The core-engine step benchmark."""
    import bench_step

    return bench_step.table(d["steps"]).replace("### ", "")


def main() -> None:
    """Print the results section."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    d = json.loads(LATEST.read_text())
    print("\n\n".join([header(d), targets(d), competitors(d), full_tables(d), imports(d)]))
    print(steps(d))


if __name__ == "__main__":
    main()
