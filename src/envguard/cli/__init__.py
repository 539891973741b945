"""The envguard command line: parse, call the core, render, exit. No logic lives here.

One module per family of commands: capture (snapshot, show, list, log, schema), compare
(diff, check, fleet), restore (rebuild, export, restore, bisect), gate, guard (guard, history,
undo, protect); program holds the app and what they share. A run imports the module of the
command it runs (program.COMMANDS); ``app`` here is the app with every command registered.
"""

from typing import TYPE_CHECKING, Any

from envguard.cli.program import command_line, main

if TYPE_CHECKING:
    from envguard.cli import capture, compare, gate, guard, restore
    from envguard.cli.program import app

__all__ = ["app", "capture", "command_line", "compare", "gate", "guard", "main", "restore"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from envguard.cli import program

        program.load_commands()
        return program.app
    raise AttributeError(f"module 'envguard.cli' has no attribute {name!r}")
