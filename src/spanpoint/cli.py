"""The ``spanpoint`` command: the demo, and a look at durable runs in a checkpoint store.

``spanpoint demo`` runs the offline ticket demo; ``spanpoint runs`` lists runs (``--waiting``:
those waiting for input, which ``spanpoint input RUN_ID NAME --json VALUE`` provides);
``spanpoint show RUN_ID`` prints a run's boundaries as a tree per attempt (executed, replayed
or failed, with durations); ``spanpoint diff RUN_A RUN_B`` names the first boundary where two
runs diverge (``--json``: stable JSON), and ``spanpoint diff A.json B.json`` compares two
cassette files call by call; ``spanpoint fork RUN_ID --at BOUNDARY --output JSON`` forks a
recorded run at one call with another output; ``spanpoint gc --older-than 30d`` deletes old
runs (retention); ``spanpoint doctor`` says where checkpoints and traces go.
Nothing imports this module.

Everything printed that came from a user or a store (run ids, names, paths, exception
messages, store descriptions) goes through :func:`spanpoint._terminal.visible`: Rich markup in
it is printed literally and control characters (ANSI and OSC escape sequences) as escapes.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from spanpoint import __version__
from spanpoint._terminal import quoted, visible
from spanpoint.calls.cost import Totals, run_cost
from spanpoint.errors import SpanpointError
from spanpoint.stores import CheckpointStore, RunRecord, open_store
from spanpoint.stores.base import RunCursor

app = typer.Typer(
    name="spanpoint",
    help="Durable runs for LangGraph agents: a checkpoint is a span.",
    no_args_is_help=True,
    add_completion=False,
)
# emoji=False: ``:name:`` in a run id or a message is text, not an emoji code.
console = Console(emoji=False)

# Enough for any store a terminal can show; beyond it SQLite's integers overflow.
MAX_LIMIT = 1_000_000

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store address: a SQLite path, 'memory' or a postgresql:// URL "
        "(default: $SPANPOINT_STORE, else .spanpoint/checkpoints.db).",
        envvar="SPANPOINT_STORE",
        show_default=False,
    ),
]


@contextmanager
def _refused() -> Iterator[None]:
    """A :class:`SpanpointError` in the block ends the command: its message, exit status 2
    (every one names the bad input and the fix)."""
    try:
        yield
    except SpanpointError as exc:
        console.print(f"[red]error:[/] {visible(exc)}")
        raise typer.Exit(2) from exc


def _open(address: str | None) -> CheckpointStore:
    with _refused():
        return open_store(address)


@contextmanager
def _opened(address: str | None) -> Iterator[CheckpointStore]:
    """The store of one command, closed after the block; errors as :func:`_refused`."""
    st = _open(address)
    try:
        with _refused():
            yield st
    finally:
        st.close()


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _check_limit(value: int) -> int:
    if not 1 <= value <= MAX_LIMIT:
        raise typer.BadParameter(f"{value} is not a number of runs; use 1 to {MAX_LIMIT}")
    return value


@app.command()
def runs(
    store: StoreOption = None,
    limit: Annotated[
        int,
        typer.Option(help="How many runs to list, newest first.", callback=_check_limit),
    ] = 50,
    waiting: Annotated[
        bool, typer.Option("--waiting", help="List the runs waiting for input instead.")
    ] = False,
    cursor: Annotated[
        str | None,
        typer.Option(
            "--cursor",
            help="List the page after this one: the cursor printed under the previous page.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List the durable runs in the store, a page at a time."""
    after = None if cursor is None else _decode_cursor(cursor)
    st = _open(store)
    if waiting:
        _list_waits(st)
        return
    # One more than the page: whether a next page exists, without counting the runs.
    records = st.list_runs(limit=limit + 1, after=after)
    more = len(records) > limit
    records = records[:limit]
    if not records:
        where = "after this cursor " if after else ""
        console.print(f"no runs {where}in {visible(st.description)}")
        return
    table = Table(title=f"runs in {visible(st.description)}")
    for column in ("run id", "name", "attempts", "committed", "last status", "updated"):
        table.add_column(column)
    costs = Table(title="model calls: tokens and cost (replayed: what replay saved)")
    for column in ("run id", "executed", "replayed"):
        costs.add_column(column)
    for r in records:
        table.add_row(
            visible(r.run_id),
            visible(r.name or ""),
            str(r.attempts),
            str(r.committed),
            visible(r.status),
            _when(r.updated_at),
        )
        cost = run_cost(st, r.run_id)  # both totals, per run of the page
        if cost.executed.calls or cost.replayed.calls:
            costs.add_row(visible(r.run_id), _totals(cost.executed), _totals(cost.replayed))
    console.print(table)
    if costs.row_count:
        console.print(costs)
    if more:
        console.print(  # soft_wrap: one line, so the command can be copied as it is
            f"next page: spanpoint runs --limit {limit} --cursor {_encode_cursor(records[-1])}",
            soft_wrap=True,
        )


