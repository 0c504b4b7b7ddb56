"""A three-step durable run for crash tests: load → transform → publish.

Usage: three_steps.py RUN_ID STORE EFFECTS_FILE [--crash-in STEP] [--how exit|sigkill]

Each step appends its name to EFFECTS_FILE under an exclusive lock *before* returning, so the
side effect of a step killed afterwards is still counted. ``--crash-in`` kills the process
inside that step, after its side effect and before its boundary commits.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal

import spanpoint


def side_effect(path: str, name: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
        fcntl.flock(fh, fcntl.LOCK_UN)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_id")
    parser.add_argument("store")
    parser.add_argument("effects")
    parser.add_argument("--crash-in", default="")
    parser.add_argument("--how", choices=["exit", "sigkill"], default="exit")
    args = parser.parse_args()

    def maybe_crash(step: str) -> None:
        if args.crash_in == step:
            if args.how == "exit":
                os._exit(17)
            os.kill(os.getpid(), signal.SIGKILL)

    @spanpoint.step
    def load(ticket: str) -> dict[str, str]:
        side_effect(args.effects, "load")
        maybe_crash("load")
        return {"ticket": ticket, "body": f"printer on fire ({ticket})"}

    @spanpoint.step
    def transform(doc: dict[str, str]) -> dict[str, str]:
        side_effect(args.effects, "transform")
        maybe_crash("transform")
        return {**doc, "summary": doc["body"].upper()}

    @spanpoint.step
    def publish(doc: dict[str, str]) -> str:
        side_effect(args.effects, "publish")
        maybe_crash("publish")
        return f"published {doc['ticket']}: {doc['summary']}"

    spanpoint.configure(store=args.store)
    with spanpoint.run(args.run_id, name="three-steps"):
        result = publish(transform(load(args.run_id)))
    print(json.dumps({"result": result}))


if __name__ == "__main__":
    main()
