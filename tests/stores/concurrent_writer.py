"""One of several processes hammering one store at once (used by test_conformance.py).

Usage: concurrent_writer.py STORE_ADDRESS WORKER_INDEX KEYS

Starts the shared run, claims every shared key and commits the ones it acquired, commits keys
of its own, writes a journal, and prints a JSON report of what it won.
"""

from __future__ import annotations

import json
import sys

from spanpoint.stores import open_store
from spanpoint.stores.base import BoundaryRecord, Checkpoint, new_owner_id


def checkpoint(key: str, worker: int) -> Checkpoint:
    return Checkpoint(
        key=key,
        run_id="shared",
        path="write",
        name="write",
        kind="step",
        ordinal=0,
        output_type="json",
        output=json.dumps({"worker": worker}).encode(),
        trace_id="0" * 31 + "1",
        span_id="0" * 15 + "1",
    )


def main() -> None:
    address, worker, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(address)
    owner = new_owner_id()
    attempt = store.start_run("shared", "concurrent")
    acquired: list[str] = []
    journal: list[BoundaryRecord] = []
    for i in range(keys):
        key = f"shared-{i}"
        claim = store.claim(key, owner, 30.0)
        if claim.state == "acquired":
            acquired.append(key)
            assert store.put(checkpoint(key, worker), owner=owner), key
        own = f"own-{worker}-{i}"
        assert store.put(checkpoint(own, worker)), own
        journal.append(
            BoundaryRecord("shared", attempt, own, "write", "write", "step", "ok", "1", None, i, i)
        )
    store.finish_run("shared", "completed", journal)
    store.close()
    print(json.dumps({"worker": worker, "attempt": attempt, "acquired": acquired}))


if __name__ == "__main__":
    main()