def _encode_cursor(record: RunRecord) -> str:
    """The last run of a page as a token safe to paste into a shell (no quoting needed)."""
    text = json.dumps([repr(record.updated_at), record.run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def _decode_cursor(token: str) -> RunCursor:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        updated, run_id = json.loads(raw)
        cursor = (float(updated), run_id)
        if not isinstance(run_id, str) or cursor[0] != cursor[0]:  # a str, and not nan
            raise ValueError
    except (ValueError, TypeError, binascii.Error):
        raise typer.BadParameter(
            f"{token!r} is not a cursor; pass the one printed under the previous page "
            "(`next page: spanpoint runs --cursor ...`)",
            param_hint="--cursor",
        ) from None
    return cursor


def _totals(totals: Totals) -> str:
    """Model calls, tokens and cost: ``3 calls, 1,234 tok, $0.012300 (1 unpriced)``."""
    return totals.summary()  # one form for show, runs and diff


def _list_waits(st: CheckpointStore) -> None:
    waits = st.list_waits(pending_only=True)
    if not waits:
        console.print(f"no run is waiting for input in {visible(st.description)}")
        return
    table = Table(title=f"runs waiting for input in {visible(st.description)}")
    for column in ("run id", "wait", "question", "schema", "since"):
        table.add_column(column)
    for w in waits:
        schema = json.dumps(w.schema) if w.schema else ""
        table.add_row(
            visible(w.run_id),
            visible(w.name),
            visible(w.question or ""),
            visible(schema),
            _when(w.created_at),
        )
    console.print(table)
    console.print("provide a value: spanpoint input RUN_ID WAIT --json VALUE, then rerun the run")


@app.command("input")
def input_(
    run_id: str,
    name: Annotated[str, typer.Argument(help="The wait's name, as `runs --waiting` lists it.")],
    value: Annotated[str, typer.Option("--json", help="The value, as JSON (true, 3, '\"yes\"').")],
    store: StoreOption = None,
) -> None:
    """Provide the input a waiting run asked for; run the run again to continue it."""
    from spanpoint.waits import provide_input  # for import time: each command loads its own

    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        console.print(
            f"[red]error:[/] --json {visible(repr(value))} is not JSON ({visible(exc)}); "
            "quote strings: '\"yes\"'"
        )
        raise typer.Exit(2) from exc
    with _refused():
        provide_input(run_id, name, parsed, store=_open(store))
    console.print(f"provided {quoted(name)} for run {quoted(run_id)}; run it again to continue")


@app.command()
def demo(
    run_id: Annotated[
        str | None, typer.Option(help="Run id to use (default: a new one per invocation).")
    ] = None,
) -> None:
    """Run the offline ticket demo: a crash, then a replay, printed as trace trees."""
    from spanpoint.demo import main as run_demo  # for import time: LangChain, only for the demo

    raise typer.Exit(run_demo(run_id=run_id, echo=console.print))


@dataclass
class _Node:
    label: str
    span_id: str
    parent_span_id: str | None
    started_at_ns: int
    children: list[_Node] = field(default_factory=list)


_MARKS = {
    "ok": "[green]✓ executed[/]",
    "replayed": "[cyan]↺ replayed[/]",
    "interrupted": "[yellow]⏸ interrupted[/]",
    "error": "[red]✗ failed",
}


def _duration(start_ns: int, end_ns: int) -> str:
    ms = max(0, end_ns - start_ns) / 1e6
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


@app.command()
def show(run_id: str, store: StoreOption = None) -> None:
    """Print a run's boundaries as a tree, one tree per attempt."""
    st = _open(store)
    record = st.get_run(run_id)
    if record is None:
        console.print(
            f"[red]no run {quoted(run_id)} in {visible(st.description)}[/]; see `spanpoint runs`"
        )
        raise typer.Exit(1)
    from spanpoint.forks import attempt_steps  # for import time: not for --help

    checkpoints, journal = st.list_checkpoints(run_id), st.list_journal(run_id)
    attempts: dict[int, list[_Node]] = defaultdict(list)
    # A fork not run yet has no attempt: it shows the calls it was given (attempt 0).
    numbers = list(range(1, record.attempts + 1)) or [0]
    for attempt in numbers:
        # path#N, as diff pairs boundaries and fork --at names them.
        for step in attempt_steps(checkpoints, journal, attempt):
            mark = _MARKS.get(step.status, visible(step.status)) + (
                f": {visible(step.error)}[/]"
                if step.error
                else ("[/]" if step.status == "error" else "")
            )
            took = _duration(step.started_at_ns, step.ended_at_ns)
            label = f"{visible(step.kind)} [bold]{visible(step.label)}[/]  {mark}  {took}"
            node = _Node(label, step.span_id, step.parent_span_id, step.started_at_ns)
            attempts[attempt].append(node)
    title = (
        f"run [bold]{visible(run_id)}[/] ({visible(record.name or 'unnamed')}) — "
        f"{record.attempts} attempt(s), last status {visible(record.status)}"
    )
    root = Tree(title)
    for attempt in numbers:
        if not attempt:
            branch = root.add("not run yet: the calls it starts from (`spanpoint fork`)")
            _attach(branch, attempts.get(attempt, []))
            continue
        cost = run_cost(st, run_id, attempt=attempt)  # both totals per attempt
        branch = root.add(
            f"attempt {attempt}  executed: {_totals(cost.executed)}; "
            f"replayed: {_totals(cost.replayed)}"
        )
        _attach(branch, attempts.get(attempt, []))
    console.print(root)
    total = run_cost(st, run_id)
    console.print(
        f"model calls executed: {_totals(total.executed)}; replayed: {_totals(total.replayed)}"
        f"; saved by replay: ${total.saved:.6f} {total.currency}"
    )


def _attach(branch: Tree, nodes: list[_Node]) -> None:
    by_span = {n.span_id: n for n in nodes}
    roots: list[_Node] = []
    for node in sorted(nodes, key=lambda n: n.started_at_ns):
        parent = by_span.get(node.parent_span_id or "")
        (parent.children if parent else roots).append(node)
    if not roots:
        branch.add("[dim]no boundary recorded (the attempt may have crashed before any commit)[/]")

    def add(tree: Tree, node: _Node) -> None:
        sub = tree.add(node.label)
        for child in node.children:
            add(sub, child)

    for node in roots:
        add(branch, node)


@app.command()
def diff(
    run_a: Annotated[str, typer.Argument(help="Run A, e.g. the original.")],
    run_b: Annotated[str, typer.Argument(help="Run B, e.g. its fork.")],
    store: StoreOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the diff as JSON (shape: docs/cli.md).")
    ] = False,
) -> None:
    """Compare two runs boundary by boundary and name the first one where they diverge; or
    two cassette files (two paths to files) call by call.

    Exit status: 0 when the runs are equal, 1 when they diverge, 2 on bad input.
    """
    from spanpoint.diffs import diff_runs  # for import time: not loaded for --help
    from spanpoint.diffs import render as render_diff  # for import time: likewise

    if Path(run_a).is_file() and Path(run_b).is_file():
        _diff_cassettes(run_a, run_b, as_json)
    with _opened(store) as st:
        result = diff_runs(st, run_a, run_b)
    if as_json:
        # ASCII JSON: whatever a run holds, no control character reaches the terminal raw.
        typer.echo(json.dumps(result.to_dict(), sort_keys=True, indent=2, ensure_ascii=True))
    else:
        for line in render_diff(result):
            console.print(line, soft_wrap=True)
    raise typer.Exit(0 if result.equal else 1)


def _diff_cassettes(a: str, b: str, as_json: bool) -> None:
    from spanpoint.diffs.cassettes import (  # for import time: loads LangChain
        diff_cassettes,
        render_cassette_diff,
    )

    with _refused():
        result = diff_cassettes(a, b)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), sort_keys=True, indent=2, ensure_ascii=True))
    else:
        for line in render_cassette_diff(result):
            console.print(visible(line), soft_wrap=True)
    raise typer.Exit(0 if result.equal else 1)


