"""The spanpoint command on hostile data: Rich markup and terminal escapes print as text.

Run ids, run and step names and exception messages come from users and from the store. The
runs below are made through ``spanpoint.run`` on a real SQLite store; the real CLI must list
and show them with exit code 0, printing ``[/]`` literally and every control character (ANSI
CSI, OSC, BEL, C1) as a visible escape: no raw ESC byte reaches the terminal.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import spanpoint
from spanpoint import cli
from spanpoint._terminal import visible
from spanpoint.cli import MAX_LIMIT, app
from tests.conftest import Telemetry

runner = CliRunner()

STEP = "[bold red]evil[/] \x1b[31mstep\x1b]0;pwned\x07"
MESSAGE = "[/] boom \x1b[2J \x9b31m [link=file:///etc/passwd]click[/link]"
RUN_IDS = ["evil[/]run", "\x1b[31mred\x1b]0;title\x07\x9b", "[bold]b[/bold] :smile:"]
RUN_NAME = "name[/]\x1b[1m"
RAW = ("\x1b", "\x07", "\x9b")


@pytest.fixture
def hostile_store(configured_sqlite: Telemetry, monkeypatch: pytest.MonkeyPatch) -> str:
    """Three failed runs whose ids, names, step name and exception message are hostile."""
    monkeypatch.setattr(cli.console, "width", 300)  # one line per tree node and table row

    @spanpoint.step(name="ok[/]")
    def ok(x: int) -> int:
        return x

    @spanpoint.step(name=STEP)
    def evil(x: int) -> int:
        raise ValueError(MESSAGE)

    for run_id in RUN_IDS:
        with pytest.raises(ValueError), spanpoint.run(run_id, name=RUN_NAME):
            evil(ok(1))
    return str(configured_sqlite.store.path)  # type: ignore[attr-defined]


def flat(text: str) -> str:
    """The words of a Rich error panel, without its box and line breaks."""
    return re.sub(r"\s+", " ", re.sub("[│╭╮╰╯─]", " ", text))


def no_raw_controls(text: str) -> None:
    for char in RAW:
        assert char not in text, f"raw {char!r} reached the terminal"


def test_runs_lists_hostile_run_ids_literally(hostile_store: str) -> None:
    result = runner.invoke(app, ["runs", "--store", hostile_store], terminal_width=300)
    assert result.exit_code == 0, result.output
    no_raw_controls(result.output)
    assert "evil[/]run" in result.output
    assert "\\x1b[31mred\\x1b]0;title\\x07\\x9b" in result.output
    assert "[bold]b[/bold] :smile:" in result.output  # neither markup nor an emoji code
    assert "name[/]\\x1b[1m" in result.output


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_show_prints_hostile_names_and_messages_literally(hostile_store: str, run_id: str) -> None:
    result = runner.invoke(app, ["show", run_id, "--store", hostile_store], terminal_width=300)
    assert result.exit_code == 0, result.output
    no_raw_controls(result.output)
    assert f"run {visible(run_id).replace(chr(92) + '[', '[')} (name[/]\\x1b[1m)" in result.output
    assert "step ok[/]" in result.output and "✓ executed" in result.output
    assert "step [bold red]evil[/] \\x1b[31mstep\\x1b]0;pwned\\x07" in result.output
    assert (
        "✗ failed: ValueError: [/] boom \\x1b[2J \\x9b31m [link=file:///etc/passwd]click[/link]"
        in result.output
    )


def test_show_of_an_unknown_hostile_run_id_says_so(hostile_store: str) -> None:
    result = runner.invoke(app, ["show", "nope[/]\x1b]0;x\x07", "--store", hostile_store])
    assert result.exit_code == 1, result.output
    no_raw_controls(result.output)
    assert "no run 'nope[/]\\x1b]0;x\\x07'" in result.output


@pytest.mark.parametrize("limit", ["99999999999999999999", "0", "-5", str(MAX_LIMIT + 1)])
def test_an_absurd_limit_is_a_clear_error(hostile_store: str, limit: str) -> None:
    result = runner.invoke(
        app, ["runs", "--limit", limit, "--store", hostile_store], terminal_width=300
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert f"{limit} is not a number of runs; use 1 to {MAX_LIMIT}" in flat(result.output)


def test_the_largest_limit_is_accepted(hostile_store: str) -> None:
    result = runner.invoke(app, ["runs", "--limit", str(MAX_LIMIT), "--store", hostile_store])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("age", ["inf", "1e999d", "nan", "-3d"])
def test_an_absurd_age_is_a_clear_error(hostile_store: str, age: str) -> None:
    result = runner.invoke(
        app, ["gc", "--older-than", age, "--store", hostile_store], terminal_width=300
    )
    assert result.exit_code == 2, result.output
    assert f"'{age}' is not an age" in flat(result.output)
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31m", "\\x1b[31m"),
        ("\x1b]8;;http://x\x07", "\\x1b]8;;http://x\\x07"),
        ("a\nb\tc\rd\x00", "a\\nb\\tc\\rd\\x00"),
        ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
        ("\u202eevil\u2066", "\\u202eevil\\u2066"),
        ("lone \ud800", "lone \\ud800"),
        ("[/]", "\\[/]"),  # Rich markup escaped: prints as [/]
        ("plain ünïcode ✓", "plain ünïcode ✓"),
    ],
)
def test_visible_escapes_every_control_and_markup(raw: str, shown: str) -> None:
    assert visible(raw) == shown
