"""typer's speed-ups (cli/lazy.py): the group builds a command only when it runs, and its
--help is what typer's fully built group prints."""

from __future__ import annotations

import pytest
import typer.main

from envguard.cli import app, command_line

COMMANDS = ("snapshot", "show", "list", "log", "diff", "check", "schema", "rebuild")
COMMANDS += ("restore", "bisect", "export", "fleet")


@pytest.mark.parametrize("width", [50, 80, 200])
def test_help_lists_the_commands_as_typer_would_without_building_them(width: int) -> None:
    lazy, full = command_line(), typer.main.get_command(app)
    for group in (lazy, full):
        group.context_settings = {"terminal_width": width, "max_content_width": width}
    texts = [
        g.get_help(g.make_context("envguard", [], resilient_parsing=True)) for g in (lazy, full)
    ]
    assert texts[0] == texts[1]
    assert all(f"  {c} " in texts[0] for c in COMMANDS)
    assert lazy.commands._built == {}  # type: ignore[attr-defined]


def test_a_command_is_built_when_it_runs_and_only_it() -> None:
    lazy, full = command_line(), typer.main.get_command(app)
    ctx = lazy.make_context("envguard", ["schema", "drift"], resilient_parsing=True)
    built = lazy.get_command(ctx, "schema")
    assert list(lazy.commands._built) == ["schema"]  # type: ignore[attr-defined]
    assert built is not None
    expected = full.get_command(ctx, "schema")  # type: ignore[attr-defined]
    assert [p.name for p in built.params] == [p.name for p in expected.params]