@app.command()
def fork(
    run_id: Annotated[str, typer.Argument(help="The recorded run to fork.")],
    at: Annotated[
        str,
        typer.Option(
            "--at",
            help="The boundary whose output to override: a path as `spanpoint show` prints it, "
            "with #N for its Nth call (lookup_ticket#2).",
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            help='Its output in the fork, as JSON: a tool result \'"text"\' or \'{"content": '
            '"..."}\', a model reply \'{"content": "...", "tool_calls": [...]}\'. Omitted: '
            "the cut and every call after it execute again.",
        ),
    ] = None,
    as_: Annotated[
        str | None,
        typer.Option("--as", help="The new run's id (default: RUN_ID.fork-<8 hex digits>)."),
    ] = None,
    store: StoreOption = None,
) -> None:
    """Fork a recorded run at one call with another output; then run your program again with
    the new run id: the calls before the cut replay, the cut returns the output given, and
    after it only the calls whose input changed execute. Without --output the cut and every
    call after it execute again.

    Exit status: 0 when forked, 2 on bad input (nothing written).
    """
    # For import time: a fork builds LangChain's message types.
    from spanpoint.forks import RERUN
    from spanpoint.forks import fork as fork_run

    value = RERUN
    if output is not None:
        try:
            value = json.loads(output)
        except ValueError as exc:
            console.print(
                f"[red]error:[/] --output must be JSON ({visible(exc)}); a text is quoted: "
                "--output '\"ticket 8: closed\"'"
            )
            raise typer.Exit(2) from exc
    with _opened(store) as st:
        new_id = fork_run(run_id, at=at, output=value, new_run_id=as_, store=st)
    what = f"at {quoted(at)}" if output is not None else f"(it executes again from {quoted(at)})"
    console.print(
        f"forked run {quoted(run_id)} {what} as [bold]{visible(new_id)}[/]: run your "
        f"program again under spanpoint.run({visible(repr(new_id))}) with the same input "
        "(on a new thread, if your graph keeps one in a persistent checkpointer)",
        soft_wrap=True,
    )


