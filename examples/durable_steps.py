"""Three durable steps; the third fails on the first attempt, the rerun replays the first two.

    python examples/durable_steps.py [STORE]

No LangGraph here: ``@spanpoint.step`` makes any function a replay boundary. The first
attempt loads and summarizes the ticket, then "publish" fails; the second attempt with the
same run id returns the stored results of load and summarize (their bodies do not run) and
executes only publish. Traces go to ``.spanpoint/traces.jsonl`` unless an OTLP endpoint is set.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import spanpoint

EXECUTED: Counter[str] = Counter()
ATTEMPT = {"n": 0}


class PublishError(RuntimeError):
    """The publishing service was down."""


@spanpoint.step
def load_ticket(ticket_id: str) -> dict[str, str]:
    EXECUTED["load_ticket"] += 1
    return {"id": ticket_id, "body": "The printer on floor 3 is on fire."}


@spanpoint.step
def summarize(ticket: dict[str, str]) -> str:
    EXECUTED["summarize"] += 1  # imagine a paid model call here
    return f"[{ticket['id']}] {ticket['body'][:24]}…"


@spanpoint.step
def publish(summary: str) -> str:
    EXECUTED["publish"] += 1
    if ATTEMPT["n"] == 1:
        raise PublishError("the wiki timed out")
    return f"published: {summary}"


def main(store: str) -> None:
    spanpoint.configure(store=store)
    run_id = f"ticket-{uuid.uuid4().hex[:6]}"
    for attempt in (1, 2):
        ATTEMPT["n"] = attempt
        try:
            with spanpoint.run(run_id, name="durable-steps"):
                print(f"attempt {attempt}:", publish(summarize(load_ticket(run_id))))
        except PublishError as exc:
            print(f"attempt {attempt} failed: {exc}")
    print("bodies executed:", dict(EXECUTED))
    assert Counter(load_ticket=1, summarize=1, publish=2) == EXECUTED, EXECUTED
    print(f"inspect it: spanpoint show {run_id} --store {store}")


if __name__ == "__main__":
    default = str(Path(tempfile.mkdtemp(prefix="spanpoint-")) / "checkpoints.db")
    main(sys.argv[1] if len(sys.argv) > 1 else default)
