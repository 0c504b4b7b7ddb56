"""Lease owner ids: which owners count as dead processes on this host."""

from __future__ import annotations

import socket
import subprocess
import sys

from spanpoint.stores.base import new_owner_id, owner_is_dead_here, process_owner_id


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_finished_local_process_is_dead_and_this_one_is_not() -> None:
    host = new_owner_id().rsplit(":", 2)[0]
    assert owner_is_dead_here(f"{host}:{dead_pid()}:abc")
    assert not owner_is_dead_here(process_owner_id())


def test_a_pid_from_another_pid_namespace_is_never_judged_here() -> None:
    # Containers of one pod share the host name but not their pids.
    other = f"{socket.gethostname()}#1:{dead_pid()}:abc"
    assert not owner_is_dead_here(other)


def test_another_host_or_a_malformed_owner_is_never_dead() -> None:
    assert not owner_is_dead_here(f"another-pod:{dead_pid()}:abc")
    assert not owner_is_dead_here("no-pid-here")


def test_owner_ids_are_per_process_and_unique_per_call() -> None:
    assert process_owner_id() == process_owner_id()
    assert new_owner_id() != new_owner_id()


def test_execution_owner_ids_are_unique_and_keep_the_process_part() -> None:
    """Each execution is its own lease owner; its process part still tells a dead process."""
    from concurrent.futures import ThreadPoolExecutor

    from spanpoint.stores.base import execution_owner_id

    with ThreadPoolExecutor(max_workers=4) as pool:
        owners = list(pool.map(lambda _: execution_owner_id(), range(2000)))
    assert len(set(owners)) == 2000
    assert all(o.startswith(process_owner_id() + ".") for o in owners)
    assert not owner_is_dead_here(owners[0])  # this process: alive
    host, _, token = owners[0].rsplit(":", 2)
    assert owner_is_dead_here(f"{host}:{dead_pid()}:{token}")  # same form, a dead pid


def test_a_forked_child_is_another_owner_with_its_own_pid() -> None:
    import os

    parent = process_owner_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its owner id and leave at once
        try:
            os.write(write, process_owner_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child != parent and child.rsplit(":", 2)[1] == str(pid)
    assert process_owner_id() == parent  # the parent keeps its own


def test_a_twin_machine_of_the_same_host_name_and_pid_namespace_is_never_judged_here() -> None:
    """Host names and pid namespace numbers repeat across machines; the boot id does not."""
    host, namespace, machine = new_owner_id().rsplit(":", 2)[0].split("#")
    pid = dead_pid()
    assert owner_is_dead_here(f"{host}#{namespace}#{machine}:{pid}:abc")
    assert not owner_is_dead_here(f"{host}#{namespace}#{'f' * 32}:{pid}:abc")
    assert not owner_is_dead_here(f"{host}#{namespace}:{pid}:abc")  # no machine part: unknown


def test_owner_ids_carry_a_random_token_of_128_bits() -> None:
    token = new_owner_id().rsplit(":", 1)[1]
    assert len(token) == 32 and int(token, 16) >= 0
