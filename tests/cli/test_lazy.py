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


def test_each_command_is_declared_with_the_module_that_registers_it() -> None:
    """program.COMMANDS names every command, in the order the app lists them, with its
    module: the entry point imports only the module of the command it runs."""
    from typer.main import get_command_name

    from envguard.cli.program import COMMANDS

    registered = {
        info.name or get_command_name(info.callback.__name__): info.callback.__module__
        for info in app.registered_commands
        if info.callback is not None
    }
    assert list(registered.items()) == [(n, f"envguard.cli.{m}") for n, m in COMMANDS.items()]


@pytest.mark.parametrize(
    ("argv", "loaded", "not_loaded"),
    [
        (["snapshot", "--help"], "envguard.cli.capture", "envguard.cli.guard"),
        (["diff", "--help"], "envguard.cli.compare", "envguard.cli.restore"),
        (["gate", "--help"], "envguard.cli.gate", "envguard.cli.capture"),
    ],
)
def test_a_run_imports_the_module_of_its_command_only(
    argv: list[str], loaded: str, not_loaded: str
) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        f"sys.argv = ['envguard', *{argv!r}]\n"
        "from envguard.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('envguard.cli.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    modules = out.strip().splitlines()[-1]
    assert repr(loaded) in modules
    assert repr(not_loaded) not in modules
    assert "Usage: envguard" in out
