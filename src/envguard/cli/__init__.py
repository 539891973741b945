"""The envguard command line: parse, call the core, render, exit. No logic lives here.

One module per family of commands: capture (snapshot, show, list, log, schema), compare
(diff, check, fleet), restore (rebuild, export, restore, bisect), gate, guard (guard, history,
undo, protect); program holds the app and what they share.
"""

from envguard.cli import capture, compare, gate, guard, restore  # register the commands on app
from envguard.cli.program import app, command_line, main

__all__ = ["app", "capture", "command_line", "compare", "gate", "guard", "main", "restore"]
