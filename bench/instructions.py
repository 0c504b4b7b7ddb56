"""Instructions per invoke, counted by valgrind: a figure machine load cannot move.

CPU time on a small shared machine moves by several per cent from one run to the next, more
than the differences a release is held to. valgrind's ``callgrind`` counts the instructions a
process executes (``Ir``), the same on every run of the same code. Each setup runs twice in a
fresh process: the warm-up plus ``--short`` invokes, then plus ``--long`` invokes; the
difference over ``long - short`` invokes is its instructions per invoke, start-up and imports
cancelled out. ``--baseline SRC`` counts each spanpoint setup on another checkout's code too.

Instructions are not time: they leave out the kernel (SQLite's writes), cache misses and
waits. Read them beside ``bench/run.py``'s CPU ratios, as the part of a difference that is
code.

Run: ``.venv/bin/python bench/instructions.py --setups none,spanpoint_calls
--baseline /tmp/prev/src`` (about 4 minutes per setup and tree, two at a time).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: The invoke loop a counted process runs: ``python -c PROBE SETUP WORKLOAD N``.
PROBE = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import setups
setup, workload, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
invoker = setups.make(setup, workload, Path(tempfile.mkdtemp()), setups.Telemetry())
invoker.open_batch()
for i in range(1, 31):
    invoker.call(i)
for i in range(31, 31 + n):
    invoker.call(i)
invoker.close_batch()
"""


def instructions(setup: str, workload: str, invokes: int, src: Path | None) -> int:
    """The instructions one process executes: warm-up, then ``invokes`` invokes."""
    env = {**os.environ}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                sys.executable, "-c", PROBE, str(HERE), setup, workload, str(invokes),
            ],
            capture_output=True, text=True, env=env, timeout=3600,
        )  # fmt: skip
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"{setup}: valgrind failed:\n{done.stderr[-2000:]}")
        return int(found.group(1))


def per_invoke(setup: str, workload: str, short: int, long: int, src: Path | None) -> float:
    """Instructions per invoke: the long run's count less the short run's, per extra invoke."""
    return (
        instructions(setup, workload, long, src) - instructions(setup, workload, short, src)
    ) / (long - short)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="agent")
    parser.add_argument("--setups", default="none,spanpoint_calls")
    parser.add_argument("--short", type=int, default=10)
    parser.add_argument("--long", type=int, default=60)
    parser.add_argument("--baseline", type=Path, help="the src/ folder of another checkout")
    parser.add_argument("--jobs", type=int, default=2, help="processes counted at once")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py needs valgrind (apt-get install valgrind)")
    rows = [(name, None) for name in args.setups.split(",")]
    if args.baseline is not None:
        rows += [(name, args.baseline) for name, _ in rows if name.startswith("spanpoint")]
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = list(
            pool.map(
                lambda row: per_invoke(row[0], args.workload, args.short, args.long, row[1]),
                rows,
            )
        )
    found = {(name, src): count for (name, src), count in zip(rows, counts, strict=True)}
    floor = found.get(("none", None))
    print(f"### {args.workload}: instructions per invoke (millions)\n")
    print("| setup | Ir/invoke (M) | against none | against baseline |")
    print("| --- | ---: | ---: | ---: |")
    for (name, src), count in found.items():
        label = f"{name}@baseline" if src is not None else name
        ratio = f"{count / floor:.3f}" if floor else "–"
        base = found.get((name, args.baseline)) if src is None and args.baseline else None
        against = f"{count / base:.3f}" if base else "–"
        print(f"| {label} | {count / 1e6:.2f} | {ratio} | {against} |")


if __name__ == "__main__":
    main()