@app.command()
def doctor(store: StoreOption = None) -> None:
    """Say which store and telemetry destinations spanpoint would use, check the store opens,
    and send one probe per signal to say what each OTLP or console exporter delivered."""
    import os
    from pathlib import Path

    # For import time: the OTel SDK loads for this command only.
    from spanpoint.config import DEFAULT_TRACE_FILE
    from spanpoint.telemetry import exporters

    console.print(f"spanpoint {__version__}")
    st = _open(store)
    # The newest run only: doctor answers at once whatever the store holds.
    newest = st.list_runs(limit=1)
    latest = f"newest run updated {_when(newest[0].updated_at)}" if newest else "no runs yet"
    console.print(f"store: {visible(st.description)} (opens; {latest})")
    trace_file = Path(os.environ.get("SPANPOINT_TRACE_FILE", DEFAULT_TRACE_FILE))
    files = {
        "traces": str(trace_file),
        "logs": str(trace_file.parent / "logs.jsonl"),
        "metrics": str(trace_file.parent / "metrics.jsonl"),
    }
    with _refused():  # a malformed OTEL_* variable
        probes = exporters.probe()
    console.print("telemetry (one probe span, log record and metric sent now):")
    for item in probes:
        if "file" in item.config.kinds:
            console.print(f"{item.signal}: file {visible(files[item.signal])}")
        if not item.config.kinds:
            console.print(f"{item.signal}: {visible(item.config.describe())}")
        for tally in item.tallies:
            text = visible(tally.summary())
            console.print(f"{item.signal}: {f'[red]{text}[/]' if tally.failed else text}")
            if tally.hint():
                console.print(f"  [yellow]{tally.hint()}[/]")


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or plain seconds, as seconds."""
    value = text.strip().lower()
    unit = _DURATION_UNITS.get(value[-1:], 0)
    number = value[:-1] if unit else value
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):  # also refuses nan, inf and 1e999
        raise typer.BadParameter(
            f"{text!r} is not an age; use a positive number with a unit: 30d, 12h, 90m, 45s, 2w"
        )
    return seconds


@app.command()
def gc(
    older_than: Annotated[
        str,
        typer.Option("--older-than", help="Delete runs not updated for this long: 30d, 12h, 2w."),
    ],
    store: StoreOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count the runs that would be deleted.")
    ] = False,
) -> None:
    """Delete old runs with their checkpoints, journal and waits, and once-tokens (the
    guard's resume claims) spent or expired as long ago (retention)."""
    import time

    seconds = _parse_age(older_than)
    with _opened(store) as st:
        if dry_run:
            cutoff = time.time() - seconds
            old = [r for r in st.list_runs(limit=10_000_000) if r.updated_at < cutoff]
            console.print(
                f"{len(old)} runs older than {visible(older_than)} in {visible(st.description)}"
            )
            return
        deleted = st.delete_runs_older_than(seconds)
    console.print(
        f"deleted {deleted} runs older than {visible(older_than)} from {visible(st.description)}"
    )


def main() -> None:
    """Entry point of the ``spanpoint`` console script."""
    app()
