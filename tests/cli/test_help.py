"""`envguard --help` is read on an 80-column terminal by someone deciding what to run: the
commands grouped by the moment they are for, each description whole, and which of diff
and check is the one before a relaunch."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

from envguard.cli import app
from envguard.cli.program import PANELS


def _help(*args: str, columns: str = "80") -> str:
    result = subprocess.run(
        [sys.executable, "-m", "envguard", *args, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": columns, "NO_COLOR": "1"},
        timeout=120,
        check=True,
    )
    return result.stdout


def _sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """The root help's sections: their titles, and the (command, description) rows."""
    found: dict[str, list[tuple[str, str]]] = {}
    title = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            found[title] = []
        elif title and line.startswith("  ") and not line.startswith("   "):
            name, _, description = line.strip().partition(" ")
            found[title].append((name, description.strip()))
    return found


def _first_sentence(callback: object) -> str:
    doc = inspect.getdoc(callback) or ""
    return " ".join(doc.split("\n\n")[0].split())


def test_the_commands_are_grouped_by_moment_each_description_whole() -> None:
    """At 80 columns: one section a moment, in the order a user meets them; every command
    in one, its description its docstring's whole first sentence (none cut with '...')."""
    text = _help()
    sections = _sections(text)
    moments = [t for t in sections if t in PANELS]
    assert moments == list(PANELS)
    assert moments[:4] == [
        "After a good run",
        "Before a relaunch",
        "Before an install",
        "After an incident",
    ]
    assert "Commands" not in sections  # no command left outside a moment
    listed = {name: description for t in moments for name, description in sections[t]}
    expected = {
        info.name or info.callback.__name__.replace("_", "-").rstrip("-"): info.callback
        for info in app.registered_commands
        if info.callback is not None
    }
    assert set(listed) == set(expected)
    for name, callback in expected.items():
        assert listed[name] == _first_sentence(callback), name
    assert not any(d.endswith("...") for d in listed.values())
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_help_says_diff_is_for_a_person_and_check_for_ci() -> None:
    text = " ".join(_help().split())
    assert "diff is for a person" in text and "check is for CI" in text
    sections = _sections(_help())
    assert sections["Before a relaunch"][0][0] == "diff"
    assert "check" in [n for n, _ in sections["Gates: CI and the cluster"]]


@pytest.mark.parametrize("command", [i.name or i.callback.__name__ for i in app.registered_commands if i.callback])  # fmt: skip
def test_each_command_help_fits_80_columns(command: str) -> None:
    """A command's own --help opens with its description whole, and no line runs past 80."""
    name = command.replace("_", "-").rstrip("-")
    text = _help(name)
    assert max(len(line) for line in text.splitlines()) <= 80
    first = next(i for i in app.registered_commands if (i.name or i.callback.__name__) == command)
    assert _first_sentence(first.callback) in " ".join(text.split())
